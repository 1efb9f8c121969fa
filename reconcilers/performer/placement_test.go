package performer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

func perf(mutate ...func(*hourglassv1alpha1.Performer)) *hourglassv1alpha1.Performer {
	p := &hourglassv1alpha1.Performer{
		ObjectMeta: metav1.ObjectMeta{Name: "avs", Namespace: "ns"},
		Spec: hourglassv1alpha1.PerformerSpec{
			AVSAddress: "0x4444444444444444444444444444444444444444",
			Image:      "ghcr.io/example/avs-performer",
			Version:    "v1.0.0",
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func hw(h hourglassv1alpha1.HardwareRequirements) func(*hourglassv1alpha1.Performer) {
	return func(p *hourglassv1alpha1.Performer) { p.Spec.HardwareRequirements = &h }
}

func sched(s hourglassv1alpha1.Scheduling) func(*hourglassv1alpha1.Performer) {
	return func(p *hourglassv1alpha1.Performer) { p.Spec.Scheduling = &s }
}

func mustPod(t *testing.T, p *hourglassv1alpha1.Performer, table Placement) *corev1.Pod {
	t.Helper()
	pod, _, err := desiredPod(p, table)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func hasToleration(pod *corev1.Pod, key string) bool {
	for _, t := range pod.Spec.Tolerations {
		if t.Key == key {
			return true
		}
	}
	return false
}

func TestDefaultTableIsValid(t *testing.T) {
	if err := DefaultPlacement().Validate(); err != nil {
		t.Fatal(err)
	}
}

// gpuType and gpuCount become an nvidia.com/gpu limit (and the equal
// request extended resources need), a node selector and the GPU toleration.
func TestGPUPlacement(t *testing.T) {
	pod := mustPod(t, perf(hw(hourglassv1alpha1.HardwareRequirements{GPUType: "NVIDIA-A100-SXM4-80GB", GPUCount: 2})), DefaultPlacement())
	res := pod.Spec.Containers[0].Resources
	if q := res.Limits["nvidia.com/gpu"]; q.Value() != 2 {
		t.Errorf("nvidia.com/gpu limit = %v, want 2", q)
	}
	if q := res.Requests["nvidia.com/gpu"]; q.Value() != 2 {
		t.Errorf("nvidia.com/gpu request = %v, want 2", q)
	}
	if got := pod.Spec.NodeSelector["nvidia.com/gpu.product"]; got != "NVIDIA-A100-SXM4-80GB" {
		t.Errorf("node selector = %v", pod.Spec.NodeSelector)
	}
	if !hasToleration(pod, "nvidia.com/gpu") {
		t.Errorf("tolerations = %v, want nvidia.com/gpu", pod.Spec.Tolerations)
	}
	if pod.Spec.RuntimeClassName != nil {
		t.Errorf("runtime class = %v, want none", *pod.Spec.RuntimeClassName)
	}
}

// A cluster whose labels do not carry the gpuType verbatim maps it.
func TestGPUTypeMappedByOverride(t *testing.T) {
	table, err := ParsePlacement([]byte(`
gpu:
  nodeLabel: cloud.google.com/gke-accelerator
  types:
    nvidia-a100: {cloud.google.com/gke-accelerator: nvidia-tesla-a100}
`))
	if err != nil {
		t.Fatal(err)
	}
	if table.GPU.ResourceName != "nvidia.com/gpu" || len(table.TEE) != 3 {
		t.Fatalf("fields the file does not set must keep their defaults: %+v", table)
	}
	pod := mustPod(t, perf(hw(hourglassv1alpha1.HardwareRequirements{GPUType: "nvidia-a100", GPUCount: 1})), table)
	if got := pod.Spec.NodeSelector; len(got) != 1 || got["cloud.google.com/gke-accelerator"] != "nvidia-tesla-a100" {
		t.Errorf("node selector = %v", got)
	}
	pod = mustPod(t, perf(hw(hourglassv1alpha1.HardwareRequirements{GPUType: "nvidia-l4", GPUCount: 1})), table)
	if got := pod.Spec.NodeSelector["cloud.google.com/gke-accelerator"]; got != "nvidia-l4" {
		t.Errorf("an unmapped type uses nodeLabel=gpuType, got %v", pod.Spec.NodeSelector)
	}
}

func TestTEEPlacement(t *testing.T) {
	for _, tc := range []struct {
		tee          hourglassv1alpha1.TEEType
		label        string
		runtimeClass string
	}{
		{"sgx", "intel.feature.node.kubernetes.io/sgx", ""},
		{"sev", "feature.node.kubernetes.io/cpu-security.sev.snp.enabled", "kata-qemu-snp"},
		{"tdx", "feature.node.kubernetes.io/cpu-security.tdx.enabled", "kata-qemu-tdx"},
	} {
		t.Run(string(tc.tee), func(t *testing.T) {
			pod := mustPod(t, perf(hw(hourglassv1alpha1.HardwareRequirements{TEERequired: true, TEEType: tc.tee})), DefaultPlacement())
			if pod.Spec.NodeSelector[tc.label] != "true" {
				t.Errorf("node selector = %v, want %s=true", pod.Spec.NodeSelector, tc.label)
			}
			if !hasToleration(pod, string(tc.tee)) {
				t.Errorf("tolerations = %v, want key %s", pod.Spec.Tolerations, tc.tee)
			}
			if got := ptr.Deref(pod.Spec.RuntimeClassName, ""); got != tc.runtimeClass {
				t.Errorf("runtime class = %q, want %q", got, tc.runtimeClass)
			}
		})
	}
}

// The seed's SGX example repeats the mapping's selector and toleration in
// spec.scheduling: agreeing entries merge without duplicates, custom
// labels join the selector, and an explicit runtime class wins.
func TestSchedulingMergesWithPlacement(t *testing.T) {
	sgxToleration := corev1.Toleration{Key: "sgx", Operator: corev1.TolerationOpEqual, Value: "enabled", Effect: corev1.TaintEffectNoSchedule}
	pod := mustPod(t, perf(
		hw(hourglassv1alpha1.HardwareRequirements{TEERequired: true, TEEType: "sev", CustomLabels: map[string]string{"zone": "secure"}}),
		sched(hourglassv1alpha1.Scheduling{
			NodeSelector:     map[string]string{"feature.node.kubernetes.io/cpu-security.sev.snp.enabled": "true", "node.kubernetes.io/os": "bottlerocket"},
			Tolerations:      []corev1.Toleration{sgxToleration, {Key: "sev", Operator: corev1.TolerationOpEqual, Value: "enabled", Effect: corev1.TaintEffectNoSchedule}},
			RuntimeClassName: ptr.To("kata-clh-snp"),
		})), DefaultPlacement())
	if len(pod.Spec.NodeSelector) != 3 || pod.Spec.NodeSelector["zone"] != "secure" || pod.Spec.NodeSelector["node.kubernetes.io/os"] != "bottlerocket" {
		t.Errorf("node selector = %v", pod.Spec.NodeSelector)
	}
	if len(pod.Spec.Tolerations) != 2 {
		t.Errorf("tolerations = %v, want the two distinct ones", pod.Spec.Tolerations)
	}
	if got := ptr.Deref(pod.Spec.RuntimeClassName, ""); got != "kata-clh-snp" {
		t.Errorf("runtime class = %q, want the explicit one", got)
	}
}

func TestBadInputIsASpecError(t *testing.T) {
	noSEV, err := ParsePlacement([]byte("tee:\n  sgx:\n    nodeSelector: {sgx: \"true\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		p      *hourglassv1alpha1.Performer
		table  Placement
		reason string
		want   string
	}{
		{"tee type without mapping", perf(hw(hourglassv1alpha1.HardwareRequirements{TEERequired: true, TEEType: "sev"})), noSEV,
			ReasonNoTEEMapping, "no placement for teeType sev (it knows sgx)"},
		{"selector contradiction", perf(
			hw(hourglassv1alpha1.HardwareRequirements{TEERequired: true, TEEType: "sgx"}),
			sched(hourglassv1alpha1.Scheduling{NodeSelector: map[string]string{"intel.feature.node.kubernetes.io/sgx": "false"}})),
			DefaultPlacement(), ReasonPlacementConf, "contradicts"},
		{"gpu limit contradiction", perf(hw(hourglassv1alpha1.HardwareRequirements{GPUCount: 2}), func(p *hourglassv1alpha1.Performer) {
			p.Spec.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		}), DefaultPlacement(), ReasonPlacementConf, "set only gpuCount"},
		{"bad custom label", perf(hw(hourglassv1alpha1.HardwareRequirements{CustomLabels: map[string]string{"bad key!": "x"}})),
			DefaultPlacement(), ReasonInvalidSpec, "customLabels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := desiredPod(tc.p, tc.table)
			var se *specError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a specError", err)
			}
			if se.reason != tc.reason || !strings.Contains(se.message, tc.want) {
				t.Errorf("got %s: %s; want %s containing %q", se.reason, se.message, tc.reason, tc.want)
			}
		})
	}
}

func TestPlacementFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if p, err := LoadPlacement(""); err != nil || len(p.TEE) != 3 {
		t.Fatalf("no file: %v %+v", err, p)
	}
	p, err := LoadPlacement(write("ok.yaml", `
tee:
  tdx:
    nodeSelector: {tdx.example.com/enabled: "true"}
    runtimeClassName: my-tdx
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.TEE) != 1 || p.TEE["tdx"].RuntimeClassName != "my-tdx" {
		t.Errorf("tee replaces the whole table: %+v", p.TEE)
	}
	for name, data := range map[string]string{
		"typo.yaml":     "tee:\n  sgx:\n    nodeSelectr: {a: b}\n",
		"unknown.yaml":  "tee:\n  nitro:\n    nodeSelector: {a: b}\n",
		"badlabel.yaml": "tee:\n  sgx:\n    nodeSelector: {\"a b\": c}\n",
		"badtol.yaml":   "gpu:\n  tolerations: [{key: x, operator: Maybe}]\n",
		"badrc.yaml":    "tee:\n  sev:\n    runtimeClassName: Not_A_Name\n",
	} {
		if _, err := LoadPlacement(write(name, data)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want an error naming the file", name, err)
		}
	}
	if _, err := LoadPlacement(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file must be an error")
	}
}

// The revision hash depends on the spec only: equal specs hash equal, and
// a new version is a new revision.
func TestSpecHash(t *testing.T) {
	_, h1, _ := desiredPod(perf(), DefaultPlacement())
	_, h2, _ := desiredPod(perf(), DefaultPlacement())
	_, h3, _ := desiredPod(perf(func(p *hourglassv1alpha1.Performer) { p.Spec.Version = "v1.1.0" }), DefaultPlacement())
	if h1 != h2 || h1 == h3 || h1 == "" {
		t.Errorf("hashes %q %q %q", h1, h2, h3)
	}
}

func TestPodShape(t *testing.T) {
	p := perf(func(p *hourglassv1alpha1.Performer) {
		p.Spec.Config = hourglassv1alpha1.PerformerConfig{
			GRPCPort: 9090, Args: []string{"--serve"}, Command: []string{"/performer"},
			Env:     []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}},
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		}
		p.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
		p.Spec.Scheduling = &hourglassv1alpha1.Scheduling{PriorityClassName: "high"}
	})
	pod := mustPod(t, p, DefaultPlacement())
	c := pod.Spec.Containers[0]
	if c.Image != "ghcr.io/example/avs-performer:v1.0.0" || c.Args[0] != "--serve" || c.Command[0] != "/performer" ||
		c.Env[0].Value != "debug" || c.EnvFrom[0].ConfigMapRef.Name != "cfg" {
		t.Errorf("container = %+v", c)
	}
	for name, probe := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.GRPC == nil || probe.GRPC.Port != 9090 {
			t.Errorf("%s probe = %+v, want gRPC on 9090", name, probe)
		}
	}
	if c.Ports[0].ContainerPort != 9090 || c.Ports[0].Name != "grpc" {
		t.Errorf("ports = %+v", c.Ports)
	}
	if pod.Spec.PriorityClassName != "high" || ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
		t.Errorf("pod spec = %+v", pod.Spec)
	}
	if pod.Annotations[AnnotationVersion] != "v1.0.0" || pod.Labels[LabelPerformer] != "avs" || pod.Labels[LabelTemplateHash] == "" {
		t.Errorf("metadata = %+v", pod.ObjectMeta)
	}
	if !strings.HasPrefix(pod.GenerateName, "performer-avs-"+pod.Labels[LabelTemplateHash]+"-") {
		t.Errorf("generateName = %q", pod.GenerateName)
	}
}

func TestNaming(t *testing.T) {
	p := perf(func(p *hourglassv1alpha1.Performer) { p.Spec.Config.GRPCPort = 9000 })
	if got := DNSName(p, ""); got != "performer-avs.ns.svc.cluster.local" {
		t.Errorf("DNSName = %q", got)
	}
	if got := Endpoint(p, "corp.internal"); got != "performer-avs.ns.svc.corp.internal:9000" {
		t.Errorf("Endpoint = %q", got)
	}
}

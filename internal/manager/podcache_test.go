package manager

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A cached Pod keeps what the performer reconciler reads and loses the
// rest: its environment, probes, volumes, tolerations, container mounts.
func TestSlimPodKeepsWhatThePerformerReads(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}},
		Spec: corev1.PodSpec{
			NodeName: "n1", NodeSelector: map[string]string{"gpu": "a100"}, RuntimeClassName: ptr.To("kata"),
			Containers: []corev1.Container{{
				Name: "performer", Image: "img:v1", Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 9090}},
				Env:            []corev1.EnvVar{{Name: "K", Value: "V"}},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 5},
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "token", MountPath: "/var/run"}},
			}},
			Volumes:     []corev1.Volume{{Name: "token"}},
			Tolerations: []corev1.Toleration{{Key: "t"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodPending, Reason: "r", Message: "m",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			PodIPs:     []corev1.PodIP{{IP: "10.0.0.1"}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "performer", Image: "img:v1", ImageID: "sha256:x", Ready: false,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}},
				VolumeMounts:         []corev1.VolumeMountStatus{{Name: "token"}},
			}},
		},
	}
	out, err := slimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	c := got.Spec.Containers[0]
	if got.Labels["a"] != "b" || got.ManagedFields != nil || got.Spec.NodeName != "n1" || got.Spec.NodeSelector["gpu"] != "a100" ||
		*got.Spec.RuntimeClassName != "kata" || c.Name != "performer" || c.Image != "img:v1" || c.Ports[0].ContainerPort != 9090 ||
		c.Resources.Limits.Name("nvidia.com/gpu", resource.DecimalSI).Value() != 2 {
		t.Errorf("kept %+v", got)
	}
	if c.Env != nil || c.ReadinessProbe != nil || c.Resources.Requests != nil || c.VolumeMounts != nil || got.Spec.Volumes != nil || got.Spec.Tolerations != nil {
		t.Errorf("spec not slimmed: %+v", got.Spec)
	}
	s := got.Status
	cs := s.ContainerStatuses[0]
	if s.Phase != corev1.PodPending || s.Reason != "r" || s.Message != "m" || len(s.Conditions) != 1 ||
		cs.Name != "performer" || cs.Image != "img:v1" || cs.State.Waiting.Reason != "ErrImagePull" || cs.LastTerminationState.Terminated.ExitCode != 1 {
		t.Errorf("status kept %+v", s)
	}
	if s.PodIPs != nil || cs.ImageID != "" || cs.VolumeMounts != nil {
		t.Errorf("status not slimmed: %+v", s)
	}
}

// A cached Service keeps what the performer reconciler reads (metadata,
// type, selector, ports) and loses the rest.
func TestSlimServiceKeepsWhatThePerformerReads(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "performer-p", Labels: map[string]string{"a": "b"},
			Annotations:     map[string]string{"hyperfleet.io/created-before-apply": "d"},
			OwnerReferences: []metav1.OwnerReference{{Name: "p", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "x"}}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, Selector: map[string]string{"h": "1"},
			Ports:     []corev1.ServicePort{{Name: "grpc", Port: 8080, Protocol: corev1.ProtocolTCP}},
			ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			SessionAffinity: corev1.ServiceAffinityNone,
		},
		Status: corev1.ServiceStatus{Conditions: []metav1.Condition{{Type: "x"}}},
	}
	out, err := slimService(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if got.Labels["a"] != "b" || got.Annotations["hyperfleet.io/created-before-apply"] != "d" || len(got.OwnerReferences) != 1 ||
		got.Spec.Type != corev1.ServiceTypeClusterIP || got.Spec.Selector["h"] != "1" || len(got.Spec.Ports) != 1 || got.Spec.Ports[0].Port != 8080 {
		t.Errorf("kept %+v", got)
	}
	if got.ManagedFields != nil || got.Spec.ClusterIP != "" || got.Spec.ClusterIPs != nil || got.Spec.IPFamilies != nil ||
		got.Spec.SessionAffinity != "" || got.Status.Conditions != nil {
		t.Errorf("not slimmed: %+v", got)
	}
}

// runningPerformerPodJSON is a performer Pod as the API server sends it
// once a kubelet runs it: the reconciler's spec with the API server's
// defaults, the service account token volume, the default tolerations, a
// full status.
func runningPerformerPodJSON(t testing.TB, i int) []byte {
	t.Helper()
	name := fmt.Sprintf("performer-p%05d-5d4b8c9f7", i)
	probe := func(period int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}},
			PeriodSeconds: period, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	}
	now := metav1.Now()
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "avs", UID: types.UID(fmt.Sprintf("0b9c6f1e-3d2a-4c8b-9e7f-%012d", i)),
			ResourceVersion: "123456", CreationTimestamp: now,
			Labels: map[string]string{"app": "hourglass-performer", "hourglass.eigenlayer.io/performer": fmt.Sprintf("p%05d", i),
				"app.kubernetes.io/name": "hourglass-performer", "app.kubernetes.io/instance": fmt.Sprintf("p%05d", i),
				"app.kubernetes.io/managed-by": "hyperfleet", "hourglass.eigenlayer.io/template-hash": "5d4b8c9f7"},
			Annotations: map[string]string{"hourglass.eigenlayer.io/version": "v1.0.0"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "hourglass.eigenlayer.io/v1alpha1", Kind: "Performer",
				Name: fmt.Sprintf("p%05d", i), UID: types.UID(fmt.Sprintf("7a1d2e3f-4b5c-6d7e-8f90-%012d", i)), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "hyperfleet", Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"performer\"}":{".":{},"f:image":{},"f:env":{}}}}}`)}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "performer", Image: "ghcr.io/example/avs-performer:v1.0.0", ImagePullPolicy: corev1.PullIfNotPresent,
				Ports:        []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env:          []corev1.EnvVar{{Name: "AVS_ADDRESS", Value: "0x4444444444444444444444444444444444444444"}, {Name: "GRPC_PORT", Value: "8080"}},
				StartupProbe: probe(5), LivenessProbe: probe(10), ReadinessProbe: probe(5),
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}},
			}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: ptr.To(int32(420)), Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To(int64(3607)), Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				}}}}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr.To(int64(30)), DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", DeprecatedServiceAccount: "default", NodeName: "general-1", SchedulerName: "default-scheduler",
			SecurityContext: &corev1.PodSecurityContext{}, EnableServiceLinks: ptr.To(true), PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority), Priority: ptr.To(int32(0)),
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: "10.244.0.1", HostIPs: []corev1.HostIP{{IP: "10.244.0.1"}},
			PodIP: fmt.Sprintf("10.245.%d.%d", i/250, i%250), PodIPs: []corev1.PodIP{{IP: fmt.Sprintf("10.245.%d.%d", i/250, i%250)}},
			QOSClass: corev1.PodQOSBestEffort, StartTime: &now,
			Conditions: []corev1.PodCondition{
				{Type: "PodReadyToStartContainers", Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "performer", Image: "ghcr.io/example/avs-performer:v1.0.0", ImageID: "ghcr.io/example/avs-performer@sha256:9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0",
				ContainerID: fmt.Sprintf("containerd://%064d", i), Ready: true, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
				VolumeMounts: []corev1.VolumeMountStatus{{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true,
					RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyDisabled)}},
			}},
		},
	}
	data, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The heap a cached running performer Pod keeps, as the cache's transform
// for Pods leaves it and with only managedFields stripped (the default
// transform), both interned as the cache does.
func BenchmarkCachedPerformerPodHeap(b *testing.B) {
	const n = 5000
	docs := make([][]byte, n)
	for i := range docs {
		docs[i] = runningPerformerPodJSON(b, i)
	}
	for _, slim := range []bool{false, true} {
		b.Run(fmt.Sprintf("slim=%t", slim), func(b *testing.B) {
			for range b.N {
				in := newInterner()
				before := liveHeap()
				kept := make([]*corev1.Pod, n)
				for i, d := range docs {
					pod := &corev1.Pod{}
					if err := json.Unmarshal(d, pod); err != nil {
						b.Fatal(err)
					}
					if slim {
						_, _ = slimPod(pod)
					} else {
						pod.ManagedFields = nil
					}
					_, _ = in.transform(pod)
					kept[i] = pod
				}
				after := liveHeap()
				b.ReportMetric(float64(after-before)/n, "B/pod")
				runtime.KeepAlive(kept)
				runtime.KeepAlive(in)
			}
		})
	}
}

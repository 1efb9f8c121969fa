package performer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/performer"
	"github.com/hyperfleet/hyperfleet/samples"
)

// A Performer becomes a Pod with everything its spec asks for, a ClusterIP
// Service with a stable DNS name, and a status that follows the Pod. The
// scheduler places it on the Bottlerocket node (its selector, toleration and
// zone affinity allow no other), and the Service gets its ready endpoint.
func TestCreate(t *testing.T) {
	e := newEnv(t)
	ensureRuntimeClass(t, "gvisor")
	p := e.performer("echo", func(p *hourglassv1alpha1.Performer) {
		p.Spec.Config = hourglassv1alpha1.PerformerConfig{
			GRPCPort: 9090,
			Env:      []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}, {Name: testcluster.HoldReadyEnv, Value: "true"}},
			EnvFrom:  []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "avs-env"}}}},
			Args:     []string{"--serve"},
			Command:  []string{"/bin/performer"},
		}
		p.Spec.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		}
		p.Spec.Scheduling = &hourglassv1alpha1.Scheduling{
			NodeSelector:     map[string]string{"node.kubernetes.io/os": "bottlerocket"},
			Tolerations:      []corev1.Toleration{{Key: "bottlerocket", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
			RuntimeClassName: ptrTo("gvisor"),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{testcluster.Zone}},
				}}},
			}}},
		}
	})

	pod := e.waitPod("echo", 20*time.Second, anyPod)
	c := pod.Spec.Containers[0]
	if c.Image != "ghcr.io/example/avs-performer:v1.0.0" {
		t.Errorf("image = %q", c.Image)
	}
	if c.Ports[0].ContainerPort != 9090 || c.Ports[0].Name != "grpc" {
		t.Errorf("ports = %+v", c.Ports)
	}
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if probe == nil || probe.GRPC == nil || probe.GRPC.Port != 9090 {
			t.Errorf("%s probe = %+v, want gRPC on 9090", name, probe)
		}
	}
	if len(c.Env) != 2 || c.Env[0].Value != "debug" || c.EnvFrom[0].SecretRef.Name != "avs-env" || c.Args[0] != "--serve" || c.Command[0] != "/bin/performer" {
		t.Errorf("env/args/command = %+v %+v %v %v", c.Env, c.EnvFrom, c.Args, c.Command)
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.String() != "500m" {
		t.Errorf("resources = %+v", c.Resources)
	}
	if pod.Spec.NodeSelector["node.kubernetes.io/os"] != "bottlerocket" || len(pod.Spec.Tolerations) == 0 ||
		pod.Spec.Affinity == nil || pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "gvisor" {
		t.Errorf("scheduling = %+v", pod.Spec)
	}
	if ref := metav1.GetControllerOf(&pod); ref == nil || ref.UID != p.UID || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("Pod owner = %+v, want the Performer as controller", ref)
	}

	svc := e.service("echo")
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Errorf("Service type %s clusterIP %q, want a ClusterIP", svc.Spec.Type, svc.Spec.ClusterIP)
	}
	if port := svc.Spec.Ports[0]; port.Port != 9090 || port.TargetPort != intstr.FromString("grpc") {
		t.Errorf("Service port = %+v", port)
	}
	if svc.Spec.Selector[performer.LabelTemplateHash] != pod.Labels[performer.LabelTemplateHash] {
		t.Errorf("Service selector %v does not pick Pod %s", svc.Spec.Selector, pod.Name)
	}
	if ref := metav1.GetControllerOf(svc); ref == nil || ref.UID != p.UID {
		t.Errorf("Service owner = %+v", ref)
	}

	pending := e.waitReason("echo", performer.ReasonPodStarting, 10*time.Second)
	checkKstatus(t, pending)
	if pending.Status.Phase != hourglassv1alpha1.PerformerPending || !apimetaTrue(pending, meta.ReconcilingCondition) {
		t.Errorf("before the Pod runs: %s", describe(pending))
	}
	wantDNS := fmt.Sprintf("performer-echo.%s.svc.cluster.local", e.ns)
	if pending.Status.DNSName != wantDNS || pending.Status.GRPCEndpoint != wantDNS+":9090" || pending.Status.ServiceName != "performer-echo" {
		t.Errorf("status service fields = %+v", pending.Status)
	}

	if n := len(e.readyEndpoints("echo")); n != 0 {
		t.Errorf("the Service has %d ready endpoints before its Pod started", n)
	}

	e.release(pod.Name)
	running := e.waitReason("echo", performer.ReasonServing, 20*time.Second)
	checkKstatus(t, running)
	if running.Status.Phase != hourglassv1alpha1.PerformerRunning || running.Status.PodName != pod.Name ||
		running.Status.NodeName != testcluster.NodeBottlerocket || running.Status.CurrentVersion != "v1.0.0" {
		t.Errorf("running status = %+v", running.Status)
	}
	started := e.pod(pod.Name)
	if started.Spec.NodeName != testcluster.NodeBottlerocket || started.Status.PodIP == "" {
		t.Errorf("Pod on node %q with IP %q, want %s and an IP", started.Spec.NodeName, started.Status.PodIP, testcluster.NodeBottlerocket)
	}
	e.waitEndpoints("echo", started.Status.PodIP)
}

// A new version rolls without a gap: the new Pod runs beside the old one,
// the Service moves only once the new Pod is Ready, and only then does the
// old Pod go. The EndpointSlice controller's view is checked at every look:
// the Service has a ready endpoint throughout.
func TestUpgradeWithoutGap(t *testing.T) {
	e := newEnv(t)
	e.performer("roll")
	v1 := e.waitPod("roll", 20*time.Second, anyPod)
	e.waitReason("roll", performer.ReasonServing, 20*time.Second)
	v1IP := e.pod(v1.Name).Status.PodIP
	e.waitEndpoints("roll", v1IP)

	gaps := &gapChecker{e: e, name: "roll"}
	// The new Pod is held before it starts, as a slow image pull would.
	e.update("roll", func(p *hourglassv1alpha1.Performer) { p.Spec.Version = "v2.0.0"; hold(p) })
	v2 := e.waitPod("roll", 20*time.Second, func(p corev1.Pod) bool { return p.Annotations[performer.AnnotationVersion] == "v2.0.0" })
	if v2.Labels[performer.LabelTemplateHash] == v1.Labels[performer.LabelTemplateHash] {
		t.Fatal("the new version has the old revision hash")
	}
	if !strings.HasSuffix(v2.Spec.Containers[0].Image, ":v2.0.0") {
		t.Errorf("new Pod image = %q", v2.Spec.Containers[0].Image)
	}

	// While v2 starts, v1 serves and the Performer says it is upgrading.
	upgrading := e.waitReason("roll", performer.ReasonUpgrading, 10*time.Second)
	gaps.check()
	checkKstatus(t, upgrading)
	if upgrading.Status.Phase != hourglassv1alpha1.PerformerUpgrading || upgrading.Status.CurrentVersion != "v1.0.0" || upgrading.Status.PodName != v1.Name {
		t.Errorf("while upgrading: %+v", upgrading.Status)
	}
	if sel := e.service("roll").Spec.Selector[performer.LabelTemplateHash]; sel != v1.Labels[performer.LabelTemplateHash] {
		t.Errorf("the Service moved to %s before the new Pod was Ready", sel)
	}
	if live := e.livePods("roll"); len(live) != 2 {
		t.Errorf("want the old and the new Pod side by side, got %d", len(live))
	}

	// v2 is placed but has not started: still v1, and v1 alone is routed to.
	eventually.That(t, 20*time.Second, func() (bool, string) {
		gaps.check()
		bound := e.pod(v2.Name)
		return bound.Spec.NodeName != "", "the new Pod is not bound to a node yet"
	})
	e.waitReason("roll", performer.ReasonUpgrading, 10*time.Second)
	gaps.check()
	if got := e.readyEndpoints("roll"); len(got) != 1 || got[0] != v1IP {
		t.Errorf("ready endpoints while v2 starts = %v, want v1's %s", got, v1IP)
	}

	e.release(v2.Name)
	eventually.That(t, 20*time.Second, func() (bool, string) {
		gaps.check()
		sel := e.service("roll").Spec.Selector[performer.LabelTemplateHash]
		old := &corev1.Pod{}
		err := e.get(v1.Name, old)
		oldGoing := isGone(err) || (err == nil && !old.DeletionTimestamp.IsZero())
		return sel == v2.Labels[performer.LabelTemplateHash] && oldGoing, fmt.Sprintf("selector %s, old Pod going %v", sel, oldGoing)
	})
	running := e.waitReason("roll", performer.ReasonServing, 10*time.Second)
	checkKstatus(t, running)
	v2Pod := e.pod(v2.Name)
	if running.Status.CurrentVersion != "v2.0.0" || running.Status.PodName != v2.Name || running.Status.NodeName != v2Pod.Spec.NodeName {
		t.Errorf("after the upgrade: %+v", running.Status)
	}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		gaps.check()
		got := e.readyEndpoints("roll")
		return len(got) == 1 && got[0] == v2Pod.Status.PodIP, fmt.Sprintf("ready endpoints %v, want v2's %s", got, v2Pod.Status.PodIP)
	})
	e.waitEvent("roll", performer.EventUpgraded, "v2.0.0")
	if gaps.violations != nil {
		t.Errorf("the Service had no Ready Pod behind it: %v", gaps.violations)
	}
}

// gapChecker asserts the Service routes to a Ready, live Pod at every look,
// and that its EndpointSlices list a ready endpoint. It reads the Pods both
// before and after the Service, so a switch between the reads is not
// mistaken for a gap.
type gapChecker struct {
	e          *env
	name       string
	violations []string
}

func (g *gapChecker) check() {
	if len(g.e.readyEndpoints(g.name)) == 0 {
		g.violations = append(g.violations, "no ready endpoint")
	}
	before := g.e.livePods(g.name)
	hash := g.e.service(g.name).Spec.Selector[performer.LabelTemplateHash]
	after := g.e.livePods(g.name)
	for _, pods := range [][]corev1.Pod{before, after} {
		for _, p := range pods {
			if p.Labels[performer.LabelTemplateHash] == hash && podReady(p) {
				return
			}
		}
	}
	g.violations = append(g.violations, "selector "+hash)
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return p.Status.Phase == corev1.PodRunning && c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// A Pod that waits for a node past the bound is kept, not recreated: an
// identical Pod would wait the same. The Performer is marked Stalled, with
// one Warning event saying how long and why; after that, reconciles write
// nothing. No node has the GPU it asks for, so the real scheduler leaves it
// Unschedulable. The clock is stepped past the bound; an annotation on the
// Pod wakes the reconciler as the scheduler's next report would (in a
// cluster, its own requeue at the deadline does the same).
func TestPendingTimeout(t *testing.T) {
	e := newEnv(t)
	e.performer("stuck", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{GPUType: "NVIDIA-H100-80GB-HBM3", GPUCount: 1}
	})
	first := e.waitPod("stuck", 20*time.Second, anyPod)
	waiting := e.waitReason("stuck", performer.ReasonUnschedulable, 30*time.Second)
	checkKstatus(t, waiting)
	if c := findCondition(waiting, meta.ReadyCondition); !strings.Contains(c.Message, "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3") ||
		!strings.Contains(c.Message, "0/5 nodes are available") {
		t.Errorf("Unschedulable message = %q, want the scheduler's words and the placement", c.Message)
	}
	recreated := recreations(t, "PendingTimeout")

	// Five minutes and a second after the Pod was made; afterwards back to
	// now, so the jump does not age the next tests' Pods.
	fakeClock.SetTime(first.CreationTimestamp.Add(performer.DefaultPendingTimeout + time.Second))
	t.Cleanup(func() { fakeClock.SetTime(time.Now()) })
	e.annotatePod(first.Name, "test.hyperfleet.io/nudge", "1")
	stalled := e.waitReason("stuck", performer.ReasonPendingTimeout, 20*time.Second)
	checkKstatus(t, stalled)
	if c := findCondition(stalled, meta.ReadyCondition); !strings.Contains(c.Message, "longer than 5m0s") || !strings.Contains(c.Message, "Unschedulable") ||
		!strings.Contains(c.Message, "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3") {
		t.Errorf("Stalled message = %q, want how long, why and the placement", c.Message)
	}
	if !apimetaTrue(stalled, meta.StalledCondition) || stalled.Status.PodName != first.Name {
		t.Errorf("after the bound: %s", describe(stalled))
	}
	note := e.waitEvent("stuck", performer.ReasonPendingTimeout, first.Name)
	if !strings.Contains(note, "longer than 5m0s") || !strings.Contains(note, "Unschedulable") {
		t.Errorf("event note %q should say how long and why", note)
	}

	// Later wake-ups change nothing: no recreation, no write.
	written := writes.in(e.ns)
	e.settle(first.Name)
	fakeClock.Step(performer.DefaultPendingTimeout)
	e.settle(first.Name)
	if pods := e.livePods("stuck"); len(pods) != 1 || pods[0].Name != first.Name {
		t.Errorf("Pods after the bound: %d, want %s kept", len(pods), first.Name)
	}
	if got := writes.in(e.ns); len(got) != len(written) {
		t.Errorf("writes after the Performer stalled: %q", got[len(written):])
	}
	if n := recreations(t, "PendingTimeout"); n != recreated {
		t.Errorf("hyperfleet_performer_pod_recreations_total{reason=PendingTimeout} went from %v to %v", recreated, n)
	}
}

// A Pod bound to a node that does not start it within the bound (counted
// from the binding) is replaced, so the scheduler may place the new one
// elsewhere, with an event saying why. kwok holds the Pod bound and not
// started, as a kubelet that cannot pull or start it would.
func TestBoundPodStuckIsReplaced(t *testing.T) {
	e := newEnv(t)
	e.performer("unstarted", hold)
	first := e.waitPod("unstarted", 20*time.Second, func(p corev1.Pod) bool { return p.Spec.NodeName != "" })
	var boundAt time.Time
	for _, c := range first.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			boundAt = c.LastTransitionTime.Time
		}
	}
	if boundAt.IsZero() {
		t.Fatalf("Pod %s bound to %s without a PodScheduled condition: %+v", first.Name, first.Spec.NodeName, first.Status.Conditions)
	}
	recreated := recreations(t, "PendingTimeout")
	// The replacement must not look stuck at the stepped clock: it is bound
	// at least three seconds after the first (whose time is truncated to
	// the second), so it has been Pending for under the bound.
	eventually.True(t, 10*time.Second, "three seconds since the binding", func() bool { return time.Since(boundAt) > 3*time.Second })
	fakeClock.SetTime(boundAt.Add(performer.DefaultPendingTimeout + time.Second))
	t.Cleanup(func() { fakeClock.SetTime(time.Now()) })
	e.annotatePod(first.Name, "test.hyperfleet.io/nudge", "1")
	e.waitPod("unstarted", 20*time.Second, func(p corev1.Pod) bool { return p.Name != first.Name })
	note := e.waitEvent("unstarted", performer.EventPodPendingTimeout, first.Name)
	if !strings.Contains(note, "bound to node "+first.Spec.NodeName) || !strings.Contains(note, "within 5m0s") {
		t.Errorf("event note %q should say where and how long", note)
	}
	if n := recreations(t, "PendingTimeout"); n != recreated+1 {
		t.Errorf("hyperfleet_performer_pod_recreations_total{reason=PendingTimeout} went from %v to %v, want one more", recreated, n)
	}
}

// A Pod that failed (evicted, its node shut down) is replaced at once, with
// an event saying why, and the replacement serves once Ready.
func TestFailedPodIsRecreated(t *testing.T) {
	e := newEnv(t)
	e.performer("evicted", hold)
	first := e.waitPod("evicted", 20*time.Second, anyPod)
	e.release(first.Name)
	e.waitReason("evicted", performer.ReasonServing, 20*time.Second)

	// The kubelet (kwok) evicts it: phase Failed, reason Evicted.
	e.annotatePod(first.Name, testcluster.EvictAnnotation, "true")
	second := e.waitPod("evicted", 20*time.Second, func(p corev1.Pod) bool { return p.Name != first.Name })
	note := e.waitEvent("evicted", performer.EventPodFailed, first.Name)
	if !strings.Contains(note, "Evicted: The node was low on resource: memory.") {
		t.Errorf("event note %q should carry the Pod's reason", note)
	}
	if n := recreations(t, "Failed"); n < 1 {
		t.Errorf("hyperfleet_performer_pod_recreations_total{reason=Failed} = %v", n)
	}
	pending := e.waitReason("evicted", performer.ReasonPodStarting, 10*time.Second)
	if pending.Status.Phase != hourglassv1alpha1.PerformerPending || pending.Status.CurrentVersion != "" {
		t.Errorf("with nothing serving: %+v", pending.Status)
	}
	e.release(second.Name)
	if got := e.waitReason("evicted", performer.ReasonServing, 20*time.Second); got.Status.PodName != second.Name {
		t.Errorf("serving Pod = %s, want %s", got.Status.PodName, second.Name)
	}
}

// hardwareRequirements become real placement: a GPU limit and selector,
// the TEE table's selector, tolerations and runtime class (here the
// operator's own override), and clear conditions where they cannot.
func TestGPUAndTEEPlacement(t *testing.T) {
	e := newEnv(t)
	e.performer("gpu", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{GPUType: "nvidia-a100", GPUCount: 2,
			CustomLabels: map[string]string{"pool": "avs"}}
	})
	e.performer("sgx", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{TEERequired: true, TEEType: "sgx"}
		// The seed's example repeats what the table adds; it must merge.
		p.Spec.Scheduling = &hourglassv1alpha1.Scheduling{
			NodeSelector: map[string]string{"intel.feature.node.kubernetes.io/sgx": "true"},
			Tolerations:  []corev1.Toleration{{Key: "sgx", Operator: corev1.TolerationOpEqual, Value: "enabled", Effect: corev1.TaintEffectNoSchedule}},
		}
	})

	gpu := e.waitPod("gpu", 20*time.Second, anyPod)
	res := gpu.Spec.Containers[0].Resources
	if q := res.Limits["nvidia.com/gpu"]; q.Value() != 2 {
		t.Errorf("GPU limit = %v, want 2", res.Limits)
	}
	if gpu.Spec.NodeSelector["nvidia.com/gpu.product"] != "nvidia-a100" || gpu.Spec.NodeSelector["pool"] != "avs" {
		t.Errorf("GPU node selector = %v", gpu.Spec.NodeSelector)
	}
	if !hasToleration(gpu, "nvidia.com/gpu") {
		t.Errorf("GPU tolerations = %v", gpu.Spec.Tolerations)
	}

	sgx := e.waitPod("sgx", 20*time.Second, anyPod)
	sgxTolerations := 0
	for _, tol := range sgx.Spec.Tolerations {
		if tol.Key == "sgx" {
			sgxTolerations++
		}
	}
	if sgx.Spec.NodeSelector["intel.feature.node.kubernetes.io/sgx"] != "true" || sgxTolerations != 1 || sgx.Spec.RuntimeClassName != nil {
		t.Errorf("SGX placement = %v %v %v", sgx.Spec.NodeSelector, sgx.Spec.Tolerations, sgx.Spec.RuntimeClassName)
	}

	// sev is not in this operator's table: Stalled, saying what to do, and no Pod.
	e.performer("sev", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{TEERequired: true, TEEType: "sev"}
	})
	sev := e.waitReason("sev", performer.ReasonNoTEEMapping, 10*time.Second)
	checkKstatus(t, sev)
	if !apimetaTrue(sev, meta.StalledCondition) || !strings.Contains(findCondition(sev, meta.ReadyCondition).Message, "--hourglass-placement-file") {
		t.Errorf("sev: %s", describe(sev))
	}
	if n := len(e.livePods("sev")); n != 0 {
		t.Errorf("sev has %d Pods, want none", n)
	}
	e.waitEvent("sev", performer.ReasonNoTEEMapping, "teeType sev")

	// tdx maps to a runtime class the cluster lacks: the API server refuses
	// the Pod, and the Performer says so.
	e.performer("tdx", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{TEERequired: true, TEEType: "tdx"}
	})
	tdx := e.waitReason("tdx", performer.ReasonPodRejected, 20*time.Second)
	if msg := findCondition(tdx, meta.ReadyCondition).Message; !strings.Contains(msg, "hyperfleet-test-tdx") {
		t.Errorf("tdx: %s", describe(tdx))
	}
	// With the runtime class installed, a spec change places it.
	ensureRuntimeClass(t, "hyperfleet-test-tdx")
	e.update("tdx", func(p *hourglassv1alpha1.Performer) { p.Spec.Version = "v1.0.1" })
	pod := e.waitPod("tdx", 20*time.Second, anyPod)
	if pod.Spec.NodeSelector["tdx.example.com/enabled"] != "true" || !hasToleration(pod, "tdx") ||
		pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "hyperfleet-test-tdx" {
		t.Errorf("TDX placement = %v %v %v", pod.Spec.NodeSelector, pod.Spec.Tolerations, pod.Spec.RuntimeClassName)
	}
}

// Bad input stalls with a message saying what to fix, and is picked up
// again once fixed; a Service of the same name that is not ours is refused.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	e.performer("badlabel", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{CustomLabels: map[string]string{"bad key!": "x"}}
	})
	bad := e.waitReason("badlabel", performer.ReasonInvalidSpec, 10*time.Second)
	checkKstatus(t, bad)
	if msg := findCondition(bad, meta.ReadyCondition).Message; !strings.Contains(msg, "customLabels") || bad.Status.Phase != hourglassv1alpha1.PerformerFailed {
		t.Errorf("badlabel: %s", describe(bad))
	}
	e.update("badlabel", func(p *hourglassv1alpha1.Performer) { p.Spec.HardwareRequirements = nil })
	e.waitPod("badlabel", 20*time.Second, anyPod)

	// Names that would not make a valid Service name are refused outright.
	for _, name := range []string{strings.Repeat("a", 54), "dotted.name"} {
		p := &hourglassv1alpha1.Performer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec: hourglassv1alpha1.PerformerSpec{AVSAddress: "0x4444444444444444444444444444444444444444", Image: "img", Version: "v1"}}
		if err := e.c.Create(context.Background(), p); err == nil || !strings.Contains(err.Error(), "DNS label of at most 53") {
			t.Errorf("Performer %q: err = %v, want the name refused", name, err)
		}
	}

	e.create(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: performer.ServiceName("squatted")},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	})
	e.performer("squatted")
	squatted := e.waitReason("squatted", performer.ReasonServiceConflict, 20*time.Second)
	if !apimetaTrue(squatted, meta.StalledCondition) {
		t.Errorf("squatted: %s", describe(squatted))
	}
}

// Everything a Performer makes is owned by it, so deleting the Performer
// hands its Pods and Service to the garbage collector; while it is being
// deleted it makes nothing new.
func TestDeletion(t *testing.T) {
	e := newEnv(t)
	p := e.performer("gone")
	pod := e.waitPod("gone", 20*time.Second, anyPod)
	svc := e.service("gone")
	for _, obj := range []metav1.Object{&pod, svc} {
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.UID != p.UID || ref.Kind != "Performer" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Errorf("%s owner = %+v, want the Performer as blocking controller", obj.GetName(), ref)
		}
	}
	// A finalizer of the test's on the Service holds the foreground deletion
	// open, so the Terminating phase can be seen before the collector is done.
	const holdFinalizer = "test.hyperfleet.io/hold"
	patch := fmt.Appendf(nil, `{"metadata":{"finalizers":[%q]}}`, holdFinalizer)
	if err := e.c.Patch(context.Background(), svc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}

	// Foreground deletion keeps the Performer until the collector has
	// removed its dependents: the reconciler reports it and stands back.
	if err := e.c.Delete(context.Background(), p, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		got := &hourglassv1alpha1.Performer{}
		if err := e.get("gone", got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == hourglassv1alpha1.PerformerTerminating, describe(got)
	})
	// The collector deletes the Pod (kwok removes it at once) and waits on the Service.
	eventually.That(t, 20*time.Second, func() (bool, string) {
		err := e.get(pod.Name, &corev1.Pod{})
		return isGone(err), fmt.Sprintf("Pod %s: %v", pod.Name, err)
	})
	release := []byte(`{"metadata":{"finalizers":null}}`)
	if err := e.c.Patch(context.Background(), svc, client.RawPatch(types.MergePatchType, release)); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		errP := e.get("gone", &hourglassv1alpha1.Performer{})
		errS := e.get(svc.Name, &corev1.Service{})
		return isGone(errP) && isGone(errS), fmt.Sprintf("Performer: %v; Service: %v", errP, errS)
	})
	if live := e.livePods("gone"); len(live) != 0 {
		t.Errorf("a Pod was made for a Performer being deleted: %s", live[0].Name)
	}
}

// ensureRuntimeClass installs a RuntimeClass for the test's duration.
func ensureRuntimeClass(t *testing.T, name string) {
	t.Helper()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: "runc"}
	if err := testenv.Client().Create(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.Client().Delete(context.Background(), rc) })
}

// recreations reads the replacement counter the manager's /metrics serves.
func recreations(t *testing.T, reason string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "hyperfleet_performer_pod_recreations_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func hasToleration(pod corev1.Pod, key string) bool {
	for _, t := range pod.Spec.Tolerations {
		if t.Key == key {
			return true
		}
	}
	return false
}

func findCondition(p *hourglassv1alpha1.Performer, t string) metav1.Condition {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

func apimetaTrue(p *hourglassv1alpha1.Performer, t string) bool {
	return findCondition(p, t).Status == metav1.ConditionTrue
}

// The Hourglass samples `hyperfleet-dev` applies are accepted by the API
// server and each Performer among them is placed on a node that fits it
// (the GPU one on the GPU node, the SGX one on the SGX node, the
// Bottlerocket one on the Bottlerocket node) and serves.
func TestSamplesApply(t *testing.T) {
	e := newEnv(t)
	files, _, err := samples.Files()
	if err != nil {
		t.Fatal(err)
	}
	var performers []string
	for _, name := range []string{"60-hourglass-executor.yaml", "61-performers.yaml"} {
		objs, err := manifests.Decode(name, files[name])
		if err != nil {
			t.Fatal(err)
		}
		if err := manifests.Apply(context.Background(), e.c, e.ns, "samples-test", objs); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, o := range objs {
			if o.GetKind() == "Performer" {
				performers = append(performers, o.GetName())
			}
		}
	}
	t.Cleanup(func() {
		_ = e.c.DeleteAllOf(context.Background(), &hourglassv1alpha1.HourglassExecutor{}, client.InNamespace(e.ns))
	})
	wantNode := map[string]string{
		"avs-performer-gpu":          testcluster.NodeGPU,
		"avs-performer-sgx":          testcluster.NodeSGX,
		"avs-performer-bottlerocket": testcluster.NodeBottlerocket,
	}
	for _, name := range performers {
		e.waitPod(name, 20*time.Second, anyPod)
		got := e.waitReason(name, performer.ReasonServing, 30*time.Second)
		if want, ok := wantNode[name]; ok && got.Status.NodeName != want {
			t.Errorf("%s runs on %q, want %s", name, got.Status.NodeName, want)
		}
		if want := wantNode[name]; want == "" && !isGeneral(got.Status.NodeName) {
			t.Errorf("%s runs on %q, want a general node", name, got.Status.NodeName)
		}
	}
}

func isGeneral(node string) bool {
	return node == testcluster.NodeGeneral1 || node == testcluster.NodeGeneral2
}

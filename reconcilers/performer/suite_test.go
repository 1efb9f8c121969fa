package performer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/performer"
)

// fakeClock drives the Pending timeout: a test steps it past the bound
// instead of waiting five minutes.
var fakeClock = clocktesting.NewFakeClock(time.Now())

// mgr and reconciler are the suite's: the cache test reads mgr's cache, the
// adoption test makes reconciler forget what a restart would.
var (
	mgr        ctrl.Manager
	reconciler *performer.Reconciler
)

// testPlacement overrides the TEE table as an operator would: sgx as built
// in, tdx on this cluster's own labels and runtime class, and no sev.
const testPlacement = `
tee:
  sgx:
    nodeSelector: {intel.feature.node.kubernetes.io/sgx: "true"}
    tolerations: [{key: sgx, operator: Equal, value: enabled, effect: NoSchedule}]
  tdx:
    nodeSelector: {tdx.example.com/enabled: "true"}
    tolerations: [{key: tdx, operator: Exists, effect: NoSchedule}]
    runtimeClassName: hyperfleet-test-tdx
`

// A manager with the Performer reconciler alone runs against the package's
// control plane, with the placement table loaded from a file as
// --hourglass-placement-file does. There is no kubelet, scheduler or
// garbage collector: tests play their parts by writing Pod status, bindings
// and deletions themselves.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		dir, err := os.MkdirTemp("", "performer-test")
		if err != nil {
			return nil, err
		}
		file := filepath.Join(dir, "placement.yaml")
		if err := os.WriteFile(file, []byte(testPlacement), 0o600); err != nil {
			return nil, err
		}
		placement, err := performer.LoadPlacement(file)
		if err != nil {
			return nil, err
		}
		// The operator's cache rules: a read the label-selected cache
		// cannot answer fails here as it would in production.
		cacheOpts, err := manager.CacheOptionsFor(testenv.Config(), manager.Options{OperatorNamespace: "hyperfleet-system"})
		if err != nil {
			return nil, err
		}
		mgr, err = ctrl.NewManager(testenv.Config(), ctrl.Options{
			Scheme:                 testenv.Scheme(),
			Cache:                  cacheOpts,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
		})
		if err != nil {
			return nil, err
		}
		reconciler = &performer.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("performer"),
			Clock: fakeClock, Placement: placement,
		}
		if err := reconciler.SetupWithManager(mgr); err != nil {
			return nil, err
		}
		stop := testenv.StartManager(mgr)
		return func() {
			stop()
			_ = os.RemoveAll(dir)
		}, nil
	})
}

// env is one test's namespace.
type env struct {
	t  *testing.T
	ns string
	c  client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, ns: testenv.Namespace(t), c: testenv.Client()}
	// No namespace controller runs: delete what the test made so later
	// tests' reconcilers do not keep working on it.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = e.c.DeleteAllOf(ctx, &hourglassv1alpha1.Performer{}, client.InNamespace(e.ns))
		_ = e.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(e.ns), client.GracePeriodSeconds(0))
	})
	return e
}

func (e *env) create(obj client.Object) {
	e.t.Helper()
	obj.SetNamespace(e.ns)
	if err := e.c.Create(context.Background(), obj); err != nil {
		e.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func (e *env) get(name string, obj client.Object) error {
	return e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, obj)
}

func (e *env) performer(name string, mutate ...func(*hourglassv1alpha1.Performer)) *hourglassv1alpha1.Performer {
	e.t.Helper()
	p := &hourglassv1alpha1.Performer{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: hourglassv1alpha1.PerformerSpec{
			AVSAddress: "0x4444444444444444444444444444444444444444",
			Image:      "ghcr.io/example/avs-performer",
			Version:    "v1.0.0",
		},
	}
	for _, m := range mutate {
		m(p)
	}
	e.create(p)
	return p
}

// update applies mutate to the latest Performer, retrying on conflicts with
// the reconciler's status writes.
func (e *env) update(name string, mutate func(*hourglassv1alpha1.Performer)) {
	e.t.Helper()
	eventually.That(e.t, 10*time.Second, func() (bool, string) {
		p := &hourglassv1alpha1.Performer{}
		if err := e.get(name, p); err != nil {
			return false, err.Error()
		}
		mutate(p)
		if err := e.c.Update(context.Background(), p); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// livePods are a Performer's Pods that are not terminating, oldest first.
func (e *env) livePods(name string) []corev1.Pod {
	e.t.Helper()
	var list corev1.PodList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns), client.MatchingLabels{performer.LabelPerformer: name}); err != nil {
		e.t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p)
		}
	}
	return out
}

// waitPod waits until the Performer has exactly one live Pod matching cond.
func (e *env) waitPod(name string, timeout time.Duration, cond func(corev1.Pod) bool) corev1.Pod {
	e.t.Helper()
	var found corev1.Pod
	eventually.That(e.t, timeout, func() (bool, string) {
		var desc []string
		n := 0
		for _, p := range e.livePods(name) {
			desc = append(desc, fmt.Sprintf("%s[%s %s]", p.Name, p.Labels[performer.LabelTemplateHash], p.Status.Phase))
			if cond(p) {
				found = p
				n++
			}
		}
		return n == 1, "pods: " + strings.Join(desc, ", ")
	})
	return found
}

func anyPod(corev1.Pod) bool { return true }

// schedule binds the Pod to a node, as the scheduler would.
func (e *env) schedule(pod *corev1.Pod, node string) {
	e.t.Helper()
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := e.c.SubResource("binding").Create(context.Background(), pod, binding); err != nil {
		e.t.Fatalf("binding %s: %v", pod.Name, err)
	}
}

// setPodStatus writes a Pod's status as a kubelet (or the scheduler) would.
func (e *env) setPodStatus(name string, mutate func(*corev1.PodStatus)) {
	e.t.Helper()
	eventually.That(e.t, 10*time.Second, func() (bool, string) {
		pod := &corev1.Pod{}
		if err := e.get(name, pod); err != nil {
			return false, err.Error()
		}
		mutate(&pod.Status)
		if err := e.c.Status().Update(context.Background(), pod); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// runReady is what the kubelet reports once the container runs and its
// gRPC readiness probe passes.
func runReady(st *corev1.PodStatus) {
	now := metav1.Now()
	st.Phase = corev1.PodRunning
	st.StartTime = &now
	st.PodIP = "10.0.0.7"
	st.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	st.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "performer", Ready: true, Started: ptrTo(true), Image: "ghcr.io/example/avs-performer",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
}

func ptrTo[T any](v T) *T { return &v }

// waitReady waits for the Performer's Ready condition to have reason
// (for the current generation) and returns the Performer.
func (e *env) waitReason(name, reason string, timeout time.Duration) *hourglassv1alpha1.Performer {
	e.t.Helper()
	p := &hourglassv1alpha1.Performer{}
	eventually.That(e.t, timeout, func() (bool, string) {
		if err := e.get(name, p); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(p.Status.Conditions, meta.ReadyCondition)
		return c != nil && c.Reason == reason && c.ObservedGeneration == p.Generation && p.Status.ObservedGeneration == p.Generation,
			describe(p)
	})
	return p
}

func describe(p *hourglassv1alpha1.Performer) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s; ", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "%s=%s %s: %s; ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// checkKstatus asserts the kstatus invariants on the Performer (the same
// check testenv runs after every reconcile), and that every condition
// describes its current generation.
func checkKstatus(t *testing.T, p *hourglassv1alpha1.Performer) {
	t.Helper()
	for _, v := range conditions.Violations(p, true) {
		t.Errorf("kstatus: %s: %s", v, describe(p))
	}
	for _, c := range p.Status.Conditions {
		if c.ObservedGeneration != p.Generation {
			t.Errorf("condition %s has observedGeneration %d, want %d", c.Type, c.ObservedGeneration, p.Generation)
		}
	}
}

// waitEvent waits for an event about the object with reason whose note
// contains want, and returns the note.
func (e *env) waitEvent(regarding, reason, want string) string {
	e.t.Helper()
	var note string
	eventually.That(e.t, 10*time.Second, func() (bool, string) {
		var list eventsv1.EventList
		if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range list.Items {
			seen = append(seen, ev.Reason+": "+ev.Note)
			if ev.Regarding.Name == regarding && ev.Reason == reason && strings.Contains(ev.Note, want) {
				note = ev.Note
				return true, ""
			}
		}
		return false, fmt.Sprintf("events: %q", seen)
	})
	return note
}

// service waits for a Performer's Service: the reconciler makes it after
// the Pod, possibly in a later reconcile.
func (e *env) service(name string) *corev1.Service {
	e.t.Helper()
	svc := &corev1.Service{}
	eventually.That(e.t, 30*time.Second, func() (bool, string) {
		err := e.get(performer.ServiceName(name), svc)
		return err == nil, fmt.Sprintf("Service of %s: %v", name, err)
	})
	return svc
}

func isGone(err error) bool { return apierrors.IsNotFound(err) }

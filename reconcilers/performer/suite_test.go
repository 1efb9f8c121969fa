package performer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
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
// test cluster (internal/testcluster), with the placement table loaded from
// a file as --hourglass-placement-file does. The real scheduler places the
// Pods on kwok's simulated nodes (general, GPU, SGX, Bottlerocket), kwok
// runs them, the EndpointSlice controller routes the Services and the
// garbage collector removes what a deleted Performer owned: no test writes
// a Pod's status.
func TestMain(m *testing.M) {
	testenv.MainWith(m, testcluster.Around(testenv.Config, func() (func(), error) {
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
		cfg := testenv.Config()
		cfg.Wrap(writes.wrap)
		mgr, err = ctrl.NewManager(cfg, ctrl.Options{
			Scheme:                 testenv.Scheme(),
			Cache:                  cacheOpts,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
		})
		if err != nil {
			return nil, err
		}
		reconciler = &performer.Reconciler{
			Client: mgr.GetClient(), APIReader: reads.Wrap(mgr.GetAPIReader()), Recorder: mgr.GetEventRecorder("performer"),
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
	}))
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
	// Delete what the test made at once, so later tests' reconcilers do not
	// keep working on it while the namespace controller empties the namespace.
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

// hold makes the Performer's Pods stay bound but not started until
// release: the kubelet's pull-and-start, made as long as the test needs.
func hold(p *hourglassv1alpha1.Performer) {
	p.Spec.Config.Env = append(p.Spec.Config.Env, corev1.EnvVar{Name: testcluster.HoldReadyEnv, Value: "true"})
}

// release lets kwok start a held Pod (Running, Ready, with an IP).
func (e *env) release(pod string) {
	e.t.Helper()
	e.annotatePod(pod, testcluster.ReleaseAnnotation, "true")
}

// annotatePod sets an annotation on a Pod: metadata the test owns, never
// its status. An annotation also wakes the reconciler (it watches its Pods),
// as the scheduler's or the kubelet's next report would.
func (e *env) annotatePod(name, key, value string) {
	e.t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}}
	if err := e.c.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		e.t.Fatalf("annotating Pod %s: %v", name, err)
	}
}

// readyEndpoints are the addresses the EndpointSlice controller lists as
// ready for the Performer's Service.
func (e *env) readyEndpoints(name string) []string {
	e.t.Helper()
	var slices discoveryv1.EndpointSliceList
	if err := e.c.List(context.Background(), &slices, client.InNamespace(e.ns),
		client.MatchingLabels{discoveryv1.LabelServiceName: performer.ServiceName(name)}); err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				out = append(out, ep.Addresses...)
			}
		}
	}
	return out
}

// waitEndpoints waits until the Service's ready endpoints are exactly the Pod IPs.
func (e *env) waitEndpoints(name string, ips ...string) {
	e.t.Helper()
	want := append([]string(nil), ips...)
	sort.Strings(want)
	eventually.That(e.t, 30*time.Second, func() (bool, string) {
		got := e.readyEndpoints(name)
		sort.Strings(got)
		return slices.Equal(got, want), fmt.Sprintf("ready endpoints %v, want %v", got, want)
	})
}

// pod reads a Pod.
func (e *env) pod(name string) *corev1.Pod {
	e.t.Helper()
	pod := &corev1.Pod{}
	if err := e.get(name, pod); err != nil {
		e.t.Fatalf("Pod %s: %v", name, err)
	}
	return pod
}

// podCondition is the Pod's condition of type t, if any.
func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
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

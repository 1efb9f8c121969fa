package executor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/executor"
)

// mgr is the suite's manager; the cache test reads its cache.
var mgr ctrl.Manager

// A manager with the HourglassExecutor reconciler alone runs against the
// package's test cluster (internal/testcluster): the executor reads the
// Performers' specs, never their status, so no Performer reconciler is
// needed. The real deployment and ReplicaSet controllers roll the
// Deployment, the scheduler places its Pods and kwok runs them: no test
// writes a Deployment's or a Pod's status.
func TestMain(m *testing.M) {
	testenv.MainWith(m, testcluster.Around(testenv.Config, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
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
		if err := (&executor.Reconciler{
			Client: mgr.GetClient(), APIReader: reads.Wrap(mgr.GetAPIReader()), Recorder: mgr.GetEventRecorder("hourglassexecutor"),
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		stop := testenv.StartManager(mgr)
		return func() {
			stop()
		}, nil
	}))
}

type env struct {
	t  *testing.T
	ns string
	c  client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, ns: testenv.Namespace(t), c: testenv.Client()}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = e.c.DeleteAllOf(ctx, &hourglassv1alpha1.HourglassExecutor{}, client.InNamespace(e.ns))
		_ = e.c.DeleteAllOf(ctx, &hourglassv1alpha1.Performer{}, client.InNamespace(e.ns))
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

func (e *env) updateExecutor(name string, mutate func(*hourglassv1alpha1.HourglassExecutor)) {
	e.t.Helper()
	eventually.That(e.t, 10*time.Second, func() (bool, string) {
		x := &hourglassv1alpha1.HourglassExecutor{}
		if err := e.get(name, x); err != nil {
			return false, err.Error()
		}
		mutate(x)
		if err := e.c.Update(context.Background(), x); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// waitDeployment waits for the executor's Deployment to satisfy cond.
func (e *env) waitDeployment(name string, cond func(*appsv1.Deployment) bool) *appsv1.Deployment {
	e.t.Helper()
	d := &appsv1.Deployment{}
	eventually.That(e.t, 20*time.Second, func() (bool, string) {
		if err := e.get(name, d); err != nil {
			return false, err.Error()
		}
		return cond(d), fmt.Sprintf("generation %d, template annotations %v", d.Generation, d.Spec.Template.Annotations)
	})
	return d
}

// hold keeps the executor's Pods bound but not started until the test
// releases them: the kubelet's image pull, or a Secret volume it cannot mount yet.
func hold(x *hourglassv1alpha1.HourglassExecutor) {
	x.Spec.Env = append(x.Spec.Env, corev1.EnvVar{Name: testcluster.HoldReadyEnv, Value: "true"})
}

// rollOut lets kwok start the Deployment's held Pods, as each new one
// appears, until the executor reports the Deployment Available. The
// deployment controller, the ReplicaSets and the scheduler are the real ones.
func (e *env) rollOut(name string) *hourglassv1alpha1.HourglassExecutor {
	e.t.Helper()
	x := &hourglassv1alpha1.HourglassExecutor{}
	eventually.That(e.t, 60*time.Second, func() (bool, string) {
		pods := e.deploymentPods(name)
		for _, p := range pods {
			if _, ok := p.Annotations[testcluster.ReleaseAnnotation]; !ok && p.DeletionTimestamp.IsZero() {
				patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, testcluster.ReleaseAnnotation)
				if err := e.c.Patch(context.Background(), &p, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
					return false, err.Error()
				}
			}
		}
		if err := e.get(name, x); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(x.Status.Conditions, meta.ReadyCondition)
		return c != nil && c.Reason == executor.ReasonAvailable && c.ObservedGeneration == x.Generation,
			fmt.Sprintf("%d Pods; %s", len(pods), describe(x))
	})
	return x
}

// deploymentPods are the Pods of the executor's Deployment.
func (e *env) deploymentPods(name string) []corev1.Pod {
	e.t.Helper()
	d := &appsv1.Deployment{}
	if err := e.get(name, d); err != nil {
		e.t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		e.t.Fatal(err)
	}
	var list corev1.PodList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

func (e *env) waitReason(name, reason string) *hourglassv1alpha1.HourglassExecutor {
	e.t.Helper()
	x := &hourglassv1alpha1.HourglassExecutor{}
	eventually.That(e.t, 20*time.Second, func() (bool, string) {
		if err := e.get(name, x); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(x.Status.Conditions, meta.ReadyCondition)
		return c != nil && c.Reason == reason && c.ObservedGeneration == x.Generation, describe(x)
	})
	return x
}

func describe(x *hourglassv1alpha1.HourglassExecutor) string {
	var b strings.Builder
	fmt.Fprintf(&b, "available %d, configHash %s; ", x.Status.AvailableReplicas, x.Status.ConfigHash)
	for _, c := range x.Status.Conditions {
		fmt.Fprintf(&b, "%s=%s %s: %s; ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func (e *env) events() []eventsv1.Event {
	e.t.Helper()
	var list eventsv1.EventList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

func (e *env) waitEvent(reason, want string) {
	e.t.Helper()
	eventually.That(e.t, 10*time.Second, func() (bool, string) {
		var seen []string
		for _, ev := range e.events() {
			seen = append(seen, ev.Reason+": "+ev.Note)
			if ev.Reason == reason && strings.Contains(ev.Note, want) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("events: %q", seen)
	})
}

func condition(x *hourglassv1alpha1.HourglassExecutor, t string) metav1.Condition {
	if c := apimeta.FindStatusCondition(x.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

package executor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/executor"
)

// overlapWatch records, from a watch on the executor's Pods, every moment a
// Pod of a new ReplicaSet appeared while a Pod of another still existed:
// two executors that could sign with the same keys at once.
type overlapWatch struct {
	mu       sync.Mutex
	live     map[string]string // Pod name → pod-template-hash
	overlaps []string
}

func watchOverlaps(t *testing.T, ns, name string) *overlapWatch {
	t.Helper()
	wc, err := client.NewWithWatch(testenv.Config(), client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), client.MatchingLabels{executor.LabelName: name})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	o := &overlapWatch{live: map[string]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			hash := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
			o.mu.Lock()
			switch ev.Type {
			case watch.Added:
				for other, h := range o.live {
					if h != hash {
						o.overlaps = append(o.overlaps, fmt.Sprintf("%s (%s) created while %s (%s) still existed", p.Name, hash, other, h))
					}
				}
				o.live[p.Name] = hash
			case watch.Deleted:
				delete(o.live, p.Name)
			}
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return o
}

func (o *overlapWatch) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.overlaps...)
}

// The executor's operations: a Recreate rollout never runs a new executor
// beside an old one; TCP probes on the gRPC port; the scale subresource an
// HPA drives; the replica gauges.
func TestExecutorOperations(t *testing.T) {
	e := newEnv(t)
	e.create(keysSecret("operator-keys", true))
	e.create(testExecutor("ops", hold, func(x *hourglassv1alpha1.HourglassExecutor) { x.Spec.GRPCPort = 9191 }))
	d := e.waitDeployment("ops", func(*appsv1.Deployment) bool { return true })
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q, want Recreate", d.Spec.Strategy.Type)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Ports) != 1 || c.Ports[0].Name != "grpc" || c.Ports[0].ContainerPort != 9191 {
		t.Errorf("ports %+v, want grpc 9191", c.Ports)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.TCPSocket == nil || p.TCPSocket.Port.StrVal != "grpc" {
			t.Errorf("%s probe %+v, want a TCP connection to the grpc port", name, p)
		}
	}
	e.rollOut("ops")

	// A configuration change rolls: the old Pod is gone before the new one.
	overlaps := watchOverlaps(t, e.ns, "ops")
	e.updateExecutor("ops", func(x *hourglassv1alpha1.HourglassExecutor) { x.Spec.Chains[0].RPCURL = "https://eth-3.example.com" })
	e.waitReason("ops", executor.ReasonRollingOut)
	e.rollOut("ops")
	if o := overlaps.seen(); len(o) > 0 {
		t.Errorf("two executors at once during the rollout: %v", o)
	}

	// The scale subresource, as an HPA uses it.
	ctx := context.Background()
	x := &hourglassv1alpha1.HourglassExecutor{}
	if err := e.get("ops", x); err != nil {
		t.Fatal(err)
	}
	scale := &autoscalingv1.Scale{}
	if err := e.c.SubResource("scale").Get(ctx, x, scale); err != nil {
		t.Fatalf("reading the scale subresource: %v", err)
	}
	if scale.Spec.Replicas != 1 || scale.Status.Selector != executor.LabelApp+"=hourglass-executor,"+executor.LabelName+"=ops" {
		t.Errorf("scale %+v, want 1 replica and the Pods' selector", scale)
	}
	scale.Spec.Replicas = 3
	if err := e.c.SubResource("scale").Update(ctx, x, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("scaling through the subresource: %v", err)
	}
	e.waitDeployment("ops", func(d *appsv1.Deployment) bool { return d.Spec.Replicas != nil && *d.Spec.Replicas == 3 })
	e.rollOut("ops")
	eventually.That(t, 20*time.Second, func() (bool, string) {
		desired, _ := hypervisorlab.MetricValue(t, "hyperfleet_executor_replicas_desired", map[string]string{"executor_namespace": e.ns, "executor": "ops"})
		available, _ := hypervisorlab.MetricValue(t, "hyperfleet_executor_replicas_available", map[string]string{"executor_namespace": e.ns, "executor": "ops"})
		return desired == 3 && available == 3, fmt.Sprintf("desired %v, available %v; want 3 and 3", desired, available)
	})
	if n, _ := hypervisorlab.MetricValue(t, "hyperfleet_executor_config_rollouts_total", map[string]string{"executor_namespace": e.ns, "executor": "ops"}); n != 1 {
		t.Errorf("hyperfleet_executor_config_rollouts_total = %v, want 1", n)
	}
}

package machineclaim

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// A claim read from a cache that does not yet show the machine it took a
// moment ago (as stored, its status names it) takes no second standby
// machine: it goes on with the one it has. Before, it bound the free
// standby claim beside it, and the machine it had taken was lost.
func TestAClaimReadStaleAfterItsTakeTakesNoSecondMachine(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t)
	c := testenv.Client()
	tmpl := oneHot(ns, "stale-take")
	free := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "free", Namespace: ns,
			Labels:      map[string]string{standby.TemplateLabel: tmpl.Name},
			Annotations: map[string]string{standby.GenerationAnnotation: "1"}},
		Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: tmpl.Name}},
	}
	taker := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "taker", Namespace: ns},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: tmpl.Name}},
	}
	for _, o := range []*hypervisorv1alpha1.MachineClaim{free, taker} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// What the cache shows of the taker: as made, no machine.
	stale := taker.DeepCopy()
	start := metav1.NewTime(time.Now())
	for o, st := range map[*hypervisorv1alpha1.MachineClaim]hypervisorv1alpha1.MachineClaimStatus{
		taker: {Phase: hypervisorv1alpha1.MachineReady, ClusterName: "pve", MachineName: "taken-a-moment-ago", StartTime: &start},
		free:  {Phase: hypervisorv1alpha1.MachineReady, ClusterName: "pve", MachineName: "free-machine"},
	} {
		patch := client.MergeFrom(o.DeepCopy())
		o.Status = st
		if err := c.Status().Patch(ctx, o, patch); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(free), free); err != nil {
		t.Fatal(err)
	}
	if !standby.Free(free, tmpl) {
		t.Fatalf("the standby claim beside it is not free, the test proves nothing: %+v", free.Status)
	}

	r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Clock: clock.RealClock{}}
	s := &scope{claim: stale, patch: skeleton.NewStatusPatch(c, stale), now: time.Now(), template: tmpl, provider: owners{}}
	if _, err := r.take(ctx, s); err != nil {
		t.Fatal(err)
	}
	err := c.Get(ctx, client.ObjectKeyFromObject(free), free)
	switch {
	case apierrors.IsNotFound(err):
		t.Fatalf("the claim took a second machine: standby claim %s was taken and deleted", free.Name)
	case err != nil:
		t.Fatal(err)
	}
	if b, bound := standby.BoundTo(free); bound {
		t.Errorf("the claim took a second machine: standby claim %s is bound to %s", free.Name, b.Name)
	}
	if s.claim.Status.MachineName != "taken-a-moment-ago" {
		t.Errorf("the reconcile goes on with machine %q; want the one the claim took, as stored", s.claim.Status.MachineName)
	}
}

// oneHot is a template keeping one hot machine, never stored: the suite's
// operator, which reconciles the tests' claims too, only reports them
// waiting for it, and the tests hand it to take themselves.
func oneHot(ns, name string) *hypervisorv1alpha1.HypervisorMachineTemplate {
	return &hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Generation: 1},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			Standby:    &hypervisorv1alpha1.StandbySpec{Hot: 1},
		},
	}
}

// owners is a provider that can hand machines over, and nothing else.
type owners struct{ providers.Hypervisor }

func (owners) ChangeOwner(context.Context, providers.MachineRef, providers.Owner, providers.Owner) error {
	return nil
}

// A claim that finds no standby machine free (a burst bigger than the hot
// count) reads nothing past the cache: it reads itself as stored only when
// it is about to bind.
func TestAClaimThatFindsNoStandbyMachineReadsNothingPastTheCache(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t)
	c := testenv.Client()
	tmpl := oneHot(ns, "none-free")
	claim := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "misses", Namespace: ns},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: tmpl.Name}},
	}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	reads := &countingReader{Reader: c}
	r := &Reconciler{Client: c, APIReader: reads, Recorder: events.NewFakeRecorder(100), Clock: clock.RealClock{}}
	for range 3 {
		s := &scope{claim: claim.DeepCopy(), patch: skeleton.NewStatusPatch(c, claim), now: time.Now(), template: tmpl, provider: owners{}}
		if _, err := r.take(ctx, s); err != nil {
			t.Fatal(err)
		}
		if s.claim.Status.MachineName != "" {
			t.Fatalf("the claim took machine %q; no standby machine exists", s.claim.Status.MachineName)
		}
	}
	if reads.gets != 0 {
		t.Errorf("3 reconciles of a claim with no standby machine free read past the cache %d times; want 0", reads.gets)
	}
}

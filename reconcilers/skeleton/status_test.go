package skeleton_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newClaim creates a MachineClaim to finalize the status of; any kind would do.
func newClaim(t *testing.T) *hypervisorv1alpha1.MachineClaim {
	t.Helper()
	c := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace(t), Name: "claim"},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "t"}},
	}
	if err := testenv.Client().Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func reread(t *testing.T, c *hypervisorv1alpha1.MachineClaim) *hypervisorv1alpha1.MachineClaim {
	t.Helper()
	out := &hypervisorv1alpha1.MachineClaim{}
	if err := testenv.Client().Get(context.Background(), client.ObjectKeyFromObject(c), out); err != nil {
		t.Fatal(err)
	}
	return out
}

var progressing = conditions.Summary{State: conditions.Progressing, Reason: "Provisioning", Message: "making the machine"}

func TestFinalizeWritesOnceAndStampsOnSuccess(t *testing.T) {
	ctx := context.Background()
	claim := newClaim(t)
	p := skeleton.NewStatusPatch(testenv.Client(), claim)
	res, err := p.Finalize(ctx, progressing, ctrl.Result{RequeueAfter: time.Second}, nil)
	if err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("Finalize = %v, %v; want the phases' result back", res, err)
	}
	got := reread(t, claim)
	if got.Status.ObservedGeneration != got.Generation || !apimeta.IsStatusConditionTrue(got.Status.Conditions, meta.ReconcilingCondition) {
		t.Fatalf("status = %+v; want Reconciling and observedGeneration %d", got.Status, got.Generation)
	}

	// The same conclusion again writes nothing: no resourceVersion bump.
	p = skeleton.NewStatusPatch(testenv.Client(), got)
	if _, err := p.Finalize(ctx, progressing, ctrl.Result{}, nil); err != nil {
		t.Fatal(err)
	}
	if again := reread(t, claim); again.ResourceVersion != got.ResourceVersion {
		t.Fatalf("an unchanged status was written (resourceVersion %s → %s)", got.ResourceVersion, again.ResourceVersion)
	}
}

func TestFinalizeKeepsObservedGenerationOnError(t *testing.T) {
	ctx := context.Background()
	claim := newClaim(t)
	// A new generation the reconcile then fails on.
	claim.Spec.Hostname = "h"
	if err := testenv.Client().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("hypervisor unreachable")
	p := skeleton.NewStatusPatch(testenv.Client(), claim)
	_, err := p.Finalize(ctx, conditions.Summary{State: conditions.Waiting, Reason: "HypervisorError", Message: "retrying"}, ctrl.Result{}, boom)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v; want the phases' error back", err)
	}
	got := reread(t, claim)
	if got.Status.ObservedGeneration != 0 {
		t.Fatalf("observedGeneration = %d after a failed reconcile; want it left at 0", got.Status.ObservedGeneration)
	}
	if c := apimeta.FindStatusCondition(got.Status.Conditions, meta.ReadyCondition); c == nil || c.Reason != "HypervisorError" {
		t.Fatalf("Ready = %+v; want the failure's reason", c)
	}
}

// Deletion bumps the generation; a reconcile that only sees the deletion
// under way writes nothing (kstatus says Terminating from the
// deletionTimestamp), while one that concludes something writes it.
func TestFinalizeOfADeletionUnderWayWritesNothing(t *testing.T) {
	ctx := context.Background()
	claim := newClaim(t)
	p := skeleton.NewStatusPatch(testenv.Client(), claim)
	if err := p.EnsureFinalizer(ctx, "test.hyperfleet.io/cleanup"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Finalize(ctx, progressing, ctrl.Result{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Client().Delete(ctx, reread(t, claim)); err != nil {
		t.Fatal(err)
	}
	deleting := reread(t, claim)
	if deleting.Generation == deleting.Status.ObservedGeneration {
		t.Fatalf("generation %d after the deletion, observed %d: the API server no longer bumps it, so this test shows nothing",
			deleting.Generation, deleting.Status.ObservedGeneration)
	}
	if _, err := skeleton.NewStatusPatch(testenv.Client(), deleting).Finalize(ctx, conditions.Summary{}, ctrl.Result{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := reread(t, claim); got.ResourceVersion != deleting.ResourceVersion {
		t.Fatalf("a deletion under way was written (resourceVersion %s → %s, status %+v)", deleting.ResourceVersion, got.ResourceVersion, got.Status)
	}
	failing := conditions.Summary{State: conditions.Waiting, Reason: "DeleteFailed", Message: "retrying"}
	if _, err := skeleton.NewStatusPatch(testenv.Client(), deleting).Finalize(ctx, failing, ctrl.Result{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := reread(t, claim); got.Status.ObservedGeneration != got.Generation || !apimeta.IsStatusConditionFalse(got.Status.Conditions, meta.ReadyCondition) {
		t.Fatalf("status %+v; want the failing deletion written for generation %d", got.Status, got.Generation)
	}
	p = skeleton.NewStatusPatch(testenv.Client(), reread(t, claim))
	if err := p.ReleaseFinalizer(ctx, "test.hyperfleet.io/cleanup"); err != nil {
		t.Fatal(err)
	}
}

func TestFinalizeStalledIsTerminal(t *testing.T) {
	claim := newClaim(t)
	p := skeleton.NewStatusPatch(testenv.Client(), claim)
	_, err := p.Finalize(context.Background(), progressing, ctrl.Result{}, skeleton.Stalled("InvalidSpec", "spec.hostname: not a DNS label; correct it"))
	if !errors.Is(err, reconcile.TerminalError(nil)) {
		t.Fatalf("err = %v; want a terminal error", err)
	}
	got := reread(t, claim)
	c := apimeta.FindStatusCondition(got.Status.Conditions, meta.StalledCondition)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "InvalidSpec" || got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("status = %+v; want Stalled=True InvalidSpec for this generation", got.Status)
	}
}

func TestFinalizeConflictAndReleaseWriteNothing(t *testing.T) {
	ctx := context.Background()
	claim := newClaim(t)
	rv := claim.ResourceVersion
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "machineclaims"}, claim.Name, errors.New("stale"))
	res, err := skeleton.NewStatusPatch(testenv.Client(), claim).Finalize(ctx, progressing, ctrl.Result{}, conflict)
	if err != nil || res.RequeueAfter != skeleton.ConflictRequeue {
		t.Fatalf("conflict: Finalize = %v, %v; want a silent requeue", res, err)
	}
	p := skeleton.NewStatusPatch(testenv.Client(), claim)
	p.Release()
	if _, err := p.Finalize(ctx, progressing, ctrl.Result{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := reread(t, claim); got.ResourceVersion != rv {
		t.Fatalf("status written after a conflict or a release (resourceVersion %s → %s)", rv, got.ResourceVersion)
	}
}

func TestFinalizerAddedThenReleased(t *testing.T) {
	ctx := context.Background()
	claim := newClaim(t)
	const fin = "test.hyperfleet.io/cleanup"
	p := skeleton.NewStatusPatch(testenv.Client(), claim)
	if err := p.EnsureFinalizer(ctx, fin); err != nil {
		t.Fatal(err)
	}
	if err := p.EnsureFinalizer(ctx, fin); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Finalize(ctx, progressing, ctrl.Result{}, nil); err != nil {
		t.Fatal(err)
	}
	got := reread(t, claim)
	if len(got.Finalizers) != 1 || got.Finalizers[0] != fin || got.Status.Phase != "" && got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("finalizers %v, status %+v; want one finalizer and the status written", got.Finalizers, got.Status)
	}
	if err := testenv.Client().Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	got = reread(t, claim)
	if deadline := skeleton.DeletionDeadline(got, time.Minute); !deadline.Equal(got.DeletionTimestamp.Add(time.Minute)) {
		t.Fatalf("deadline %s, want a minute after %s", deadline, got.DeletionTimestamp)
	}
	p = skeleton.NewStatusPatch(testenv.Client(), got)
	if err := p.ReleaseFinalizer(ctx, fin); err != nil {
		t.Fatal(err)
	}
	// Released: the claim is gone, and Finalize neither writes nor fails.
	if _, err := p.Finalize(ctx, progressing, ctrl.Result{}, nil); err != nil {
		t.Fatalf("Finalize after release: %v", err)
	}
	eventually.That(t, 10*time.Second, func() (bool, string) {
		err := testenv.Client().Get(ctx, client.ObjectKeyFromObject(claim), &hypervisorv1alpha1.MachineClaim{})
		return apierrors.IsNotFound(err), fmt.Sprintf("claim still there: %v", err)
	})
}

func TestCheckpointWritesNowAndRebases(t *testing.T) {
	ctx := context.Background()
	claim := newClaim(t)
	p := skeleton.NewStatusPatch(testenv.Client(), claim)
	claim.Status.MachineName = "hf-claim"
	if err := p.Checkpoint(ctx, progressing); err != nil {
		t.Fatal(err)
	}
	got := reread(t, claim)
	if got.Status.MachineName != "hf-claim" || got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("status after the checkpoint = %+v; want the machine name recorded before the create call", got.Status)
	}
	// Nothing changed since the checkpoint: the final step writes nothing.
	if _, err := p.Finalize(ctx, progressing, ctrl.Result{}, nil); err != nil {
		t.Fatal(err)
	}
	if again := reread(t, claim); again.ResourceVersion != got.ResourceVersion {
		t.Fatalf("the final step rewrote what the checkpoint wrote (resourceVersion %s → %s)", got.ResourceVersion, again.ResourceVersion)
	}
}

// A reconcile that ran out of time (the manager's reconcile timeout, a
// hung call) still writes why: its own context has ended, so the write
// takes a fresh, bounded one.
func TestFinalizeWritesAfterTheReconcileTimedOut(t *testing.T) {
	claim := newClaim(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	p := skeleton.NewStatusPatch(testenv.Client(), claim)
	timedOut := conditions.Summary{State: conditions.Waiting, Reason: "HypervisorUnreachable", Message: "the hypervisor timed out; retrying"}
	if _, err := p.Finalize(ctx, timedOut, ctrl.Result{}, ctx.Err()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v; want the reconcile's deadline back", err)
	}
	got := reread(t, claim)
	if c := apimeta.FindStatusCondition(got.Status.Conditions, meta.ReadyCondition); c == nil || c.Reason != "HypervisorUnreachable" {
		t.Fatalf("Ready = %+v; a timed-out reconcile must still write its conclusion", c)
	}
}

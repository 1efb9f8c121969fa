package runnerpool_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// A pool whose claims the API server refuses to delete, for good, is
// released at its deadline with a Warning event: a persistent API error
// never pins a deleted pool.
func TestPoolReleasedAtDeadlineWhenClaimsCannotBeDeleted(t *testing.T) {
	l := newLab(t)
	one := int32(1)
	l.pool("pinned", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Replicas = &one })
	claim := l.onlyClaim("pinned")
	refuseClaimDeletes(t, l.ns, "pinned")

	if err := l.c.Delete(rootCtx, l.get("pinned")); err != nil {
		t.Fatal(err)
	}
	var pool *hypervisorv1alpha1.RunnerPool
	eventually.That(t, 30*time.Second, func() (bool, string) {
		pool = l.get("pinned")
		return readyReason(pool) == "Deleting" && strings.Contains(describe(pool), "refused by the test"), describe(pool)
	})
	ageDeletion(t, pool, time.Minute+time.Second) // the suite's FinalizationTimeout
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "pinned"}, &hypervisorv1alpha1.RunnerPool{})
		return apierrors.IsNotFound(err), fmt.Sprintf("the pool past its deadline: %v", err)
	})
	var list eventsv1.EventList
	if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns)); err != nil {
		t.Fatal(err)
	}
	// The Warning names what was left: the claim, and the label of the
	// registrations a person may have to remove on GitHub.
	warned := false
	for _, e := range list.Items {
		warned = warned || (e.Regarding.Kind == "RunnerPool" && e.Regarding.Name == "pinned" &&
			e.Type == corev1.EventTypeWarning && e.Reason == "FinalizerDeadlineExceeded" &&
			strings.Contains(e.Note, claim.Name) && strings.Contains(e.Note, runnerstate.PoolRunnerLabel(pool)))
	}
	if !warned {
		t.Errorf("no FinalizerDeadlineExceeded Warning naming claim %s and label %s: %v", claim.Name, runnerstate.PoolRunnerLabel(pool), l.events("pinned"))
	}
	// The claim the API server kept is still there, as the event said.
	if err := l.c.Get(rootCtx, client.ObjectKeyFromObject(&claim), &hypervisorv1alpha1.MachineClaim{}); err != nil {
		t.Errorf("the claim whose deletion was refused: %v", err)
	}
}

// A pool deleted while the pools' clock reads later than the API server's
// (the suite's stepped clock; a manager whose clock runs ahead) still
// deletes its machines and registrations: its deadline runs from when its
// reconciler saw the deletion, by that clock, not from the API server's
// deletionTimestamp, which would put it past the deadline at once.
func TestDeletedPoolCleansUpWhenItsClockIsAhead(t *testing.T) {
	l := newLab(t)
	one := int32(1)
	l.pool("ahead", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Replicas = &one })
	eventually.That(t, time.Minute, func() (bool, string) {
		p := l.get("ahead")
		return p.Status.IdleReplicas == 1 && registered("ahead") == 1, describe(p)
	})
	// Two minutes ahead of the API server: past the suite's FinalizationTimeout.
	age(metav1.Now(), 2*time.Minute)
	if err := l.c.Delete(rootCtx, l.get("ahead")); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		return len(l.claims()) == 0 && l.vms() == 0 && registered("ahead") == 0,
			fmt.Sprintf("%d claims, %d VMs, %d registered; events %q", len(l.claims()), l.vms(), registered("ahead"), l.events("ahead"))
	})
	for _, e := range l.events("ahead") {
		if strings.HasPrefix(e, "FinalizerDeadlineExceeded: ") {
			t.Errorf("the pool gave up at once: %s", e)
		}
	}
}

// kubectl delete of a runner's claim takes its bootstrap Secret with it:
// the Secret is the claim's, and the claim's finalizer deletes it.
func TestClaimDeletedByHandTakesItsBootstrapSecret(t *testing.T) {
	l := newLab(t)
	one := int32(1)
	pool := l.pool("byhand", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Replicas = &one })
	defer func() { _ = l.c.Delete(rootCtx, pool) }()
	first := l.onlyClaim("byhand")
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: l.ns, Name: first.Name + "-bootstrap"}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		if err := l.c.Get(rootCtx, key, secret); err != nil {
			return false, err.Error()
		}
		owner := metav1.GetControllerOf(secret)
		return owner != nil && owner.UID == first.UID, fmt.Sprintf("bootstrap Secret owned by %v", secret.OwnerReferences)
	})
	if err := l.c.Delete(rootCtx, &first); err != nil {
		t.Fatal(err)
	}
	l.replaced("byhand", first.Name, "")
	// The claim's finalizer deletes the Secret once the VM is gone, and the
	// pool when it sees the claim ending: under `go test ./...` on two busy
	// cores that took over 30 s once (CI, 25 Nov), so the bound is generous;
	// what is checked is that the Secret goes, not how fast.
	eventually.That(t, 90*time.Second, func() (bool, string) {
		err := l.c.Get(rootCtx, key, &corev1.Secret{})
		return apierrors.IsNotFound(err), fmt.Sprintf("the deleted claim's bootstrap Secret: %v", err)
	})
}

// A bootstrap Secret the pool still owns (a crash before it was handed
// over to its claim) is deleted by the pool once it sees the claim being
// deleted by someone else.
func TestPoolDeletesBootstrapSecretOfClaimDeletedBehindItsBack(t *testing.T) {
	l := newLab(t)
	one := int32(1)
	pool := l.pool("behind", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Replicas = &one })
	defer func() { _ = l.c.Delete(rootCtx, pool) }()
	first := l.onlyClaim("behind")
	key := client.ObjectKey{Namespace: l.ns, Name: first.Name + "-bootstrap"}
	// Back to the pool's ownership, so the claim's finalizer leaves it.
	eventually.That(t, 30*time.Second, func() (bool, string) {
		secret := &corev1.Secret{}
		if err := l.c.Get(rootCtx, key, secret); err != nil {
			return false, err.Error()
		}
		if owner := metav1.GetControllerOf(secret); owner == nil || owner.Kind != "MachineClaim" {
			return false, fmt.Sprintf("not handed over yet: %v", secret.OwnerReferences)
		}
		secret.OwnerReferences = nil
		p := l.get("behind")
		if err := controllerutil.SetControllerReference(p, secret, l.c.Scheme()); err != nil {
			t.Fatal(err)
		}
		err := l.c.Update(rootCtx, secret)
		return err == nil, fmt.Sprintf("handing the Secret back to the pool: %v", err)
	})
	// A finalizer of the test's holds the claim, so only the pool can have
	// deleted the Secret.
	claim := &hypervisorv1alpha1.MachineClaim{}
	eventually.That(t, 10*time.Second, func() (bool, string) {
		if err := l.c.Get(rootCtx, client.ObjectKeyFromObject(&first), claim); err != nil {
			return false, err.Error()
		}
		controllerutil.AddFinalizer(claim, "test.hyperfleet.io/hold")
		err := l.c.Update(rootCtx, claim)
		return err == nil, fmt.Sprint(err)
	})
	release := func() {
		eventually.That(t, 10*time.Second, func() (bool, string) {
			if err := l.c.Get(rootCtx, client.ObjectKeyFromObject(&first), claim); err != nil {
				return apierrors.IsNotFound(err), err.Error()
			}
			controllerutil.RemoveFinalizer(claim, "test.hyperfleet.io/hold")
			err := l.c.Update(rootCtx, claim)
			return err == nil, fmt.Sprint(err)
		})
	}
	defer release()
	if err := l.c.Delete(rootCtx, claim); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := l.c.Get(rootCtx, key, &corev1.Secret{})
		return apierrors.IsNotFound(err), fmt.Sprintf("the bootstrap Secret of a claim being deleted: %v", err)
	})
	release()
	l.replaced("behind", first.Name, "")
}

// refuseClaimDeletes makes the API server refuse, until the test ends, every
// deletion of the pool's MachineClaims in namespace ns: a
// ValidatingAdmissionPolicy, as a cluster's own policy could.
func refuseClaimDeletes(t *testing.T, ns, pool string) {
	t.Helper()
	name := "refuse-claim-deletes-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{hypervisorv1alpha1.GroupVersion.Group},
							APIVersions: []string{"*"}, Resources: []string{"machineclaims"}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "refused by the test"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
				ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{runnerpool.PoolLabel: pool}},
			},
		},
	}
	// Cleanups run last first: the policy goes, then the claims it kept
	// (once the API server has dropped it).
	t.Cleanup(func() {
		eventually.That(t, 30*time.Second, func() (bool, string) {
			var claims hypervisorv1alpha1.MachineClaimList
			if err := testenv.Client().List(rootCtx, &claims, client.InNamespace(ns), client.MatchingLabels{runnerpool.PoolLabel: pool}); err != nil {
				return false, err.Error()
			}
			var errs []string
			for i := range claims.Items {
				if err := testenv.Client().Delete(rootCtx, &claims.Items[i]); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, err.Error())
				}
			}
			return len(errs) == 0, fmt.Sprintf("deleting the kept claims: %v", errs)
		})
	})
	for _, obj := range []client.Object{policy, binding} {
		if err := testenv.Client().Create(rootCtx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = testenv.Client().Delete(rootCtx, obj) })
	}
	// The policy applies once the API server has loaded it: a dry-run
	// deletion tells.
	eventually.That(t, 30*time.Second, func() (bool, string) {
		var claims hypervisorv1alpha1.MachineClaimList
		if err := testenv.Client().List(rootCtx, &claims, client.InNamespace(ns), client.MatchingLabels{runnerpool.PoolLabel: pool}); err != nil || len(claims.Items) == 0 {
			return false, fmt.Sprintf("no claim to try: %v", err)
		}
		err := testenv.Client().Delete(rootCtx, &claims.Items[0], client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "refused by the test"), fmt.Sprintf("dry-run deletion: %v", err)
	})
}

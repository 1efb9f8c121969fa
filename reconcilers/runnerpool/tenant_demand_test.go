package runnerpool_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// A tenant's pool in another namespace that names the same repository, with
// runner labels that fit the jobs better (fewer) and credentials GitHub
// refuses, takes none of the repository's jobs: they are recorded in the
// namespace of the pool whose credentials reach the repository, and its
// runners run them. Before, the better-fitting pool took the demand and
// the jobs waited for runners it could never make.
func TestPoolWithoutWorkingCredentialsTakesNoDemand(t *testing.T) {
	const label = "tenant-demand"
	owner := newLab(t)
	intruder := newLab(t)
	// The intruder acts as a tenant really is (docs/security.md).
	intruder.c = testenv.Tenant(t, intruder.ns)
	var s corev1.Secret
	if err := intruder.c.Get(rootCtx, client.ObjectKey{Namespace: intruder.ns, Name: "github-pat"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{"token": []byte("ghp_not-a-token-github-knows")}
	if err := intruder.c.Update(rootCtx, &s); err != nil {
		t.Fatal(err)
	}
	intruder.pool("claimant", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Labels = []string{label} })
	owner.pool("owned", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Labels = []string{label, "owned"} })
	// Both pools have reconciled once: the owner's is Ready, the
	// intruder's stalled on its credentials.
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := owner.get("owned")
		return apimeta.IsStatusConditionTrue(p.Status.Conditions, meta.ReadyCondition), describe(p)
	})
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := intruder.get("claimant")
		c := apimeta.FindStatusCondition(p.Status.Conditions, meta.ReadyCondition)
		return c != nil && c.Status == "False", describe(p)
	})
	id, err := gh.QueueJob(repo, []string{"self-hosted", label})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		done, msg := jobDone(id)
		return done, msg + "; intruder: " + describe(intruder.get("claimant")) + "; owner: " + describe(owner.get("owned"))
	})
	if j, _ := gh.Job(id); !strings.HasPrefix(j.RunnerName, "owned-") {
		t.Errorf("the job ran on %q, not on a runner of the pool whose credentials reach %s", j.RunnerName, repo)
	}
	var jobs hypervisorv1alpha1.RunnerJobList
	if err := intruder.c.List(rootCtx, &jobs, client.InNamespace(intruder.ns)); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Errorf("the pool with refused credentials holds %d of %s's jobs: %s", len(jobs.Items), repo, fmt.Sprint(jobs.Items[0].Spec))
	}
	if n := len(intruder.claims()); n != 0 {
		t.Errorf("the pool with refused credentials made %d claims", n)
	}
}

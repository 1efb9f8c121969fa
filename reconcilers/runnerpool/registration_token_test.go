package runnerpool_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

// A pool that chose RegistrationToken fetches a token for each runner it
// makes and never gives one token to two runners (a token registers any
// number of runners for an hour): N runners made, N registration-token
// POSTs, each token registering exactly one runner. Its runners take jobs;
// the replacement of one that did gets a token of its own. On both
// providers: the token travels in the claim's Secret on KubeVirt and on
// the NoCloud ISO on Proxmox.
func TestRegistrationTokenIsFetchedPerRunner(t *testing.T) {
	for _, provider := range []string{"KubeVirt", "Proxmox"} {
		t.Run(provider, func(t *testing.T) {
			l, makePool := labOn(t, provider)
			name := "tok" + strings.ToLower(provider[:2])
			three := int32(3)
			tokens := tokenCount{posts: gh.Calls(githubsim.EndpointRepoRegistrationToken), minted: len(gh.RegistrationTokenUses(repo))}
			pool := makePool(name, func(p *hypervisorv1alpha1.RunnerPool) {
				p.Spec.RegistrationMethod = hypervisorv1alpha1.RegistrationToken
				p.Spec.Replicas = &three
			})
			eventually.That(t, 2*time.Minute, func() (bool, string) {
				p := l.get(name)
				return p.Status.IdleReplicas == 3 && tokens.used() == 3, fmt.Sprintf("%d tokens used; %s", tokens.used(), describe(p))
			})
			tokens.check(t, name, 3)

			id, err := gh.QueueJob(repo, []string{"self-hosted", name})
			if err != nil {
				t.Fatal(err)
			}
			eventually.That(t, time.Minute, func() (bool, string) { return jobDone(id) })
			// The runner that took the job is gone; its replacement
			// registered with a fourth token.
			eventually.That(t, time.Minute, func() (bool, string) {
				p := l.get(name)
				return p.Status.IdleReplicas == 3 && tokens.used() == 4, fmt.Sprintf("%d tokens used; %s", tokens.used(), describe(p))
			})
			tokens.check(t, name, 4)

			if err := l.c.Delete(rootCtx, pool); err != nil {
				t.Fatal(err)
			}
			eventually.That(t, time.Minute, func() (bool, string) {
				return len(l.claims()) == 0 && registered(name) == 0, fmt.Sprintf("%d claims, %d registered", len(l.claims()), registered(name))
			})
		})
	}
}

// labOn makes a lab on the provider and the function making its pools.
func labOn(t *testing.T, provider string) (*lab, func(string, ...func(*hypervisorv1alpha1.RunnerPool)) *hypervisorv1alpha1.RunnerPool) {
	if provider == "Proxmox" {
		pl := newProxmoxLab(t)
		return pl.lab, pl.pool
	}
	l := newLab(t)
	return l, l.pool
}

// tokenCount is githubsim's count of registration tokens, from a mark on:
// the POSTs answered and the tokens minted, each with the runners it
// registered. No test runs beside another, and only this one's pools use
// registration tokens, so what follows the mark is this test's.
type tokenCount struct{ posts, minted int }

// uses lists, per token minted since the mark, the runners it registered.
func (c tokenCount) uses() [][]string { return gh.RegistrationTokenUses(repo)[c.minted:] }

// used counts the tokens minted since the mark that registered a runner.
func (c tokenCount) used() int {
	n := 0
	for _, u := range c.uses() {
		if len(u) > 0 {
			n++
		}
	}
	return n
}

// check wants exactly n tokens fetched since the mark, each registering
// one runner of pool, no runner twice.
func (c tokenCount) check(t *testing.T, pool string, n int) {
	t.Helper()
	if posts := gh.Calls(githubsim.EndpointRepoRegistrationToken) - c.posts; posts != n {
		t.Errorf("%d registration-token POSTs for %d runners", posts, n)
	}
	uses := c.uses()
	if len(uses) != n {
		t.Errorf("%d tokens minted for %d runners", len(uses), n)
	}
	seen := map[string]bool{}
	for i, u := range uses {
		if len(u) != 1 {
			t.Errorf("token %d registered %d runners %q; want one", i+1, len(u), u)
		}
		for _, r := range u {
			if !strings.HasPrefix(r, pool+"-") || seen[r] {
				t.Errorf("token %d registered %q: not one of %s's runners, or registered twice", i+1, r, pool)
			}
			seen[r] = true
		}
	}
}

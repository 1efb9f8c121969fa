package runnerpool_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

const (
	org      = "globex"
	orgRepo  = org + "/gadgets"
	orgGroup = "ci-runners"
)

var (
	orgOnce    sync.Once
	orgGroupID int64
	errOrg     error
)

// orgWithGroup makes the organization, a repository of it and a runner
// group besides Default on the suite's githubsim, once.
func orgWithGroup(t *testing.T) int64 {
	t.Helper()
	orgOnce.Do(func() {
		gh.AddOrganization(org)
		if errOrg = gh.AddRepository(orgRepo); errOrg == nil {
			orgGroupID, errOrg = gh.AddRunnerGroup(org, orgGroup)
		}
	})
	if errOrg != nil {
		t.Fatal(errOrg)
	}
	return orgGroupID
}

// An organization pool with a runner group, with either registration
// method: its runners register on the organization, through the
// organization's endpoints, and land in the pool's group (not Default);
// a job queued on one of the organization's repositories gets one.
func TestOrganizationPoolRunnersLandInTheirGroup(t *testing.T) {
	groupID := orgWithGroup(t)
	for _, method := range []hypervisorv1alpha1.RegistrationMethod{hypervisorv1alpha1.JITConfig, hypervisorv1alpha1.RegistrationToken} {
		t.Run(string(method), func(t *testing.T) {
			l := newLab(t)
			name := "org" + strings.ToLower(string(method)[:3])
			before := gh.Stats()
			pool := l.pool(name, func(p *hypervisorv1alpha1.RunnerPool) {
				p.Spec.GitHub.Owner, p.Spec.GitHub.Repository, p.Spec.GitHub.Organization = "", "", org
				p.Spec.RunnerGroup = orgGroup
				p.Spec.RegistrationMethod = method
			})
			id, err := gh.QueueJob(orgRepo, []string{"self-hosted", name})
			if err != nil {
				t.Fatal(err)
			}
			var runner githubsim.Runner
			eventually.That(t, time.Minute, func() (bool, string) {
				for _, r := range gh.Runners() {
					if strings.HasPrefix(r.Name, name+"-") {
						runner = r
					}
				}
				return runner.ID != 0, fmt.Sprintf("no runner of %s registered; %s", name, describe(l.get(name)))
			})
			if runner.Scope != org || runner.GroupID != groupID {
				t.Errorf("runner %s registered on %q in group %d; want organization %s, group %s (%d)",
					runner.Name, runner.Scope, runner.GroupID, org, orgGroup, groupID)
			}
			eventually.That(t, time.Minute, func() (bool, string) { return jobDone(id) })
			if j, _ := gh.Job(id); !strings.HasPrefix(j.RunnerName, name+"-") || j.Conclusion != "success" {
				t.Errorf("the organization's job ran on %q and ended %q", j.RunnerName, j.Conclusion)
			}
			// The pool used the organization's endpoints (only this test's
			// pools have any organization).
			want := []string{githubsim.EndpointOrgListRunners, githubsim.EndpointOrgGenerateJITConfig, githubsim.EndpointOrgListRunnerGroups}
			if method == hypervisorv1alpha1.RegistrationToken {
				want = []string{githubsim.EndpointOrgListRunners, githubsim.EndpointOrgRegistrationToken}
			}
			for _, e := range want {
				if gh.Calls(e) == before[e] {
					t.Errorf("no %s call", e)
				}
			}
			if err := l.c.Delete(rootCtx, pool); err != nil {
				t.Fatal(err)
			}
			eventually.That(t, time.Minute, func() (bool, string) {
				return len(l.claims()) == 0 && registered(name) == 0, fmt.Sprintf("%d claims, %d registered", len(l.claims()), registered(name))
			})
		})
	}
}

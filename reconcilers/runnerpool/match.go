package runnerpool

import (
	"sort"
	"strings"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// inScope reports whether a job's repository is one the pool's runners can
// serve: the pool's repository, or any repository of the pool's organization.
func inScope(pool *hypervisorv1alpha1.RunnerPool, job github.JobEvent) bool {
	g := pool.Spec.GitHub
	if github.APIHost(g.APIURL) != job.JobHost() {
		return false
	}
	if g.Repository != "" {
		return strings.EqualFold(g.Owner, job.Owner) && strings.EqualFold(g.Repository, job.Repository)
	}
	return g.Organization != "" && (strings.EqualFold(g.Organization, job.Organization) || strings.EqualFold(g.Organization, job.Owner))
}

// scopeKey names the GitHub scope a pool's spec asks for, as recorded in
// status.reachedScope: "owner/repository" for a repository pool, the
// organization otherwise; lower case, as GitHub compares logins and names.
// On an Enterprise Server the API host comes first ("ghe.example.com/acme"):
// reaching a repository on a server the tenant runs proves nothing about
// the repository of the same name on github.com.
func scopeKey(pool *hypervisorv1alpha1.RunnerPool) string {
	g := pool.Spec.GitHub
	key := strings.ToLower(g.Organization)
	if g.Repository != "" {
		key = strings.ToLower(g.Owner + "/" + g.Repository)
	}
	if host := github.APIHost(g.APIURL); host != github.PublicAPIHost {
		key = host + "/" + key
	}
	return key
}

// reachesScope reports whether the pool's own credentials were seen to
// reach the scope its spec names (status.reachedScope, written after a
// runner listing with them succeeded). Naming a repository proves nothing:
// any tenant may write any name, with credentials that do not work.
func reachesScope(pool *hypervisorv1alpha1.RunnerPool) bool {
	return pool.Status.ReachedScope != "" && pool.Status.ReachedScope == scopeKey(pool)
}

// MatchPool picks the pool for a job: in scope, its credentials seen to
// reach that scope, with runner labels covering all of the job's labels.
// Among several, the one with the fewest labels (the most specific fit
// wastes the least), then repository pools before organization ones, then
// by namespace/name. The choice is a function of the pools alone, so every
// replica and the poll pick the same pool for a job, and its one record
// (job-<id> in that pool's namespace) is the dedupe: splitting a scope's
// jobs between pools of two namespaces would need shared state, and two
// replicas choosing differently would make two runners for one job.
func MatchPool(pools []hypervisorv1alpha1.RunnerPool, job github.JobEvent) (*hypervisorv1alpha1.RunnerPool, bool) {
	var fits []*hypervisorv1alpha1.RunnerPool
	for i := range pools {
		p := &pools[i]
		// A scale-set pool takes the jobs GitHub assigns its scale set,
		// never a delivery's or the poll's.
		if p.DeletionTimestamp != nil || scaleSetMode(p) || !inScope(p, job) || !reachesScope(p) || !runnerstate.LabelsCover(runnerstate.RunnerLabels(p), job.Labels) {
			continue
		}
		fits = append(fits, p)
	}
	if len(fits) == 0 {
		return nil, false
	}
	sort.Slice(fits, func(i, j int) bool {
		a, b := fits[i], fits[j]
		if la, lb := len(runnerstate.RunnerLabels(a)), len(runnerstate.RunnerLabels(b)); la != lb {
			return la < lb
		}
		if ra, rb := a.Spec.GitHub.Repository != "", b.Spec.GitHub.Repository != ""; ra != rb {
			return ra
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	return fits[0], true
}

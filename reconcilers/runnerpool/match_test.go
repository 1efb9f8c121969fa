package runnerpool

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// testPool is a pool whose credentials were seen to reach its scope.
func testPool(ns, name, owner, repo, org string, labels ...string) hypervisorv1alpha1.RunnerPool {
	p := hypervisorv1alpha1.RunnerPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: hypervisorv1alpha1.RunnerPoolSpec{Labels: labels,
			GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: owner, Repository: repo, Organization: org}},
	}
	p.Status.ReachedScope = scopeKey(&p)
	return p
}

// A pool takes a scope's jobs only once its own credentials were seen to
// reach that scope: naming a repository, even with labels that fit better
// and a namespace that sorts first, takes nothing; having reached another
// scope (the spec's scope is immutable, but a stale status may say so)
// neither.
func TestMatchPoolOnlyPoolsThatReachedTheScope(t *testing.T) {
	good := testPool("team-b", "widgets", "acme", "widgets", "", "extra")
	unproven := testPool("team-a", "widgets", "acme", "widgets", "")
	unproven.Status.ReachedScope = ""
	elsewhere := testPool("team-a", "other", "acme", "widgets", "")
	elsewhere.Status.ReachedScope = "acme/gadgets"
	orgUnproven := testPool("team-a", "org", "", "", "acme")
	orgUnproven.Status.ReachedScope = ""
	job := github.JobEvent{ID: 1, Owner: "acme", Organization: "acme", Repository: "widgets", Labels: []string{"self-hosted"}}
	p, ok := MatchPool([]hypervisorv1alpha1.RunnerPool{unproven, elsewhere, orgUnproven, good}, job)
	if !ok || p.Namespace != "team-b" {
		t.Fatalf("MatchPool = %v, %v; want team-b/widgets, the only pool seen to reach acme/widgets", p, ok)
	}
	if p, ok := MatchPool([]hypervisorv1alpha1.RunnerPool{unproven, elsewhere, orgUnproven}, job); ok {
		t.Fatalf("the job went to %s/%s, whose credentials were never seen to reach acme/widgets", p.Namespace, p.Name)
	}
}

// A repository reached on an Enterprise Server (which a tenant may run
// itself) is another scope than the repository of the same name on
// github.com: the job says which GitHub it is on, from its signed payload
// or the API that listed it, and only a pool on that GitHub takes it.
func TestMatchPoolKeepsGitHubsApart(t *testing.T) {
	public := testPool("team-b", "widgets", "acme", "widgets", "")
	ghes := hypervisorv1alpha1.RunnerPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "widgets"},
		Spec: hypervisorv1alpha1.RunnerPoolSpec{GitHub: hypervisorv1alpha1.GitHubRunnerScope{
			Owner: "acme", Repository: "widgets", APIURL: "https://GHE.tenant.example/api/v3/"}},
	}
	ghes.Status.ReachedScope = scopeKey(&ghes)
	if ghes.Status.ReachedScope != "ghe.tenant.example/acme/widgets" {
		t.Fatalf("scope key %q, want the API host before the repository", ghes.Status.ReachedScope)
	}
	// A status written before the host was part of the key proves nothing
	// about the Enterprise Server's repository.
	stale := *ghes.DeepCopy()
	stale.Namespace, stale.Status.ReachedScope = "team-0", "acme/widgets"
	pools := []hypervisorv1alpha1.RunnerPool{stale, ghes, public}
	for host, want := range map[string]string{"": "team-b", github.PublicAPIHost: "team-b", "ghe.tenant.example": "team-a", "other.example": ""} {
		job := github.JobEvent{ID: 1, Owner: "acme", Repository: "widgets", Labels: []string{"self-hosted"}, Host: host}
		p, ok := MatchPool(pools, job)
		got := ""
		if ok {
			got = p.Namespace
		}
		if got != want {
			t.Errorf("a job on %q went to %q, want %q", host, got, want)
		}
	}
}

func TestMatchPool(t *testing.T) {
	pools := []hypervisorv1alpha1.RunnerPool{
		testPool("ci", "org-general", "", "", "acme"),
		testPool("ci", "org-gpu", "", "", "acme", "gpu"),
		testPool("ci", "widgets", "acme", "widgets", ""),
		testPool("ci", "widgets-gpu", "acme", "widgets", "", "gpu", "cuda-12"),
	}
	job := func(repo string, labels ...string) github.JobEvent {
		return github.JobEvent{ID: 1, Owner: "acme", Organization: "acme", Repository: repo, Labels: labels}
	}
	cases := []struct {
		name string
		job  github.JobEvent
		want string
	}{
		{"plain job on the repository pool", job("widgets", "self-hosted"), "widgets"},
		{"labels are case-insensitive", job("widgets", "Self-Hosted", "Linux", "X64"), "widgets"},
		{"gpu job: the smallest pool that covers it", job("widgets", "self-hosted", "gpu"), "org-gpu"},
		{"cuda needs the repository gpu pool", job("widgets", "self-hosted", "gpu", "cuda-12"), "widgets-gpu"},
		{"another repository: the organization pool", job("gadgets", "self-hosted"), "org-general"},
		{"nothing has arm64", job("widgets", "self-hosted", "arm64"), ""},
		{"GitHub-hosted label", job("widgets", "ubuntu-latest"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := MatchPool(pools, tc.job)
			got := ""
			if ok {
				got = p.Name
			}
			if got != tc.want {
				t.Errorf("MatchPool = %q, want %q", got, tc.want)
			}
		})
	}
	other := github.JobEvent{ID: 2, Owner: "evil", Organization: "evil", Repository: "widgets", Labels: []string{"self-hosted"}}
	if p, ok := MatchPool(pools, other); ok {
		t.Errorf("a job of another owner went to %s", p.Name)
	}
}

// FuzzMatchPool: whatever a job says, a match covers all its labels and is
// in scope, and the choice does not depend on the pools' order.
func FuzzMatchPool(f *testing.F) {
	f.Add("acme", "widgets", "self-hosted,gpu", "gpu", "Self-Hosted")
	f.Add("ACME", "Widgets", "", "", "")
	f.Add("acme", "x", "self-hosted,linux,x64,a,b", "a,b", "a")
	f.Fuzz(func(t *testing.T, owner, repo, jobLabels, poolLabelsA, poolLabelsB string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		pools := []hypervisorv1alpha1.RunnerPool{
			testPool("ns", "a", "acme", "widgets", "", split(poolLabelsA)...),
			testPool("ns", "b", "", "", "acme", split(poolLabelsB)...),
		}
		job := github.JobEvent{ID: 1, Owner: owner, Organization: owner, Repository: repo, Labels: split(jobLabels)}
		p, ok := MatchPool(pools, job)
		reversed := []hypervisorv1alpha1.RunnerPool{pools[1], pools[0]}
		q, ok2 := MatchPool(reversed, job)
		if ok != ok2 || (ok && p.Name != q.Name) {
			t.Fatalf("the choice depends on order: %v %v", p, q)
		}
		if !ok {
			return
		}
		if !runnerstate.LabelsCover(runnerstate.RunnerLabels(p), job.Labels) || !inScope(p, job) {
			t.Fatalf("pool %s does not cover job %+v", p.Name, job)
		}
	})
}

package github_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	gogithub "github.com/google/go-github/v60/github"

	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// A 150-job matrix two runners have started is an in_progress run with 148
// queued jobs: the listing of "queued" runs does not show it at all, and
// ActiveJobs shows every job, across pages, with the runner of each started
// one. A job waiting for an environment is listed as waiting until it is
// approved. An organization scope walks its repositories.
func TestActiveJobsSeesEveryJobOfUnfinishedRuns(t *testing.T) {
	sim := startSim(t, githubsim.Options{Organizations: []string{"acme"}, Repositories: []string{"acme/widgets", "acme/gadgets"},
		JobDuration: time.Hour})
	c := newClient(t, patConfig(sim))
	ctx := ctxT(t)

	ids, err := sim.QueueRun(githubsim.JobSpec{Repo: "acme/widgets", Labels: []string{"self-hosted", "matrix"}, Matrix: 150})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := sim.QueueJobSpec(githubsim.JobSpec{Repo: "acme/gadgets", Labels: []string{"self-hosted"}, Waiting: true})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.RegistrationToken(ctx, repoScope)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"r-1", "r-2"} {
		r := register(t, sim, repoScope, tok, name, true, "matrix")
		if _, err := sim.RunRunner(ctx, githubsim.RunRequest{ID: r.ID}); err != nil {
			t.Fatal(err)
		}
	}

	// What the old poll asked: no run is "queued" any more.
	gh := gogithub.NewClient(nil).WithAuthToken(sim.PAT())
	gh.BaseURL = mustURL(t, sim.URL())
	runs, _, err := gh.Actions.ListRepositoryWorkflowRuns(ctx, "acme", "widgets", &gogithub.ListWorkflowRunsOptions{Status: "queued"})
	if err != nil {
		t.Fatal(err)
	}
	if runs.GetTotalCount() != 0 {
		t.Fatalf("%d queued runs; a run with started jobs is in_progress on GitHub", runs.GetTotalCount())
	}

	jobs, err := c.ActiveJobs(ctx, repoScope)
	if err != nil {
		t.Fatal(err)
	}
	count := map[github.JobAction]int{}
	runners := map[string]bool{}
	for _, j := range jobs {
		count[j.Action()]++
		if j.RunnerName != "" {
			runners[j.RunnerName] = true
		}
		if j.Owner != "acme" || j.Repository != "widgets" || j.RunID == 0 {
			t.Fatalf("listed job %+v", j)
		}
	}
	if len(jobs) != 150 || count[github.JobQueued] != 148 || count[github.JobInProgress] != 2 || !runners["r-1"] || !runners["r-2"] {
		t.Fatalf("listed %d jobs: %v, runners %v; want 148 queued, 2 in progress on r-1 and r-2", len(jobs), count, runners)
	}

	org, err := c.ActiveJobs(ctx, orgScope)
	if err != nil {
		t.Fatal(err)
	}
	var w *github.ListedJob
	for i := range org {
		if org[i].ID == waiting {
			w = &org[i]
		}
	}
	if len(org) != 151 || w == nil || w.Action() != github.JobWaiting || w.Repository != "gadgets" {
		t.Fatalf("organization listing: %d jobs, the waiting one %+v", len(org), w)
	}

	got, err := c.GetJob(ctx, repoScope, "acme", "widgets", ids[149])
	if err != nil || got.Action() != github.JobQueued || got.ID != ids[149] {
		t.Fatalf("GetJob = %+v, %v", got, err)
	}
	if _, err := c.GetJob(ctx, repoScope, "acme", "widgets", waiting); !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("GetJob of another repository's job = %v, want ErrNotFound", err)
	}
	if err := sim.ApproveJob(waiting); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetJob(ctx, orgScope, "acme", "gadgets", waiting); err != nil || got.Action() != github.JobQueued {
		t.Fatalf("an approved job = %+v, %v; want queued", got, err)
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	if !strings.HasSuffix(raw, "/") {
		raw += "/"
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

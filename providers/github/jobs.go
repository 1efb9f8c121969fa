package github

import (
	"context"
	"errors"
	"net/http"
	"strings"

	gogithub "github.com/google/go-github/v60/github"

	"github.com/hyperfleet/hyperfleet/providers"
)

// ListedJob is a workflow job as GitHub's REST API lists it.
type ListedJob struct {
	ID, RunID int64
	// Status is GitHub's: queued, in_progress, completed, waiting,
	// requested or pending.
	Status string
	Labels []string
	// RunnerName is the runner that took the job, once one did.
	RunnerName string
	// Owner and Repository name the job's repository.
	Owner, Repository string
}

// activeRunStatuses are the workflow run statuses that may still hold a job
// needing a runner. A run is in_progress as soon as any of its jobs
// started, while others may still be queued, so listing only "queued" runs
// misses most of a matrix. The status filter takes one value per request.
var activeRunStatuses = []string{"queued", "in_progress", "waiting", "requested", "pending"}

// perPage is the largest page GitHub serves; every page is read.
const perPage = 100

// ActiveJobs lists every job of the scope's workflow runs that are not
// finished: for each active run status, every page of runs, and for each
// run every page of its latest attempt's jobs. An organization scope walks
// the organization's repositories (GET /orgs/{org}/repos, every page):
// GitHub has no organization-wide job listing. It is the fallback for
// deliveries GitHub never made, and the truth the recorded demand is
// reconciled with; each call spends from the shared rate budget, about
// 5 + runs requests per repository.
func (c *Client) ActiveJobs(ctx context.Context, scope Scope) ([]ListedJob, error) {
	if err := scope.validate(); err != nil {
		return nil, err
	}
	if scope.IsRepository() {
		return c.repoActiveJobs(ctx, scope, scope.Owner, scope.Repository)
	}
	repos, err := c.orgRepositories(ctx, scope)
	if err != nil {
		return nil, err
	}
	var out []ListedJob
	for _, name := range repos {
		jobs, err := c.repoActiveJobs(ctx, scope, scope.Organization, name)
		if err != nil {
			return nil, err
		}
		out = append(out, jobs...)
	}
	return out, nil
}

// orgRepositories lists the names of an organization's repositories, every page.
func (c *Client) orgRepositories(ctx context.Context, scope Scope) ([]string, error) {
	var names []string
	opts := &gogithub.RepositoryListByOrgOptions{Type: "all", ListOptions: gogithub.ListOptions{PerPage: perPage}}
	for {
		repos, res, err := c.gh.Repositories.ListByOrg(ctx, scope.Organization, opts)
		if err != nil {
			return nil, c.classify(opListOrgRepos, scope, err)
		}
		for _, r := range repos {
			if !r.GetArchived() && !r.GetDisabled() {
				names = append(names, r.GetName())
			}
		}
		if res.NextPage == 0 {
			return names, nil
		}
		opts.Page = res.NextPage
	}
}

// repoActiveJobs lists the jobs of one repository's unfinished runs. A run
// seen under two statuses (it moved between two listings) is read once.
func (c *Client) repoActiveJobs(ctx context.Context, scope Scope, owner, repo string) ([]ListedJob, error) {
	seen := map[int64]bool{}
	var out []ListedJob
	for _, status := range activeRunStatuses {
		opts := &gogithub.ListWorkflowRunsOptions{Status: status, ListOptions: gogithub.ListOptions{PerPage: perPage}}
		for {
			runs, res, err := c.gh.Actions.ListRepositoryWorkflowRuns(ctx, owner, repo, opts)
			if err != nil {
				return nil, c.classify(opListQueuedRuns, scope, err)
			}
			for _, run := range runs.WorkflowRuns {
				if seen[run.GetID()] {
					continue
				}
				seen[run.GetID()] = true
				jobs, err := c.runJobs(ctx, scope, owner, repo, run.GetID())
				if err != nil {
					return nil, err
				}
				out = append(out, jobs...)
			}
			if res.NextPage == 0 {
				break
			}
			opts.Page = res.NextPage
		}
	}
	return out, nil
}

// runJobs lists the jobs of a run's latest attempt, every page. A run that
// vanished between the two listings (deleted) has no jobs.
func (c *Client) runJobs(ctx context.Context, scope Scope, owner, repo string, runID int64) ([]ListedJob, error) {
	var out []ListedJob
	opts := &gogithub.ListWorkflowJobsOptions{Filter: "latest", ListOptions: gogithub.ListOptions{PerPage: perPage}}
	for {
		jobs, res, err := c.gh.Actions.ListWorkflowJobs(ctx, owner, repo, runID, opts)
		if err != nil {
			if notFound(err) {
				return out, nil
			}
			return nil, c.classify(opListRunJobs, scope, err)
		}
		for _, j := range jobs.Jobs {
			out = append(out, listed(owner, repo, j))
		}
		if res.NextPage == 0 {
			return out, nil
		}
		opts.Page = res.NextPage
	}
}

// GetJob reads one job of repository owner/repo: how a job GitHub no longer
// lists as queued is confirmed before its demand is closed. A job that does
// not exist (its run deleted) answers providers.ErrNotFound.
func (c *Client) GetJob(ctx context.Context, scope Scope, owner, repo string, id int64) (ListedJob, error) {
	j, _, err := c.gh.Actions.GetWorkflowJobByID(ctx, owner, repo, id)
	if err != nil {
		if notFound(err) {
			return ListedJob{}, providers.ErrNotFound
		}
		return ListedJob{}, c.classify(opGetJob, scope, err)
	}
	return listed(owner, repo, j), nil
}

func listed(owner, repo string, j *gogithub.WorkflowJob) ListedJob {
	return ListedJob{ID: j.GetID(), RunID: j.GetRunID(), Status: j.GetStatus(), Labels: j.Labels,
		RunnerName: j.GetRunnerName(), Owner: owner, Repository: repo}
}

func notFound(err error) bool {
	var er *gogithub.ErrorResponse
	return errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusNotFound
}

// Action is the job's status as the workflow_job action a delivery would
// carry; requested and pending jobs, not yet runnable, count as waiting.
func (j ListedJob) Action() JobAction {
	switch strings.ToLower(j.Status) {
	case "queued":
		return JobQueued
	case "in_progress":
		return JobInProgress
	case "completed":
		return JobCompleted
	}
	return JobWaiting
}

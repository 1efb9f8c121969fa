package github

import (
	"context"

	gogithub "github.com/google/go-github/v60/github"

	"github.com/hyperfleet/hyperfleet/providers"
)

// QueuedJob is a workflow job waiting for a runner.
type QueuedJob struct {
	ID, RunID int64
	Labels    []string
}

// maxQueuedRuns bounds one poll: enough for any pool's maxReplicas, small
// enough that a poll costs a few requests, not hundreds.
const maxQueuedRuns = 100

// QueuedJobs lists a repository's queued jobs: its queued workflow runs and,
// for each, the jobs still queued. It is the fallback for webhook deliveries
// GitHub never made. Organizations have no such listing short of walking
// every repository, so an organization scope answers ErrNotFound and its
// pools rely on webhooks.
func (c *Client) QueuedJobs(ctx context.Context, scope Scope) ([]QueuedJob, error) {
	if err := scope.validate(); err != nil {
		return nil, err
	}
	if !scope.IsRepository() {
		return nil, providers.ErrNotFound
	}
	runs, _, err := c.gh.Actions.ListRepositoryWorkflowRuns(ctx, scope.Owner, scope.Repository,
		&gogithub.ListWorkflowRunsOptions{Status: "queued", ListOptions: gogithub.ListOptions{PerPage: maxQueuedRuns}})
	if err != nil {
		return nil, c.classify(opListQueuedRuns, scope, err)
	}
	var out []QueuedJob
	for _, run := range runs.WorkflowRuns {
		jobs, _, err := c.gh.Actions.ListWorkflowJobs(ctx, scope.Owner, scope.Repository, run.GetID(),
			&gogithub.ListWorkflowJobsOptions{Filter: "latest", ListOptions: gogithub.ListOptions{PerPage: 100}})
		if err != nil {
			return nil, c.classify(opListRunJobs, scope, err)
		}
		for _, j := range jobs.Jobs {
			if j.GetStatus() == "queued" {
				out = append(out, QueuedJob{ID: j.GetID(), RunID: run.GetID(), Labels: j.Labels})
			}
		}
	}
	return out, nil
}

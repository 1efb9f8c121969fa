package webhook

import (
	"encoding/json"
	"fmt"
	"strings"
)

// JobAction is a workflow_job delivery's action.
type JobAction string

// The workflow_job actions HyperFleet acts on.
const (
	JobQueued     JobAction = "queued"
	JobInProgress JobAction = "in_progress"
	JobCompleted  JobAction = "completed"
	JobWaiting    JobAction = "waiting"
)

// Job is what a workflow_job delivery says about one job.
type Job struct {
	// Delivery is X-GitHub-Delivery.
	Delivery string
	Action   JobAction
	// ID of the job, unique across GitHub; RunID its workflow run.
	ID, RunID int64
	Labels    []string
	// RunnerName is the runner that took the job (in_progress, completed).
	RunnerName string
	// Owner and Repository name the repository; Organization is set when the
	// repository belongs to an organization.
	Owner, Repository, Organization string
}

// workflowJobEvent is the part of GitHub's workflow_job payload we read.
type workflowJobEvent struct {
	Action      string `json:"action"`
	WorkflowJob *struct {
		ID         int64    `json:"id"`
		RunID      int64    `json:"run_id"`
		Labels     []string `json:"labels"`
		RunnerName *string  `json:"runner_name"`
	} `json:"workflow_job"`
	Repository *struct {
		Name     string `json:"name"`
		FullName string `json:"full_name"`
		Owner    *struct {
			Login string `json:"login"`
		} `json:"owner"`
	} `json:"repository"`
	Organization *struct {
		Login string `json:"login"`
	} `json:"organization"`
}

// maxLabels bounds what one job may carry; GitHub allows far fewer.
const maxLabels = 64

// ParseWorkflowJob decodes a workflow_job payload. It refuses payloads
// without the fields routing needs, so a malformed delivery is answered 400
// instead of being half-processed.
func ParseWorkflowJob(body []byte) (Job, error) {
	var ev workflowJobEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return Job{}, fmt.Errorf("workflow_job payload is not JSON: %w", err)
	}
	if ev.WorkflowJob == nil || ev.WorkflowJob.ID <= 0 {
		return Job{}, fmt.Errorf("workflow_job payload has no workflow_job.id")
	}
	if ev.Repository == nil || ev.Repository.Name == "" {
		return Job{}, fmt.Errorf("workflow_job payload has no repository")
	}
	if len(ev.WorkflowJob.Labels) > maxLabels {
		return Job{}, fmt.Errorf("workflow_job has %d labels, more than %d", len(ev.WorkflowJob.Labels), maxLabels)
	}
	j := Job{
		Action: JobAction(ev.Action), ID: ev.WorkflowJob.ID, RunID: ev.WorkflowJob.RunID,
		Labels: ev.WorkflowJob.Labels, Repository: ev.Repository.Name,
	}
	if ev.Repository.Owner != nil {
		j.Owner = ev.Repository.Owner.Login
	}
	if j.Owner == "" {
		if owner, _, ok := strings.Cut(ev.Repository.FullName, "/"); ok {
			j.Owner = owner
		}
	}
	if ev.Organization != nil {
		j.Organization = ev.Organization.Login
	}
	if ev.WorkflowJob.RunnerName != nil {
		j.RunnerName = *ev.WorkflowJob.RunnerName
	}
	return j, nil
}

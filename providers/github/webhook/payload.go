package webhook

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

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
func ParseWorkflowJob(body []byte) (github.JobEvent, error) {
	var ev workflowJobEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return github.JobEvent{}, fmt.Errorf("workflow_job payload is not JSON: %w", err)
	}
	if ev.WorkflowJob == nil || ev.WorkflowJob.ID <= 0 {
		return github.JobEvent{}, fmt.Errorf("workflow_job payload has no workflow_job.id")
	}
	if ev.Repository == nil || ev.Repository.Name == "" {
		return github.JobEvent{}, fmt.Errorf("workflow_job payload has no repository")
	}
	if len(ev.WorkflowJob.Labels) > maxLabels {
		return github.JobEvent{}, fmt.Errorf("workflow_job has %d labels, more than %d", len(ev.WorkflowJob.Labels), maxLabels)
	}
	j := github.JobEvent{
		Action: github.JobAction(ev.Action), ID: ev.WorkflowJob.ID, RunID: ev.WorkflowJob.RunID,
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

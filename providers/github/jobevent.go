package github

import (
	"net/url"
	"strings"
)

// JobAction is how far a workflow job has come, as a workflow_job webhook
// delivery's action says it.
type JobAction string

// The workflow_job actions a runner autoscaler acts on.
const (
	JobQueued     JobAction = "queued"
	JobInProgress JobAction = "in_progress"
	JobCompleted  JobAction = "completed"
	JobWaiting    JobAction = "waiting"
)

// JobEvent is the demand GitHub reports for one workflow job: what a
// workflow_job webhook delivery says (providers/github/webhook parses one),
// or what a poll of the active jobs found (ListedJob.Event). Both sources
// produce this one type, so whoever scales on demand reads one shape and
// imports nothing of the receiver.
type JobEvent struct {
	// Delivery is X-GitHub-Delivery; empty for a polled job.
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
	// Host is the API host of the GitHub the job is on (APIHost): read from
	// the signed payload's repository URL for a delivery, the polled API's
	// for a listed job. Empty means github.com.
	Host string
}

// PublicAPIHost is github.com's API host.
const PublicAPIHost = "api.github.com"

// APIHost is the host (and port) of an API root URL, lower case:
// api.github.com for an empty one. Two pools with the same owner and
// repository on two GitHubs are two scopes.
func APIHost(apiURL string) string {
	u, err := url.Parse(normalizeBaseURL(apiURL))
	if err != nil || u.Host == "" {
		return strings.ToLower(strings.TrimSpace(apiURL))
	}
	return strings.ToLower(u.Host)
}

// JobHost is the job's API host, api.github.com when it has none.
func (j JobEvent) JobHost() string {
	if j.Host == "" {
		return PublicAPIHost
	}
	return strings.ToLower(j.Host)
}

// Event is a listed job as the demand it stands for: the workflow_job
// delivery its status would have produced.
func (j ListedJob) Event() JobEvent {
	return JobEvent{Action: j.Action(), ID: j.ID, RunID: j.RunID, Labels: j.Labels, RunnerName: j.RunnerName,
		Owner: j.Owner, Repository: j.Repository}
}

package githubsim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Job statuses and conclusions as GitHub reports them.
const (
	JobQueued     = "queued"
	JobInProgress = "in_progress"
	JobCompleted  = "completed"
	// JobWaiting: the job waits for an environment's approval
	// (ApproveJob); no runner takes it until then.
	JobWaiting = "waiting"
)

// JobSpec describes a job to queue.
type JobSpec struct {
	// Repo is "owner/name"; it must exist.
	Repo string `json:"repo"`
	// Labels of the job's runs-on; a runner must have every one.
	Labels []string `json:"labels"`
	// Duration once a runner takes it; 0 means Options.JobDuration.
	Duration time.Duration `json:"duration,omitempty"`
	// Conclusion when it completes; default "success".
	Conclusion string `json:"conclusion,omitempty"`
	// Workflow and Name, for the payloads; defaults "CI" and "build".
	Workflow string `json:"workflow,omitempty"`
	Name     string `json:"name,omitempty"`
	// Matrix is how many jobs the run has (a matrix); default 1. They share
	// the run, labels and duration; their names get " (i)".
	Matrix int `json:"matrix,omitempty"`
	// Waiting: the jobs wait for an environment's approval (ApproveJob)
	// before they are queued, as with a protected environment.
	Waiting bool `json:"waiting,omitempty"`
	// LoseDeliveries are the actions ("queued", "in_progress",
	// "completed") whose deliveries of these jobs are lost: attempted and
	// never received, as when GitHub cannot connect. They can be
	// redelivered. Unlike DropNextDeliveries, no other job's delivery is
	// lost instead when deliveries race.
	LoseDeliveries []string `json:"loseDeliveries,omitempty"`
}

// Job is a workflow job as the simulator holds it.
type Job struct {
	ID         int64         `json:"id"`
	RunID      int64         `json:"run_id"`
	Repo       string        `json:"repo"`
	Labels     []string      `json:"labels"`
	Status     string        `json:"status"`
	Conclusion string        `json:"conclusion,omitempty"`
	RunnerID   int64         `json:"runner_id,omitempty"`
	RunnerName string        `json:"runner_name,omitempty"`
	Duration   time.Duration `json:"duration"`
	Workflow   string        `json:"workflow"`
	Name       string        `json:"name"`
	CreatedAt  time.Time     `json:"created_at"`
	StartedAt  time.Time     `json:"started_at,omitzero"`
	// CompletedAt is zero until the job completes.
	CompletedAt time.Time `json:"completed_at,omitzero"`
}

type jobState struct {
	Job
	repo       *repoState
	conclusion string // the one it will end with
	groupID    int64
	groupName  string
	headSHA    string
	lose       []string // actions whose deliveries are lost (JobSpec.LoseDeliveries)
	scaleSetID int      // the scale set it was offered to; 0 for none
	acquired   bool     // its scale set acquired it: assigned to the scale set
}

// QueueJob queues a job on repo ("owner/name") needing labels and returns
// its ID. A queued webhook is sent; an idle online runner whose labels cover
// the job's takes it at once.
func (s *Server) QueueJob(repo string, labels []string) (int64, error) {
	return s.QueueJobSpec(JobSpec{Repo: repo, Labels: labels})
}

// QueueJobSpec queues a job described by spec and returns its ID (the
// first one's, for a matrix).
func (s *Server) QueueJobSpec(spec JobSpec) (int64, error) {
	ids, err := s.QueueRun(spec)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// QueueRun starts a workflow run of spec.Matrix jobs (at least one) and
// returns their IDs. Each is announced by a "queued" delivery, or "waiting"
// when spec.Waiting; idle online runners whose labels cover a queued job
// take it at once.
func (s *Server) QueueRun(spec JobSpec) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	jobs, err := s.queueRunLocked(spec)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	s.dispatchLocked()
	return ids, nil
}

// queueRunLocked makes the run's jobs and announces them, leaving them to
// the caller to dispatch. The caller holds s.mu.
func (s *Server) queueRunLocked(spec JobSpec) ([]*jobState, error) {
	if s.kit.Closed() {
		return nil, fmt.Errorf("githubsim: closed")
	}
	repo := s.repos[strings.ToLower(spec.Repo)]
	if repo == nil {
		return nil, fmt.Errorf("githubsim: no repository %q", spec.Repo)
	}
	if spec.Duration <= 0 {
		spec.Duration = s.jobDuration
	}
	if spec.Conclusion == "" {
		spec.Conclusion = "success"
	}
	if spec.Workflow == "" {
		spec.Workflow = "CI"
	}
	if spec.Name == "" {
		spec.Name = "build"
	}
	n := max(spec.Matrix, 1)
	status := JobQueued
	if spec.Waiting {
		status = JobWaiting
	}
	runID := s.nextRunID
	s.nextRunID++
	headSHA := randomAlnum(40, "0123456789abcdef")
	jobs := make([]*jobState, 0, n)
	for i := range n {
		name := spec.Name
		if n > 1 {
			name = fmt.Sprintf("%s (%d)", spec.Name, i+1)
		}
		j := &jobState{
			Job: Job{
				ID: s.nextJobID, RunID: runID, Repo: repo.fullName(), Labels: append([]string(nil), spec.Labels...),
				Status: status, Duration: spec.Duration, Workflow: spec.Workflow, Name: name, CreatedAt: s.clock.Now().UTC(),
			},
			repo:       repo,
			conclusion: spec.Conclusion,
			headSHA:    headSHA,
			lose:       slices.Clone(spec.LoseDeliveries),
		}
		s.nextJobID++
		s.jobs[j.ID] = j
		s.jobOrder = append(s.jobOrder, j.ID)
		s.enqueueJobEvent(j, status)
		s.offerToScaleSetLocked(j)
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// ApproveJob approves a waiting job's environment: it turns queued (a
// "queued" delivery) and may be taken by a runner.
func (s *Server) ApproveJob(id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil || j.Status != JobWaiting {
		return fmt.Errorf("githubsim: no waiting job %d", id)
	}
	j.Status = JobQueued
	s.enqueueJobEvent(j, JobQueued)
	s.offerToScaleSetLocked(j)
	s.dispatchLocked()
	return nil
}

// CompleteJob ends a job a runner is running, now, with conclusion
// (default "success"), as if its steps had finished: a "completed"
// delivery, and its runner, if ephemeral, deregisters and exits.
func (s *Server) CompleteJob(id int64, conclusion string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil || j.Status != JobInProgress {
		return fmt.Errorf("githubsim: no job %d in progress", id)
	}
	if conclusion == "" {
		conclusion = "success"
	}
	s.completeJobLocked(j, conclusion)
	return nil
}

// CancelJob cancels a job that has not completed, as cancelling its
// workflow run does: a waiting or queued job completes "cancelled" without
// a runner; a running one is cancelled on its runner, which finishes it
// (and, if ephemeral, deregisters and exits). Either way a "completed"
// delivery with conclusion "cancelled" is sent.
func (s *Server) CancelJob(id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[id]
	if j == nil || j.Status == JobCompleted {
		return fmt.Errorf("githubsim: no unfinished job %d", id)
	}
	s.completeJobLocked(j, "cancelled")
	return nil
}

// SetJobDuration changes the default duration of jobs queued from now on.
func (s *Server) SetJobDuration(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d > 0 {
		s.jobDuration = d
	}
}

// Jobs returns every job, oldest first.
func (s *Server) Jobs() []Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Job, 0, len(s.jobOrder))
	for _, id := range s.jobOrder {
		j := s.jobs[id].Job
		j.Labels = slices.Clone(j.Labels)
		out = append(out, j)
	}
	return out
}

// Job returns one job.
func (s *Server) Job(id int64) (Job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.jobs[id]; j != nil {
		out := j.Job
		out.Labels = slices.Clone(out.Labels)
		return out, true
	}
	return Job{}, false
}

// covers reports whether runner r may take job j: it is registered on the
// job's repository or on the organization owning it (every group here is
// visible to all repositories), and has every label the job asks for.
func covers(r *runnerState, j *jobState) bool {
	// A scale set's job goes to its runners once acquired, and its runners
	// take no other job.
	if r.scaleSetID != j.scaleSetID || (j.scaleSetID != 0 && !j.acquired) {
		return false
	}
	scopeOK := r.scope == strings.ToLower(j.repo.fullName()) ||
		(j.repo.org != nil && r.scope == strings.ToLower(j.repo.org.login))
	if !scopeOK {
		return false
	}
	for _, want := range j.Labels {
		if !slices.ContainsFunc(r.labels, func(l labelState) bool { return strings.EqualFold(l.name, want) }) {
			return false
		}
	}
	return true
}

// dispatchLocked gives queued jobs, oldest first, to idle online runners,
// lowest ID first. The caller holds s.mu.
func (s *Server) dispatchLocked() {
	runners := s.sortedRunners("")
	for _, id := range s.jobOrder {
		j := s.jobs[id]
		if j.Status != JobQueued {
			continue
		}
		for _, r := range runners {
			if r.online && !r.busy && covers(r, j) {
				s.startJobLocked(j, r)
				break
			}
		}
	}
}

func (s *Server) startJobLocked(j *jobState, r *runnerState) {
	r.busy, r.jobID = true, j.ID
	j.Status = JobInProgress
	j.StartedAt = s.clock.Now().UTC()
	j.RunnerID, j.RunnerName = r.id, r.name
	j.groupID = r.groupID
	if g := s.group(r.scope, r.groupID); g != nil {
		j.groupName = g.name
	}
	s.enqueueJobEvent(j, "in_progress")
	s.scaleSetJobStartedLocked(j, r)
	jobID := j.ID
	s.kit.After(j.Duration, func() {
		if j := s.jobs[jobID]; j != nil && j.Status == JobInProgress {
			s.completeJobLocked(j, j.conclusion)
		}
	})
}

// completeJobLocked finishes a job; its runner becomes idle, or, if
// ephemeral, deregisters and exits. The caller holds s.mu.
func (s *Server) completeJobLocked(j *jobState, conclusion string) {
	j.Status = JobCompleted
	j.Conclusion = conclusion
	j.CompletedAt = s.clock.Now().UTC()
	s.enqueueJobEvent(j, "completed")
	s.scaleSetJobCompletedLocked(j)
	if r := s.runners[j.RunnerID]; r != nil && r.jobID == j.ID {
		r.busy, r.jobID = false, 0
		if r.ephemeral {
			s.removeRunnerLocked(r)
		}
	}
	s.dispatchLocked()
}

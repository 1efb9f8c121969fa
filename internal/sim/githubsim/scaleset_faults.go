package githubsim

import (
	"fmt"
	"strings"
)

// GitHub's known scale-set faults, for tests of an autoscaler that must
// survive them. Session faults need none of these: InjectFault on
// EndpointMessageGet gives 5xx, hung or slow polls, and
// ExpireSessionTokens the 401.

// CompleteEarly sends a JobCompleted message for a job a runner of a scale
// set is still running, as GitHub has been seen to: the job goes on, its
// runner stays busy, and the real end sends a second JobCompleted. An
// autoscaler that retires the runner on the first one kills a job.
func (s *Server) CompleteEarly(jobID int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil || j.Status != JobInProgress || j.scaleSetID == 0 {
		return fmt.Errorf("githubsim: job %d is not running on a scale set's runner", jobID)
	}
	ss := s.scaleSets[j.scaleSetID]
	if ss == nil {
		return fmt.Errorf("githubsim: job %d's scale set is gone", jobID)
	}
	msg := s.jobMessage(j, "JobCompleted")
	msg["result"] = "succeeded"
	msg["runnerId"], msg["runnerName"] = j.RunnerID, j.RunnerName
	s.postLocked(ss, msg)
	return nil
}

// CancelLeavingGhost cancels a running job as a user's cancel does, and
// its runner's process dies with it without deregistering: GitHub reports
// the job completed ("canceled") while the runner stays registered,
// offline, never to run again — a ghost the autoscaler must remove.
func (s *Server) CancelLeavingGhost(jobID int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil || j.Status != JobInProgress {
		return fmt.Errorf("githubsim: job %d is not running", jobID)
	}
	r := s.runners[j.RunnerID]
	if r == nil {
		return fmt.Errorf("githubsim: job %d's runner is gone", jobID)
	}
	s.killRunnerLocked(r, "cancelled")
	return nil
}

// DropScaleSetMessages loses the job messages of scale set name not yet
// sent (as a broker that drops them would): only the statistics still say
// what the scale set is asked for. It returns how many were dropped.
func (s *Server) DropScaleSetMessages(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ss := range s.scaleSets {
		if strings.EqualFold(ss.name, name) {
			n += len(ss.pending)
			ss.pending = nil
		}
	}
	return n
}

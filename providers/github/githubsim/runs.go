package githubsim

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Workflow runs, as far as a poll for queued jobs needs them: one run per
// RunID of the jobs, its status the least advanced of its jobs'.

func runStatus(jobs []*jobState) string {
	status := JobCompleted
	for _, j := range jobs {
		switch j.Status {
		case JobQueued:
			return JobQueued
		case JobInProgress:
			status = JobInProgress
		}
	}
	return status
}

// runsOf groups a repository's jobs by run; called with s.mu held.
func (s *Server) runsOf(repo string) map[int64][]*jobState {
	runs := map[int64][]*jobState{}
	for _, j := range s.jobs {
		if strings.EqualFold(j.Repo, repo) {
			runs[j.RunID] = append(runs[j.RunID], j)
		}
	}
	return runs
}

func (s *Server) handleListRuns(rc *reqCtx) (int, any, *apiError) {
	scope, aerr := s.scopeOf(rc.r)
	if aerr != nil {
		return 0, nil, aerr
	}
	want := rc.r.URL.Query().Get("status")
	runs := s.runsOf(scope)
	ids := make([]int64, 0, len(runs))
	for id, jobs := range runs {
		if want == "" || runStatus(jobs) == want {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] }) // newest first, as GitHub
	page := paginate(rc, ids)
	wire := make([]map[string]any, len(page))
	for i, id := range page {
		jobs := runs[id]
		wire[i] = map[string]any{"id": id, "status": runStatus(jobs), "name": jobs[0].Workflow, "run_attempt": 1,
			"created_at": jobs[0].CreatedAt.UTC().Format("2006-01-02T15:04:05Z")}
	}
	return http.StatusOK, map[string]any{"total_count": len(ids), "workflow_runs": wire}, nil
}

func (s *Server) handleListRunJobs(rc *reqCtx) (int, any, *apiError) {
	scope, aerr := s.scopeOf(rc.r)
	if aerr != nil {
		return 0, nil, aerr
	}
	runID, err := strconv.ParseInt(rc.r.PathValue("run_id"), 10, 64)
	if err != nil {
		return 0, nil, notFound()
	}
	jobs := s.runsOf(scope)[runID]
	if len(jobs) == 0 {
		return 0, nil, notFound()
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	page := paginate(rc, jobs)
	wire := make([]map[string]any, len(page))
	for i, j := range page {
		w := map[string]any{"id": j.ID, "run_id": j.RunID, "status": j.Status, "labels": j.Labels, "name": j.Name}
		if j.RunnerName != "" {
			w["runner_name"] = j.RunnerName
		}
		wire[i] = w
	}
	return http.StatusOK, map[string]any{"total_count": len(jobs), "jobs": wire}, nil
}

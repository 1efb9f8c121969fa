package githubsim

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Workflow runs as GitHub reports them: a run groups its jobs (one, or a
// matrix), and its status follows theirs.

// runStatus is a run's status from its jobs', as GitHub shows it: completed
// once every job completed; in_progress as soon as any job started (while
// others may still be queued: a matrix wider than its runners spends most
// of its life so); waiting while a job waits for an environment's approval
// and none started; queued otherwise.
func runStatus(jobs []*jobState) string {
	var queued, waiting, started, completed int
	for _, j := range jobs {
		switch j.Status {
		case JobQueued:
			queued++
		case JobWaiting:
			waiting++
		case JobInProgress:
			started++
		case JobCompleted:
			completed++
		}
	}
	switch {
	case completed == len(jobs):
		return JobCompleted
	case started > 0 || completed > 0:
		return JobInProgress
	case waiting > 0:
		return JobWaiting
	}
	return JobQueued
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

// handleListRuns is GET /repos/{owner}/{repo}/actions/runs, newest first,
// paginated (per_page, page, Link), filtered by ?status= as GitHub does.
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
	api, web := s.urls()
	wire := make([]map[string]any, len(page))
	for i, id := range page {
		jobs := runs[id]
		sort.Slice(jobs, func(a, b int) bool { return jobs[a].ID < jobs[b].ID })
		first := jobs[0]
		full := first.repo.fullName()
		status := runStatus(jobs)
		var conclusion any
		if status == JobCompleted {
			conclusion = "success"
			for _, j := range jobs {
				if j.Conclusion != "success" {
					conclusion = j.Conclusion
				}
			}
		}
		wire[i] = map[string]any{"id": id, "name": first.Workflow, "status": status, "conclusion": conclusion,
			"run_attempt": 1, "run_number": id % 100000, "event": "push", "head_branch": "main", "head_sha": first.headSHA,
			"created_at": first.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"),
			"updated_at": first.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"),
			"url":        api + "/repos/" + full + "/actions/runs/" + strconv.FormatInt(id, 10),
			"jobs_url":   api + "/repos/" + full + "/actions/runs/" + strconv.FormatInt(id, 10) + "/jobs",
			"html_url":   web + "/" + full + "/actions/runs/" + strconv.FormatInt(id, 10)}
	}
	return http.StatusOK, map[string]any{"total_count": len(ids), "workflow_runs": wire}, nil
}

// handleListRunJobs is GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs,
// paginated; the simulator has one attempt per run, so filter=latest and
// filter=all answer alike.
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
		wire[i] = s.jobWire(j)
	}
	return http.StatusOK, map[string]any{"total_count": len(jobs), "jobs": wire}, nil
}

// handleGetJob is GET /repos/{owner}/{repo}/actions/jobs/{job_id}.
func (s *Server) handleGetJob(rc *reqCtx) (int, any, *apiError) {
	scope, aerr := s.scopeOf(rc.r)
	if aerr != nil {
		return 0, nil, aerr
	}
	id, err := strconv.ParseInt(rc.r.PathValue("job_id"), 10, 64)
	if err != nil {
		return 0, nil, notFound()
	}
	j := s.jobs[id]
	if j == nil || !strings.EqualFold(j.Repo, scope) {
		return 0, nil, notFound()
	}
	return http.StatusOK, s.jobWire(j), nil
}

// handleListOrgRepos is GET /orgs/{org}/repos, by full name, paginated.
func (s *Server) handleListOrgRepos(rc *reqCtx) (int, any, *apiError) {
	scope, aerr := s.scopeOf(rc.r)
	if aerr != nil {
		return 0, nil, aerr
	}
	var repos []*repoState
	for _, r := range s.repos {
		if r.org != nil && strings.EqualFold(r.org.login, scope) {
			repos = append(repos, r)
		}
	}
	sort.Slice(repos, func(i, j int) bool { return repos[i].fullName() < repos[j].fullName() })
	api, web := s.urls()
	page := paginate(rc, repos)
	wire := make([]map[string]any, len(page))
	for i, r := range page {
		full := r.fullName()
		wire[i] = map[string]any{"id": r.id, "node_id": "R_kgDO" + strconv.FormatInt(r.id, 36), "name": r.name, "full_name": full,
			"private": false, "owner": map[string]any{"login": r.owner, "id": r.org.id, "type": "Organization"},
			"html_url": web + "/" + full, "url": api + "/repos/" + full, "archived": false, "disabled": false,
			"visibility": "public", "fork": false, "default_branch": "main"}
	}
	return http.StatusOK, wire, nil
}

package githubsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// Endpoints the simulator serves, named as GitHub's documentation names
// them; Stats counts calls by these names and a Fault may match one.
const (
	EndpointCreateInstallationToken = "POST /app/installations/{installation_id}/access_tokens"

	EndpointRepoRegistrationToken = "POST /repos/{owner}/{repo}/actions/runners/registration-token"
	EndpointRepoRemoveToken       = "POST /repos/{owner}/{repo}/actions/runners/remove-token"
	EndpointRepoGenerateJITConfig = "POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig"
	EndpointRepoListRunners       = "GET /repos/{owner}/{repo}/actions/runners"
	EndpointRepoGetRunner         = "GET /repos/{owner}/{repo}/actions/runners/{runner_id}"
	EndpointRepoDeleteRunner      = "DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}"

	EndpointOrgRegistrationToken = "POST /orgs/{org}/actions/runners/registration-token"
	EndpointOrgRemoveToken       = "POST /orgs/{org}/actions/runners/remove-token"
	EndpointOrgGenerateJITConfig = "POST /orgs/{org}/actions/runners/generate-jitconfig"
	EndpointOrgListRunners       = "GET /orgs/{org}/actions/runners"
	EndpointOrgGetRunner         = "GET /orgs/{org}/actions/runners/{runner_id}"
	EndpointOrgDeleteRunner      = "DELETE /orgs/{org}/actions/runners/{runner_id}"
	EndpointOrgListRunnerGroups  = "GET /orgs/{org}/actions/runner-groups"

	EndpointRepoListRuns    = "GET /repos/{owner}/{repo}/actions/runs"
	EndpointRepoListRunJobs = "GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs"
	EndpointRepoGetJob      = "GET /repos/{owner}/{repo}/actions/jobs/{job_id}"
	EndpointOrgListRepos    = "GET /orgs/{org}/repos"

	// EndpointUnknown counts requests for anything else (answered 404).
	EndpointUnknown = "unknown"
)

// maxBody bounds request bodies; GitHub's own requests here are tiny.
const maxBody = 1 << 20

// reqCtx carries one API request through its handler.
type reqCtx struct {
	r      *http.Request
	body   []byte
	id     identity
	header http.Header // added to the answer
}

// apiHandler answers a request with s.mu held: a status and a JSON body, or
// an error.
type apiHandler func(rc *reqCtx) (int, any, *apiError)

func (s *Server) apiRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	handle := func(pattern string, h apiHandler) { mux.Handle(pattern, s.endpoint(pattern, h)) }
	handle(EndpointCreateInstallationToken, s.handleAccessToken)
	for _, p := range []string{EndpointRepoRegistrationToken, EndpointOrgRegistrationToken} {
		handle(p, s.handleRegToken(false))
	}
	for _, p := range []string{EndpointRepoRemoveToken, EndpointOrgRemoveToken} {
		handle(p, s.handleRegToken(true))
	}
	handle(EndpointRepoGenerateJITConfig, s.handleJITConfig)
	handle(EndpointOrgGenerateJITConfig, s.handleJITConfig)
	handle(EndpointRepoListRunners, s.handleListRunners)
	handle(EndpointOrgListRunners, s.handleListRunners)
	handle(EndpointRepoGetRunner, s.handleGetRunner)
	handle(EndpointOrgGetRunner, s.handleGetRunner)
	handle(EndpointRepoDeleteRunner, s.handleDeleteRunner)
	handle(EndpointOrgDeleteRunner, s.handleDeleteRunner)
	handle(EndpointOrgListRunnerGroups, s.handleListGroups)
	handle(EndpointRepoListRuns, s.handleListRuns)
	handle(EndpointRepoListRunJobs, s.handleListRunJobs)
	handle(EndpointRepoGetJob, s.handleGetJob)
	handle(EndpointOrgListRepos, s.handleListOrgRepos)
	handle(EndpointRunnerRegistration, s.handleRunnerRegistration)
	mux.Handle("/", s.endpoint(EndpointUnknown, func(*reqCtx) (int, any, *apiError) { return 0, nil, notFound() }))
	return mux
}

// statusRecorder remembers the status written, for the request log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

// Unwrap lets http.ResponseController reach the connection (FaultDrop).
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// admitRequest counts a request to endpoint name, acts out a fault
// injected for it (path is what faults match), and reads its body; false
// when the request was answered (a fault, or unreadable, with unreadable).
func (s *Server) admitRequest(rec *statusRecorder, r *http.Request, name, path string, unreadable *apiError) ([]byte, bool) {
	s.mu.Lock()
	s.stats[name]++
	s.mu.Unlock()
	if f, ok := s.takeFault(r.Method, path, name); ok && s.applyFault(rec, r, f) {
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		writeError(rec, unreadable)
		return nil, false
	}
	return body, true
}

// endpoint wraps a handler in what every GitHub API request goes through:
// counting, injected faults, authentication, the rate-limit budget.
func (s *Server) endpoint(name string, h apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		defer func() { s.logRequest(r, name, rec.status) }()
		body, ok := s.admitRequest(rec, r, name, r.URL.Path, errf(http.StatusBadRequest, "Problems parsing JSON"))
		if !ok {
			return
		}

		s.mu.Lock()
		rc := &reqCtx{r: r, body: body, header: http.Header{}}
		var aerr *apiError
		switch name {
		case EndpointUnknown:
		case EndpointCreateInstallationToken:
			rc.id, aerr = s.authenticateApp(r)
		case EndpointRunnerRegistration:
			// Authorized by the registration token in the body's scope
			// (the handler checks it), charged to the scope.
			rc.id = identity{kind: "registration", key: "registration"}
		default:
			rc.id, aerr = s.authenticate(r)
		}
		if aerr != nil {
			s.mu.Unlock()
			// A refused request is charged to the caller's address, which
			// has GitHub's unauthenticated budget of 60.
			aerr.header = unauthenticatedRateHeaders(s.clock.Now())
			writeError(rec, aerr)
			return
		}
		var (
			status  int
			payload any
		)
		if name != EndpointUnknown {
			aerr = s.chargeLocked(rc.id, rc.header)
		}
		if aerr == nil {
			status, payload, aerr = h(rc)
		}
		s.mu.Unlock()

		for k, vs := range rc.header {
			rec.Header()[k] = vs
		}
		switch {
		case aerr != nil:
			writeError(rec, aerr)
		case status == http.StatusNoContent:
			rec.WriteHeader(status)
		default:
			writeJSON(rec, status, payload)
		}
	})
}

// Request is one API request as the simulator saw it.
type Request struct {
	Method string
	// Path as sent, including an Enterprise Server's /api/v3.
	Path     string
	Endpoint string
	Status   int
}

// maxRequestLog bounds the request log; the oldest entries go first.
const maxRequestLog = 4096

func (s *Server) logRequest(r *http.Request, endpoint string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) >= maxRequestLog {
		s.requests = append(s.requests[:0:0], s.requests[len(s.requests)-maxRequestLog/2:]...)
	}
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.Header.Get(prefixHeader) + r.URL.Path, Endpoint: endpoint, Status: status})
}

// Requests returns the API requests received, oldest first (the last few
// thousand).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Stats returns how many requests each endpoint received (see the Endpoint
// constants), refused ones included.
func (s *Server) Stats() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.stats))
	for k, v := range s.stats {
		out[k] = v
	}
	return out
}

// Calls returns how many requests endpoint received.
func (s *Server) Calls(endpoint string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats[endpoint]
}

// ResetStats zeroes the counts and the request log.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = map[string]int{}
	s.requests = nil
}

// scopeOf returns the lower-case scope key of a repository or organization
// request, or 404 when it does not exist. The caller holds s.mu.
func (s *Server) scopeOf(r *http.Request) (string, *apiError) {
	if org := r.PathValue("org"); org != "" {
		key := strings.ToLower(org)
		if _, ok := s.orgs[key]; !ok {
			return "", notFound()
		}
		return key, nil
	}
	key := strings.ToLower(r.PathValue("owner") + "/" + r.PathValue("repo"))
	if _, ok := s.repos[key]; !ok {
		return "", notFound()
	}
	return key, nil
}

func (s *Server) handleRegToken(remove bool) apiHandler {
	return func(rc *reqCtx) (int, any, *apiError) {
		scope, aerr := s.scopeOf(rc.r)
		if aerr != nil {
			return 0, nil, aerr
		}
		tok, exp := s.newRegToken(scope, remove)
		return http.StatusCreated, map[string]string{"token": tok, "expires_at": exp.UTC().Format(time.RFC3339)}, nil
	}
}

// handleJITConfig is POST .../actions/runners/generate-jitconfig: it
// registers an ephemeral runner (offline until its run.sh starts) and returns
// its encoded configuration.
func (s *Server) handleJITConfig(rc *reqCtx) (int, any, *apiError) {
	scope, aerr := s.scopeOf(rc.r)
	if aerr != nil {
		return 0, nil, aerr
	}
	var req struct {
		Name          string   `json:"name"`
		RunnerGroupID *int64   `json:"runner_group_id"`
		Labels        []string `json:"labels"`
		WorkFolder    string   `json:"work_folder"`
	}
	if err := json.Unmarshal(rc.body, &req); err != nil {
		return 0, nil, errf(http.StatusBadRequest, "Problems parsing JSON")
	}
	switch {
	case req.Name == "":
		return 0, nil, errf(http.StatusUnprocessableEntity, "Invalid request.\n\n\"name\" wasn't supplied.")
	case req.RunnerGroupID == nil:
		return 0, nil, errf(http.StatusUnprocessableEntity, "Invalid request.\n\n\"runner_group_id\" wasn't supplied.")
	case len(req.Labels) == 0:
		return 0, nil, errf(http.StatusUnprocessableEntity, "Invalid request.\n\nFor 'properties/labels', [] should have at least 1 item(s).")
	}
	g := s.group(scope, *req.RunnerGroupID)
	if g == nil {
		return 0, nil, notFound()
	}
	if s.runnerByName(scope, req.Name) != nil {
		return 0, nil, errf(http.StatusConflict, "Already exists - A runner with the name %s already exists.", req.Name)
	}
	work := req.WorkFolder
	if work == "" {
		work = "_work"
	}
	r := s.newRunnerLocked(scope, req.Name, g.id, s.makeLabels([]string{"self-hosted"}, req.Labels), true)
	r.jit = true
	r.jitClientID = simkit.RandomUUID()
	enc, err := s.encodeJITConfig(r, g, work)
	if err != nil {
		return 0, nil, errf(http.StatusInternalServerError, "githubsim: %v", err)
	}
	return http.StatusCreated, map[string]any{"runner": r.wire(), "encoded_jit_config": enc}, nil
}

// newRunnerLocked registers a runner (offline, its process not started).
func (s *Server) newRunnerLocked(scope, name string, groupID int64, labels []labelState, ephemeral bool) *runnerState {
	id := s.nextRun
	s.nextRun++
	r := &runnerState{
		id: id, name: name, os: "linux", arch: "x64", scope: scope, groupID: groupID, labels: labels,
		ephemeral: ephemeral, registered: s.clock.Now(), done: make(chan struct{}),
	}
	s.runners[id] = r
	return r
}

// paginate cuts items to the page the request asks for (per_page default
// 30, at most 100) and sets GitHub's Link header.
func paginate[T any](rc *reqCtx, items []T) []T {
	q := rc.r.URL.Query()
	perPage, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || perPage <= 0 {
		perPage = 30
	}
	perPage = min(perPage, 100)
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page <= 0 {
		page = 1
	}
	last := max((len(items)+perPage-1)/perPage, 1)
	link := func(p int, rel string) string {
		u := url.URL{Path: rc.r.Header.Get(prefixHeader) + rc.r.URL.Path}
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("per_page", strconv.Itoa(perPage))
		v.Set("page", strconv.Itoa(p))
		u.RawQuery = v.Encode()
		return fmt.Sprintf("<%s>; rel=%q", absoluteURL(rc.r, u.String()), rel)
	}
	var links []string
	if page < last {
		links = append(links, link(page+1, "next"), link(last, "last"))
	}
	if page > 1 {
		links = append(links, link(1, "first"), link(page-1, "prev"))
	}
	if len(links) > 0 {
		rc.header.Set("Link", strings.Join(links, ", "))
	}
	start := min((page-1)*perPage, len(items))
	end := min(start+perPage, len(items))
	return items[start:end]
}

func absoluteURL(r *http.Request, path string) string {
	return "http://" + r.Host + path
}

func (s *Server) handleListRunners(rc *reqCtx) (int, any, *apiError) {
	scope, aerr := s.scopeOf(rc.r)
	if aerr != nil {
		return 0, nil, aerr
	}
	all := s.sortedRunners(scope)
	if name := rc.r.URL.Query().Get("name"); name != "" {
		var kept []*runnerState
		for _, r := range all {
			if r.name == name {
				kept = append(kept, r)
			}
		}
		all = kept
	}
	page := paginate(rc, all)
	wire := make([]map[string]any, len(page))
	for i, r := range page {
		wire[i] = r.wire()
	}
	return http.StatusOK, map[string]any{"total_count": len(all), "runners": wire}, nil
}

func (s *Server) runnerOf(rc *reqCtx) (*runnerState, *apiError) {
	scope, aerr := s.scopeOf(rc.r)
	if aerr != nil {
		return nil, aerr
	}
	id, err := strconv.ParseInt(rc.r.PathValue("runner_id"), 10, 64)
	if err != nil {
		return nil, notFound()
	}
	r := s.runnerInScope(scope, id)
	if r == nil {
		return nil, notFound()
	}
	return r, nil
}

func (s *Server) handleGetRunner(rc *reqCtx) (int, any, *apiError) {
	r, aerr := s.runnerOf(rc)
	if aerr != nil {
		return 0, nil, aerr
	}
	return http.StatusOK, r.wire(), nil
}

// handleDeleteRunner removes a registration; GitHub refuses (422) while the
// runner runs a job.
func (s *Server) handleDeleteRunner(rc *reqCtx) (int, any, *apiError) {
	r, aerr := s.runnerOf(rc)
	if aerr != nil {
		return 0, nil, aerr
	}
	if r.busy {
		return 0, nil, &apiError{status: http.StatusUnprocessableEntity,
			message: fmt.Sprintf("Bad request - Runner %q is still running a job\"", r.name),
			docURL:  docsRoot + "/actions/self-hosted-runners#delete-a-self-hosted-runner-from-a-repository"}
	}
	s.removeRunnerLocked(r)
	return http.StatusNoContent, nil, nil
}

func (s *Server) handleListGroups(rc *reqCtx) (int, any, *apiError) {
	scope, aerr := s.scopeOf(rc.r)
	if aerr != nil {
		return 0, nil, aerr
	}
	o := s.orgs[scope]
	page := paginate(rc, o.groups)
	wire := make([]map[string]any, len(page))
	for i, g := range page {
		base := absoluteURL(rc.r, fmt.Sprintf("%s/orgs/%s/actions/runner-groups/%d", rc.r.Header.Get(prefixHeader), o.login, g.id))
		wire[i] = map[string]any{
			"id": g.id, "name": g.name, "visibility": "all", "default": g.isDefault,
			"runners_url":                     base + "/runners",
			"inherited":                       false,
			"allows_public_repositories":      false,
			"restricted_to_workflows":         false,
			"selected_workflows":              []string{},
			"workflow_restrictions_read_only": false,
		}
	}
	return http.StatusOK, map[string]any{"total_count": len(o.groups), "runner_groups": wire}, nil
}

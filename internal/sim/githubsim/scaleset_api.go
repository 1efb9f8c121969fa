package githubsim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// The Actions service's exception type names the scale-set client matches
// on (errors.go of github.com/actions/scaleset) or that GitHub answers with.
const (
	exAgentExists     = "GitHub.DistributedTask.WebApi.AgentExistsException"
	exAgentNotFound   = "GitHub.DistributedTask.WebApi.AgentNotFoundException"
	exJobStillRunning = "GitHub.DistributedTask.WebApi.JobStillRunningException"
	// The scale-set service's own, as GitHub's answers in
	// actions-runner-controller's issue reports spell them.
	exSessionConflict = "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException"
	exScaleSetExists  = "GitHub.Actions.Runtime.WebApi.RunnerScaleSetExistsException"
	exScaleSetMissing = "GitHub.Actions.Runtime.WebApi.RunnerScaleSetNotFoundException"
	exSessionExpired  = "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionExpiredException"
	exInvalidRequest  = "System.ArgumentException"
)

// adminTokenTTL is how long an admin connection's token is valid; the
// client renews it a minute before it expires.
const adminTokenTTL = time.Hour

// handleRunnerRegistration exchanges a registration token ("RemoteAuth
// <token>") for the Actions service's URL and an admin token scoped to the
// body's url (the enterprise, organization or repository).
func (s *Server) handleRunnerRegistration(rc *reqCtx) (int, any, *apiError) {
	var req struct {
		URL         string `json:"url"`
		RunnerEvent string `json:"runner_event"`
	}
	if err := json.Unmarshal(rc.body, &req); err != nil {
		return 0, nil, errf(http.StatusBadRequest, "Problems parsing JSON")
	}
	scope, aerr := s.scopeFromURL(req.URL)
	if aerr != nil {
		return 0, nil, aerr
	}
	tok, ok := strings.CutPrefix(strings.TrimSpace(rc.r.Header.Get("Authorization")), "RemoteAuth ")
	if !ok {
		return 0, nil, errf(http.StatusUnauthorized, "Requires authentication")
	}
	if aerr := s.checkRegToken(strings.TrimSpace(tok), scope, false); aerr != nil {
		return 0, nil, aerr
	}
	if req.RunnerEvent != "register" {
		return 0, nil, errf(http.StatusUnprocessableEntity, "runner_event must be register")
	}
	now := s.clock.Now()
	admin, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": scope, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(adminTokenTTL).Unix(),
	}).SignedString(s.adminKey)
	if err != nil {
		return 0, nil, errf(http.StatusInternalServerError, "githubsim: %v", err)
	}
	return http.StatusCreated, map[string]any{"url": s.kit.URL() + strings.TrimPrefix(actionsPrefix, "/") + "/", "token": admin}, nil
}

// adminScope checks an admin token and returns the scope it was issued
// for. The caller holds s.mu.
func (s *Server) adminScope(r *http.Request) (string, *apiError) {
	raw := bearer(r)
	claims := jwt.MapClaims{}
	parser := jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithTimeFunc(s.clock.Now))
	if _, err := parser.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return s.adminKey, nil }); err != nil {
		return "", errf(http.StatusUnauthorized, "TF400813: The user is not authorized to access this resource.")
	}
	scope, _ := claims["sub"].(string)
	return scope, nil
}

// actionsHandler answers an Actions service request with s.mu held, for the
// scope of its admin token.
type actionsHandler func(rc *reqCtx, scope string) (int, any, *apiError)

// actionsRoutes serves the Actions service: the scale-set API under
// actionsPrefix (stripped by ServeHTTP).
func (s *Server) actionsRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	admin := func(name string, h actionsHandler) {
		mux.Handle(name, s.actionsEndpoint(name, func(rc *reqCtx) (int, any, *apiError) {
			scope, aerr := s.adminScope(rc.r)
			if aerr != nil {
				return 0, nil, aerr
			}
			return h(rc, scope)
		}))
	}
	admin(EndpointScaleSetRunnerGroups, s.handleScaleSetGroups)
	admin(EndpointScaleSetList, s.handleScaleSetList)
	admin(EndpointScaleSetCreate, s.handleScaleSetCreate)
	admin(EndpointScaleSetGet, s.withScaleSet(func(_ *reqCtx, ss *scaleSetState) (int, any, *apiError) {
		return http.StatusOK, s.scaleSetWire(ss), nil
	}))
	admin(EndpointScaleSetUpdate, s.withScaleSet(s.handleScaleSetUpdate))
	admin(EndpointScaleSetDelete, s.withScaleSet(func(_ *reqCtx, ss *scaleSetState) (int, any, *apiError) {
		s.deleteScaleSetLocked(ss)
		return http.StatusNoContent, nil, nil
	}))
	admin(EndpointSessionCreate, s.withScaleSet(s.handleSessionCreate))
	admin(EndpointSessionRefresh, s.withScaleSet(s.handleSessionRefresh))
	admin(EndpointSessionDelete, s.withScaleSet(func(rc *reqCtx, ss *scaleSetState) (int, any, *apiError) {
		if ss.session == nil || ss.session.id != rc.r.PathValue("session") {
			return 0, nil, actionsError(http.StatusBadRequest, exSessionExpired, "The session identifier %s is not valid.", rc.r.PathValue("session"))
		}
		close(ss.session.wake)
		ss.session = nil
		return http.StatusNoContent, nil, nil
	}))
	// Acquiring is authorized by the session's queue token, as GitHub's is.
	mux.Handle(EndpointAcquireJobs, s.actionsEndpoint(EndpointAcquireJobs, s.handleAcquireJobs))
	admin(EndpointScaleSetJITConfig, s.withScaleSet(s.handleScaleSetJIT))
	admin(EndpointAgentGet, s.handleAgentGet)
	admin(EndpointAgentList, s.handleAgentList)
	admin(EndpointAgentDelete, s.handleAgentDelete)
	mux.Handle(EndpointMessageGet, s.actionsEndpoint(EndpointMessageGet, nil))
	mux.Handle(EndpointMessageDelete, s.actionsEndpoint(EndpointMessageDelete, s.handleMessageDelete))
	mux.Handle("/", s.actionsEndpoint(EndpointUnknown, func(*reqCtx) (int, any, *apiError) {
		return 0, nil, actionsError(http.StatusNotFound, "System.Web.Http.HttpResponseException", "Not Found")
	}))
	return mux
}

// actionsEndpoint counts, logs and fault-checks a request as endpoint does
// for the REST API, then runs h with s.mu held. The message poll (nil h)
// waits for a message without the lock.
func (s *Server) actionsEndpoint(name string, h func(rc *reqCtx) (int, any, *apiError)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		defer func() { s.logRequest(r, name, rec.status) }()
		body, ok := s.admitRequest(rec, r, name, actionsPrefix+r.URL.Path,
			actionsError(http.StatusBadRequest, exInvalidRequest, "the request body could not be read"))
		if !ok {
			return
		}
		rc := &reqCtx{r: r, body: body, header: http.Header{}}
		if h == nil {
			s.pollMessage(rec, rc)
			return
		}
		s.mu.Lock()
		status, payload, aerr := h(rc)
		s.mu.Unlock()
		switch {
		case aerr != nil:
			writeError(rec, aerr)
		case status == http.StatusNoContent || status == http.StatusAccepted:
			rec.WriteHeader(status)
		default:
			writeJSON(rec, status, payload)
		}
	})
}

// withScaleSet finds the path's scale set in the token's scope.
func (s *Server) withScaleSet(h func(rc *reqCtx, ss *scaleSetState) (int, any, *apiError)) actionsHandler {
	return func(rc *reqCtx, scope string) (int, any, *apiError) {
		id, err := strconv.Atoi(rc.r.PathValue("id"))
		ss := s.scaleSets[id]
		if err != nil || ss == nil || ss.scope != scope {
			return 0, nil, actionsError(http.StatusNotFound, exScaleSetMissing, "Runner scale set %s not found.", rc.r.PathValue("id"))
		}
		return h(rc, ss)
	}
}

func (s *Server) handleScaleSetGroups(rc *reqCtx, scope string) (int, any, *apiError) {
	name := rc.r.URL.Query().Get("groupName")
	var groups []map[string]any
	if g := s.groupByName(scope, name); g != nil && name != "" {
		groups = append(groups, map[string]any{"id": g.id, "name": g.name, "size": 0, "isDefaultGroup": g.isDefault || g.id == 1})
	}
	return http.StatusOK, map[string]any{"count": len(groups), "value": nonNil(groups)}, nil
}

func (s *Server) handleScaleSetList(rc *reqCtx, scope string) (int, any, *apiError) {
	q := rc.r.URL.Query()
	group, _ := strconv.ParseInt(q.Get("runnerGroupId"), 10, 64)
	name := q.Get("name")
	var out []map[string]any
	for id := 1; id < s.nextScaleSet; id++ {
		ss := s.scaleSets[id]
		if ss == nil || ss.scope != scope || (group != 0 && ss.groupID != group) || (name != "" && !strings.EqualFold(ss.name, name)) {
			continue
		}
		out = append(out, s.scaleSetWire(ss))
	}
	return http.StatusOK, map[string]any{"count": len(out), "value": nonNil(out)}, nil
}

// scaleSetRequest is what a create or update sends.
type scaleSetRequest struct {
	Name          string `json:"name"`
	RunnerGroupID int64  `json:"runnerGroupId"`
	Labels        []struct {
		Name string `json:"name"`
		Type string `json:"type"`
	} `json:"labels"`
	RunnerSetting json.RawMessage `json:"RunnerSetting"`
}

func (req scaleSetRequest) labelNames() []string {
	out := make([]string, 0, len(req.Labels))
	for _, l := range req.Labels {
		if l.Name != "" {
			out = append(out, l.Name)
		}
	}
	return out
}

func (s *Server) handleScaleSetCreate(rc *reqCtx, scope string) (int, any, *apiError) {
	var req scaleSetRequest
	if err := json.Unmarshal(rc.body, &req); err != nil {
		return 0, nil, actionsError(http.StatusBadRequest, exInvalidRequest, "the runner scale set could not be read: %v", err)
	}
	if strings.TrimSpace(req.Name) == "" {
		return 0, nil, actionsError(http.StatusBadRequest, exInvalidRequest, "The runner scale set name is required.")
	}
	if req.RunnerGroupID == 0 {
		req.RunnerGroupID = 1
	}
	if s.group(scope, req.RunnerGroupID) == nil {
		return 0, nil, actionsError(http.StatusNotFound, "GitHub.DistributedTask.WebApi.TaskAgentPoolNotFoundException", "Runner group %d not found.", req.RunnerGroupID)
	}
	for _, ss := range s.scaleSets {
		if ss.scope == scope && ss.groupID == req.RunnerGroupID && strings.EqualFold(ss.name, req.Name) {
			return 0, nil, actionsError(http.StatusConflict, exScaleSetExists, "A runner scale set named %s already exists in the runner group.", req.Name)
		}
	}
	labels := req.labelNames()
	if len(labels) == 0 {
		labels = []string{req.Name}
	}
	ss := &scaleSetState{id: s.nextScaleSet, name: req.Name, scope: scope, groupID: req.RunnerGroupID, labels: labels,
		createdOn: s.clock.Now().UTC(), settings: req.RunnerSetting}
	s.nextScaleSet++
	s.scaleSets[ss.id] = ss
	// Jobs queued before the scale set existed are offered to it now.
	for _, id := range s.jobOrder {
		s.offerToScaleSetLocked(s.jobs[id])
	}
	return http.StatusOK, s.scaleSetWire(ss), nil
}

func (s *Server) handleScaleSetUpdate(rc *reqCtx, ss *scaleSetState) (int, any, *apiError) {
	var req scaleSetRequest
	if err := json.Unmarshal(rc.body, &req); err != nil {
		return 0, nil, actionsError(http.StatusBadRequest, exInvalidRequest, "the runner scale set could not be read: %v", err)
	}
	if req.Name != "" {
		ss.name = req.Name
	}
	if req.RunnerGroupID != 0 {
		if s.group(ss.scope, req.RunnerGroupID) == nil {
			return 0, nil, actionsError(http.StatusNotFound, "GitHub.DistributedTask.WebApi.TaskAgentPoolNotFoundException", "Runner group %d not found.", req.RunnerGroupID)
		}
		ss.groupID = req.RunnerGroupID
	}
	if labels := req.labelNames(); len(labels) > 0 {
		ss.labels = labels
	}
	if len(req.RunnerSetting) > 0 {
		ss.settings = req.RunnerSetting
	}
	return http.StatusOK, s.scaleSetWire(ss), nil
}

// sessionTTL is how long a session's queue token is valid.
func (s *Server) sessionTTL() time.Duration {
	if s.opts.SessionTokenTTL > 0 {
		return s.opts.SessionTokenTTL
	}
	return time.Hour
}

// handleSessionCreate opens the scale set's one message session; while one
// is open another is refused with 409, as GitHub does, whoever asks.
func (s *Server) handleSessionCreate(rc *reqCtx, ss *scaleSetState) (int, any, *apiError) {
	var req struct {
		OwnerName string `json:"ownerName"`
	}
	if err := json.Unmarshal(rc.body, &req); err != nil {
		return 0, nil, actionsError(http.StatusBadRequest, exInvalidRequest, "the session could not be read: %v", err)
	}
	if s.lapsedLocked(ss) {
		close(ss.session.wake)
		ss.session = nil
	}
	if ss.session != nil {
		return 0, nil, actionsError(http.StatusConflict, exSessionConflict,
			"The actions runner scaleset %s already has an active session.", ss.name)
	}
	ss.session = &scaleSession{id: simkit.RandomUUID(), owner: req.OwnerName, wake: make(chan struct{}), lastSeen: s.clock.Now()}
	s.newQueueTokenLocked(ss.session)
	// Messages delivered and not acknowledged are delivered again to the
	// new session.
	return http.StatusOK, s.sessionWire(ss), nil
}

func (s *Server) handleSessionRefresh(rc *reqCtx, ss *scaleSetState) (int, any, *apiError) {
	if ss.session == nil || ss.session.id != rc.r.PathValue("session") {
		return 0, nil, actionsError(http.StatusBadRequest, exSessionExpired, "The session identifier %s is not valid.", rc.r.PathValue("session"))
	}
	s.newQueueTokenLocked(ss.session)
	return http.StatusOK, s.sessionWire(ss), nil
}

func (s *Server) newQueueTokenLocked(se *scaleSession) {
	se.token = randomAlnum(64)
	se.tokenExpires = s.clock.Now().Add(s.sessionTTL())
}

func (s *Server) sessionWire(ss *scaleSetState) map[string]any {
	se := ss.session
	return map[string]any{
		"sessionId": se.id, "ownerName": se.owner, "runnerScaleSet": s.scaleSetWire(ss),
		"messageQueueUrl":         s.kit.URL() + strings.TrimPrefix(actionsPrefix, "/") + "/_apis/runtime/runnerscalesets/" + itoa(ss.id) + "/messages?sessionId=" + se.id,
		"messageQueueAccessToken": se.token,
		"statistics":              s.scaleSetStatsLocked(ss),
	}
}

// sessionByQueue finds the scale set whose open session the request names
// (the path's scale set, the sessionId query) and checks the session's
// queue token. The caller holds s.mu.
func (s *Server) sessionByQueue(r *http.Request, id string) (*scaleSetState, *apiError) {
	n, _ := strconv.Atoi(r.PathValue("id"))
	ss := s.scaleSets[n]
	if ss == nil || ss.session == nil || ss.session.id != id {
		return nil, actionsError(http.StatusBadRequest, exSessionExpired, "The session identifier %s is not valid.", id)
	}
	if bearer(r) != ss.session.token || !s.clock.Now().Before(ss.session.tokenExpires) {
		return nil, actionsError(http.StatusUnauthorized, "GitHub.Services.Common.VssUnauthorizedException", "The message queue token is invalid or has expired.")
	}
	return ss, nil
}

// pollMessage answers a long poll: the next message at once, else one as
// soon as it is posted, else 202 after sessionWait.
func (s *Server) pollMessage(w *statusRecorder, rc *reqCtx) {
	last, _ := strconv.Atoi(rc.r.URL.Query().Get("lastMessageId"))
	deadline := time.NewTimer(s.sessionWait())
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ss, aerr := s.sessionByQueue(rc.r, rc.r.URL.Query().Get("sessionId"))
		if aerr != nil {
			s.mu.Unlock()
			writeError(w, aerr)
			return
		}
		se := ss.session
		se.lastSeen = s.clock.Now()
		if m := s.nextMessageLocked(ss, last); m != nil {
			body, err := json.Marshal(m.body)
			out := map[string]any{"messageId": m.id, "messageType": "RunnerScaleSetJobMessages", "body": string(body),
				"statistics": s.scaleSetStatsLocked(ss)}
			s.mu.Unlock()
			if err != nil {
				writeError(w, errf(http.StatusInternalServerError, "githubsim: %v", err))
				return
			}
			writeJSON(w, http.StatusOK, out)
			return
		}
		wake := se.wake
		se.polling++
		s.mu.Unlock()
		answered := false
		select {
		case <-wake:
		case <-deadline.C:
			answered = true
		case <-rc.r.Context().Done():
			answered = true
		case <-s.kit.Closing():
			answered = true
		}
		s.mu.Lock()
		se.polling--
		se.lastSeen = s.clock.Now()
		s.mu.Unlock()
		if answered {
			if rc.r.Context().Err() == nil && !s.kit.Closed() {
				w.WriteHeader(http.StatusAccepted)
			}
			return
		}
	}
}

func (s *Server) handleMessageDelete(rc *reqCtx) (int, any, *apiError) {
	ss, aerr := s.sessionByQueue(rc.r, rc.r.URL.Query().Get("sessionId"))
	if aerr != nil {
		return 0, nil, aerr
	}
	id, _ := strconv.Atoi(rc.r.PathValue("message"))
	for i, m := range ss.msgs {
		if m.id == id {
			ss.msgs = append(ss.msgs[:i:i], ss.msgs[i+1:]...)
			break
		}
	}
	return http.StatusNoContent, nil, nil
}

// handleAcquireJobs acquires offered jobs for the session's scale set,
// authorized by the session's queue token.
func (s *Server) handleAcquireJobs(rc *reqCtx) (int, any, *apiError) {
	id, _ := strconv.Atoi(rc.r.PathValue("id"))
	ss := s.scaleSets[id]
	if ss == nil || ss.session == nil {
		return 0, nil, actionsError(http.StatusNotFound, exScaleSetMissing, "Runner scale set %s has no session.", rc.r.PathValue("id"))
	}
	if _, aerr := s.sessionByQueue(rc.r, ss.session.id); aerr != nil {
		return 0, nil, aerr
	}
	var ids []int64
	if err := json.Unmarshal(rc.body, &ids); err != nil {
		return 0, nil, actionsError(http.StatusBadRequest, exInvalidRequest, "the request IDs could not be read: %v", err)
	}
	got := s.acquireLocked(ss, ids)
	return http.StatusOK, map[string]any{"count": len(got), "value": got}, nil
}

// handleScaleSetJIT registers a JIT runner of the scale set: ephemeral,
// with the scale set's labels, taking only its jobs.
func (s *Server) handleScaleSetJIT(rc *reqCtx, ss *scaleSetState) (int, any, *apiError) {
	var req struct {
		Name       string `json:"name"`
		WorkFolder string `json:"workFolder"`
	}
	if err := json.Unmarshal(rc.body, &req); err != nil {
		return 0, nil, actionsError(http.StatusBadRequest, exInvalidRequest, "the runner settings could not be read: %v", err)
	}
	if strings.TrimSpace(req.Name) == "" {
		return 0, nil, actionsError(http.StatusBadRequest, exInvalidRequest, "The runner name is required.")
	}
	if s.runnerByName(ss.scope, req.Name) != nil {
		return 0, nil, actionsError(http.StatusConflict, exAgentExists, "A runner with the name %s already exists.", req.Name)
	}
	g := s.group(ss.scope, ss.groupID)
	if g == nil {
		return 0, nil, actionsError(http.StatusNotFound, "GitHub.DistributedTask.WebApi.TaskAgentPoolNotFoundException", "Runner group %d not found.", ss.groupID)
	}
	work := req.WorkFolder
	if work == "" {
		work = "_work"
	}
	r := s.newRunnerLocked(ss.scope, req.Name, g.id, s.makeLabels(nil, ss.labels), true)
	r.jit, r.jitClientID, r.scaleSetID = true, simkit.RandomUUID(), ss.id
	enc, err := s.encodeJITConfig(r, g, work)
	if err != nil {
		return 0, nil, errf(http.StatusInternalServerError, "githubsim: %v", err)
	}
	return http.StatusOK, map[string]any{"runner": agentWire(r), "encodedJITConfig": enc}, nil
}

// agentWire is a runner as the Actions service's agents API returns it
// (RunnerReference).
func agentWire(r *runnerState) map[string]any {
	return map[string]any{"id": r.id, "name": r.name, "runnerScaleSetId": r.scaleSetID,
		"version": "2.330.0", "enabled": true, "status": r.status(), "ephemeral": r.ephemeral}
}

func (s *Server) handleAgentGet(rc *reqCtx, scope string) (int, any, *apiError) {
	id, _ := strconv.ParseInt(rc.r.PathValue("id"), 10, 64)
	r := s.runnerInScope(scope, id)
	if r == nil {
		return 0, nil, actionsError(http.StatusNotFound, exAgentNotFound, "Agent %s was not found.", rc.r.PathValue("id"))
	}
	return http.StatusOK, agentWire(r), nil
}

func (s *Server) handleAgentList(rc *reqCtx, scope string) (int, any, *apiError) {
	name := rc.r.URL.Query().Get("agentName")
	var out []map[string]any
	for _, r := range s.sortedRunners(scope) {
		if name == "" || strings.EqualFold(r.name, name) {
			out = append(out, agentWire(r))
		}
	}
	return http.StatusOK, map[string]any{"count": len(out), "value": nonNil(out)}, nil
}

// handleAgentDelete removes a runner; one running a job is refused, as
// GitHub refuses it (JobStillRunningException).
func (s *Server) handleAgentDelete(rc *reqCtx, scope string) (int, any, *apiError) {
	id, _ := strconv.ParseInt(rc.r.PathValue("id"), 10, 64)
	r := s.runnerInScope(scope, id)
	if r == nil {
		return 0, nil, actionsError(http.StatusNotFound, exAgentNotFound, "Agent %s was not found.", rc.r.PathValue("id"))
	}
	if r.busy {
		return 0, nil, actionsError(http.StatusBadRequest, exJobStillRunning, "The runner %s is still running a job.", r.name)
	}
	s.removeRunnerLocked(r)
	return http.StatusNoContent, nil, nil
}

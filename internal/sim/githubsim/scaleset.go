package githubsim

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// The runner scale-set API, as github.com/actions/scaleset speaks it: a
// registration token is exchanged (POST /actions/runner-registration, with
// "RemoteAuth <token>") for the Actions service's URL and an admin JWT;
// on that service the client finds runner groups, creates, reads, updates
// and deletes scale sets, holds one message session per scale set,
// long-polls the session's queue for batches of job messages with the
// scale set's statistics, acquires the jobs offered, and generates JIT
// configs for the scale set's runners.
//
// A job whose labels are all among a scale set's labels (and whose
// repository the scale set's scope covers) is the scale set's: it is offered
// (JobAvailable), assigned once acquired (JobAssigned), then taken only by
// a runner of that scale set (JobStarted) and finished (JobCompleted).

// actionsPrefix is where the simulator serves the Actions service (GitHub's
// pipelines.actions.githubusercontent.com/<tenant>/).
const actionsPrefix = "/_actions"

// maxMessagesPerBatch is the cap on job messages in one queue message: a
// larger backlog is sent over several, and only the statistics say its size.
const maxMessagesPerBatch = 50

// Endpoint names of the scale-set API, for Stats and faults.
const (
	EndpointRunnerRegistration   = "POST /actions/runner-registration"
	EndpointScaleSetRunnerGroups = "GET /_apis/runtime/runnergroups/"
	EndpointScaleSetList         = "GET /_apis/runtime/runnerscalesets"
	EndpointScaleSetCreate       = "POST /_apis/runtime/runnerscalesets"
	EndpointScaleSetGet          = "GET /_apis/runtime/runnerscalesets/{id}"
	EndpointScaleSetUpdate       = "PATCH /_apis/runtime/runnerscalesets/{id}"
	EndpointScaleSetDelete       = "DELETE /_apis/runtime/runnerscalesets/{id}"
	EndpointSessionCreate        = "POST /_apis/runtime/runnerscalesets/{id}/sessions"
	EndpointSessionRefresh       = "PATCH /_apis/runtime/runnerscalesets/{id}/sessions/{session}"
	EndpointSessionDelete        = "DELETE /_apis/runtime/runnerscalesets/{id}/sessions/{session}"
	EndpointAcquireJobs          = "POST /_apis/runtime/runnerscalesets/{id}/acquirejobs"
	EndpointScaleSetJITConfig    = "POST /_apis/runtime/runnerscalesets/{id}/generatejitconfig"
	EndpointAgentGet             = "GET /_apis/distributedtask/pools/0/agents/{id}"
	EndpointAgentList            = "GET /_apis/distributedtask/pools/0/agents"
	EndpointAgentDelete          = "DELETE /_apis/distributedtask/pools/0/agents/{id}"
	EndpointMessageGet           = "GET /_apis/runtime/runnerscalesets/{id}/messages"
	EndpointMessageDelete        = "DELETE /_apis/runtime/runnerscalesets/{id}/messages/{message}"
)

// scaleSetState is a registered runner scale set.
type scaleSetState struct {
	id        int
	name      string
	scope     string // lower-case "owner/repo" or "org"
	groupID   int64
	labels    []string
	createdOn time.Time
	settings  json.RawMessage // RunnerSetting as last written

	session *scaleSession
	// msgs are the queue's messages not yet acknowledged, oldest first.
	msgs []*scaleMessage
	// pending are job messages not yet put in a queue message.
	pending   []map[string]any
	nextMsgID int
}

// scaleSession is a scale set's one message session.
type scaleSession struct {
	id           string
	owner        string
	token        string
	tokenExpires time.Time
	// wake is closed (and replaced) when a job message is added, to answer
	// a waiting long poll.
	wake chan struct{}
	// lastSeen is when it was created or last polled; polling counts the
	// polls waiting now. An idle session lapses (SessionIdleTimeout).
	lastSeen time.Time
	polling  int
}

type scaleMessage struct {
	id   int
	body []map[string]any
}

// ScaleSet is a scale set as the simulator holds it.
type ScaleSet struct {
	ID      int      `json:"id"`
	Name    string   `json:"name"`
	Scope   string   `json:"scope"`
	GroupID int64    `json:"runnerGroupId"`
	Labels  []string `json:"labels"`
	// Session is the owner of its message session, empty when none is open.
	Session string `json:"session,omitempty"`
	// Unacknowledged counts the queue messages delivered and not deleted.
	Unacknowledged int `json:"unacknowledged"`
}

// ScaleSets lists the registered scale sets by ID.
func (s *Server) ScaleSets() []ScaleSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ScaleSet, 0, len(s.scaleSets))
	for _, ss := range s.scaleSets {
		v := ScaleSet{ID: ss.id, Name: ss.name, Scope: ss.scope, GroupID: ss.groupID, Labels: slices.Clone(ss.labels), Unacknowledged: len(ss.msgs)}
		if ss.session != nil {
			v.Session = ss.session.owner
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b ScaleSet) int { return a.ID - b.ID })
	return out
}

// ExpireSessionTokens makes every open session's queue token expired, as
// GitHub's do after an hour: the next poll is refused with 401 until the
// session is refreshed.
func (s *Server) ExpireSessionTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.scaleSets {
		if ss.session != nil {
			ss.session.tokenExpires = s.clock.Now()
		}
	}
}

// scaleSetWire is the scale set in the service's shape.
func (s *Server) scaleSetWire(ss *scaleSetState) map[string]any {
	labels := make([]map[string]any, len(ss.labels))
	for i, l := range ss.labels {
		labels[i] = map[string]any{"id": s.labelID(l), "name": l, "type": "System"}
	}
	settings := json.RawMessage(`{}`)
	if len(ss.settings) > 0 {
		settings = ss.settings
	}
	g := s.group(ss.scope, ss.groupID)
	groupName := ""
	if g != nil {
		groupName = g.name
	}
	stats := s.scaleSetStatsLocked(ss)
	return map[string]any{
		"id": ss.id, "name": ss.name, "runnerGroupId": ss.groupID, "runnerGroupName": groupName,
		"labels": labels, "RunnerSetting": settings, "createdOn": ss.createdOn.UTC().Format(time.RFC3339Nano),
		"runnerJitConfigUrl": s.kit.URL() + strings.TrimPrefix(actionsPrefix, "/") + "/_apis/runtime/runnerscalesets/" + itoa(ss.id) + "/generatejitconfig",
		"statistics":         stats,
	}
}

// scaleSetStatsLocked counts the scale set's jobs and runners now.
func (s *Server) scaleSetStatsLocked(ss *scaleSetState) map[string]int {
	var available, assigned, running, registered, busy int
	for _, id := range s.jobOrder {
		j := s.jobs[id]
		if j.scaleSetID != ss.id || j.Status == JobCompleted {
			continue
		}
		switch {
		case !j.acquired:
			available++
		default:
			assigned++
			if j.Status == JobInProgress {
				running++
			}
		}
	}
	for _, r := range s.runners {
		if r.scaleSetID != ss.id {
			continue
		}
		registered++
		if r.busy {
			busy++
		}
	}
	return map[string]int{
		"totalAvailableJobs": available, "totalAcquiredJobs": assigned, "totalAssignedJobs": assigned,
		"totalRunningJobs": running, "totalRegisteredRunners": registered, "totalBusyRunners": busy,
		"totalIdleRunners": registered - busy,
	}
}

// scaleSetFor is the scale set that takes job j: one of the job's scope
// whose labels include every label the job asks for, the oldest first.
// The caller holds s.mu.
func (s *Server) scaleSetFor(j *jobState) *scaleSetState {
	var best *scaleSetState
	for _, ss := range s.scaleSets {
		scopeOK := ss.scope == strings.ToLower(j.repo.fullName()) || (j.repo.org != nil && ss.scope == strings.ToLower(j.repo.org.login))
		if !scopeOK || len(j.Labels) == 0 {
			continue
		}
		all := true
		for _, want := range j.Labels {
			if !slices.ContainsFunc(ss.labels, func(l string) bool { return strings.EqualFold(l, want) }) {
				all = false
				break
			}
		}
		if all && (best == nil || ss.id < best.id) {
			best = ss
		}
	}
	return best
}

// offerToScaleSetLocked makes a queued job its scale set's, if one takes
// it: offered in the queue (JobAvailable) until acquired. The caller holds
// s.mu.
func (s *Server) offerToScaleSetLocked(j *jobState) {
	if j.scaleSetID != 0 || j.Status != JobQueued {
		return
	}
	ss := s.scaleSetFor(j)
	if ss == nil {
		return
	}
	j.scaleSetID = ss.id
	msg := s.jobMessage(j, "JobAvailable")
	msg["acquireJobUrl"] = s.kit.URL() + strings.TrimPrefix(actionsPrefix, "/") + "/_apis/runtime/runnerscalesets/" + itoa(ss.id) + "/acquirejobs"
	s.postLocked(ss, msg)
}

// jobMessage is the common part of a job message (JobMessageBase).
func (s *Server) jobMessage(j *jobState, kind string) map[string]any {
	finish := time.Time{}
	if !j.CompletedAt.IsZero() {
		finish = j.CompletedAt
	}
	return map[string]any{
		"messageType":        kind,
		"runnerRequestId":    j.ID,
		"repositoryName":     j.repo.name,
		"ownerName":          j.repo.owner,
		"jobId":              simJobGUID(j.ID),
		"jobWorkflowRef":     j.repo.fullName() + "/.github/workflows/ci.yaml@refs/heads/main",
		"jobDisplayName":     j.Name,
		"workflowRunId":      j.RunID,
		"eventName":          "push",
		"requestLabels":      slices.Clone(j.Labels),
		"queueTime":          j.CreatedAt.UTC().Format(time.RFC3339Nano),
		"scaleSetAssignTime": j.CreatedAt.UTC().Format(time.RFC3339Nano),
		"runnerAssignTime":   j.StartedAt.UTC().Format(time.RFC3339Nano),
		"finishTime":         finish.UTC().Format(time.RFC3339Nano),
	}
}

// simJobGUID is a job's ID in the Actions service (a GUID, not the REST
// job ID).
func simJobGUID(id int64) string {
	h := strings.Repeat("0", 12) + itoa64(id)
	return "00000000-0000-4000-8000-" + h[len(h)-12:]
}

// postLocked adds a job message for the scale set's queue and wakes a
// waiting poll. The caller holds s.mu.
func (s *Server) postLocked(ss *scaleSetState, msg map[string]any) {
	ss.pending = append(ss.pending, msg)
	if ss.session != nil {
		close(ss.session.wake)
		ss.session.wake = make(chan struct{})
	}
}

// scaleSetJobStartedLocked and scaleSetJobCompletedLocked tell the job's
// scale set. The caller holds s.mu.
func (s *Server) scaleSetJobStartedLocked(j *jobState, r *runnerState) {
	if ss := s.scaleSets[j.scaleSetID]; ss != nil {
		msg := s.jobMessage(j, "JobStarted")
		msg["runnerId"], msg["runnerName"] = r.id, r.name
		s.postLocked(ss, msg)
	}
}

func (s *Server) scaleSetJobCompletedLocked(j *jobState) {
	ss := s.scaleSets[j.scaleSetID]
	if ss == nil {
		return
	}
	msg := s.jobMessage(j, "JobCompleted")
	msg["result"] = scaleSetResult(j.Conclusion)
	msg["runnerId"], msg["runnerName"] = j.RunnerID, j.RunnerName
	s.postLocked(ss, msg)
}

// scaleSetResult is a conclusion as the Actions service words it.
func scaleSetResult(conclusion string) string {
	switch conclusion {
	case "success":
		return "succeeded"
	case "failure":
		return "failed"
	case "cancelled":
		return "canceled"
	}
	return conclusion
}

// nextMessageLocked is what a poll after lastID gets: the first message
// not acknowledged with a greater ID, else a new one of up to
// maxMessagesPerBatch pending job messages, else nil. The caller holds s.mu.
func (s *Server) nextMessageLocked(ss *scaleSetState, lastID int) *scaleMessage {
	for _, m := range ss.msgs {
		if m.id > lastID {
			return m
		}
	}
	if len(ss.pending) == 0 {
		return nil
	}
	n := min(len(ss.pending), maxMessagesPerBatch)
	ss.nextMsgID++
	m := &scaleMessage{id: ss.nextMsgID, body: ss.pending[:n:n]}
	ss.pending = slices.Clone(ss.pending[n:])
	ss.msgs = append(ss.msgs, m)
	return m
}

// acquireLocked assigns the scale set's offered jobs among ids and returns
// the IDs it acquired. The caller holds s.mu.
func (s *Server) acquireLocked(ss *scaleSetState, ids []int64) []int64 {
	acquired := []int64{}
	for _, id := range ids {
		j := s.jobs[id]
		if j == nil || j.scaleSetID != ss.id || j.acquired || j.Status != JobQueued {
			continue
		}
		j.acquired = true
		acquired = append(acquired, id)
		s.postLocked(ss, s.jobMessage(j, "JobAssigned"))
	}
	s.dispatchLocked()
	return acquired
}

// deleteScaleSetLocked removes a scale set, its session and its runners'
// claim on jobs: its offered jobs go back to the queue. The caller holds
// s.mu.
func (s *Server) deleteScaleSetLocked(ss *scaleSetState) {
	if ss.session != nil {
		close(ss.session.wake)
		ss.session = nil
	}
	delete(s.scaleSets, ss.id)
	for _, id := range s.jobOrder {
		if j := s.jobs[id]; j.scaleSetID == ss.id && j.Status == JobQueued {
			j.scaleSetID, j.acquired = 0, false
			s.offerToScaleSetLocked(j)
		}
	}
	for _, r := range s.runners {
		if r.scaleSetID == ss.id && !r.busy {
			s.removeRunnerLocked(r)
		}
	}
}

// ---------------------------------------------------------------------------
// answers in the Actions service's shape

// actionsError is an error as the Actions service words it: a .NET
// exception's type name and message, which the client matches on.
func actionsError(status int, typeName, format string, args ...any) *apiError {
	e := errf(status, format, args...)
	e.actionsType = typeName
	return e
}

func itoa(n int) string { return itoa64(int64(n)) }

func itoa64(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// lapsedLocked reports whether ss's session was left by its holder: no
// poll waiting, and none for SessionIdleTimeout. The caller holds s.mu.
func (s *Server) lapsedLocked(ss *scaleSetState) bool {
	idle := s.opts.SessionIdleTimeout
	if idle <= 0 {
		idle = 2 * time.Minute
	}
	se := ss.session
	return se != nil && se.polling == 0 && s.clock.Now().Sub(se.lastSeen) >= idle
}

// sessionWait is how long a poll waits for a message before 202.
func (s *Server) sessionWait() time.Duration {
	if s.opts.MessagePollWait > 0 {
		return s.opts.MessagePollWait
	}
	return 50 * time.Second
}

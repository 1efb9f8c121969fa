package githubsim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

type orgState struct {
	login  string
	id     int64
	groups []*groupState
}

type groupState struct {
	id        int64
	name      string
	isDefault bool
}

type repoState struct {
	owner, name string
	id          int64
	org         *orgState // nil when the owner is a user
}

func (r *repoState) fullName() string { return r.owner + "/" + r.name }

type labelState struct {
	id   int64
	name string
	typ  string // "read-only" (added by GitHub or the runner) or "custom"
}

// runnerState is a registered runner and the process behind it.
type runnerState struct {
	id          int64
	name        string
	os, arch    string
	scope       string // lower-case "owner/repo" or "org"
	groupID     int64
	labels      []labelState
	ephemeral   bool
	jit         bool
	jitClientID string // the credential inside its JIT config
	scaleSetID  int    // the scale set it was generated for; 0 for none
	registered  time.Time

	running bool // run.sh was started and has not exited
	online  bool
	busy    bool
	jobID   int64
	done    chan struct{} // closed when the process exits or the runner is removed
	exited  bool
	removed bool
}

func (r *runnerState) status() string {
	if r.online {
		return "online"
	}
	return "offline"
}

func (r *runnerState) labelNames() []string {
	out := make([]string, len(r.labels))
	for i, l := range r.labels {
		out[i] = l.name
	}
	return out
}

// exit ends the runner's process, waking whoever waits on it.
func (r *runnerState) exit() {
	r.running, r.online = false, false
	if !r.exited {
		r.exited = true
		close(r.done)
	}
}

// Runner is a registered runner as the simulator holds it.
type Runner struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	// Scope is "owner/repo" or the organization, lower case.
	Scope string `json:"scope"`
	OS    string `json:"os"`
	// Status is "online" or "offline", as the runners API reports it.
	Status    string   `json:"status"`
	Busy      bool     `json:"busy"`
	Ephemeral bool     `json:"ephemeral"`
	JIT       bool     `json:"jit"`
	GroupID   int64    `json:"runner_group_id"`
	Labels    []string `json:"labels"`
	// JobID is the job it runs, 0 when idle.
	JobID int64 `json:"job_id,omitempty"`
	// Running: its process (run.sh) was started and has not exited.
	Running bool `json:"running"`
	// Removed: its registration is gone (deleted, or an ephemeral runner
	// finished its job); only RunRunner's answer reports such a runner.
	Removed bool `json:"removed,omitempty"`
	// RegisteredAt is when it was registered (config.sh or generate-jitconfig).
	RegisteredAt time.Time `json:"registered_at"`
}

func (r *runnerState) snapshot() Runner {
	return Runner{
		ID: r.id, Name: r.name, Scope: r.scope, OS: r.os, Status: r.status(), Busy: r.busy,
		Ephemeral: r.ephemeral, JIT: r.jit, GroupID: r.groupID, Labels: r.labelNames(),
		JobID: r.jobID, Running: r.running, Removed: r.removed, RegisteredAt: r.registered,
	}
}

// wire is the runner as the REST API returns it.
func (r *runnerState) wire() map[string]any {
	labels := make([]map[string]any, len(r.labels))
	for i, l := range r.labels {
		labels[i] = map[string]any{"id": l.id, "name": l.name, "type": l.typ}
	}
	return map[string]any{
		"id": r.id, "name": r.name, "os": r.os, "status": r.status(), "busy": r.busy,
		"ephemeral": r.ephemeral, "runner_group_id": r.groupID, "labels": labels,
	}
}

// addOrgLocked adds an organization with its default runner group.
func (s *Server) addOrgLocked(login string) *orgState {
	key := strings.ToLower(login)
	if o, ok := s.orgs[key]; ok {
		return o
	}
	s.nextID++
	o := &orgState{login: login, id: s.nextID, groups: []*groupState{{id: 1, name: "Default", isDefault: true}}}
	s.orgs[key] = o
	for _, r := range s.repos {
		if strings.EqualFold(r.owner, login) {
			r.org = o
		}
	}
	return o
}

func (s *Server) addRepoLocked(full string) error {
	owner, name, ok := strings.Cut(full, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("repository %q is not owner/name", full)
	}
	key := strings.ToLower(full)
	if _, exists := s.repos[key]; exists {
		return nil
	}
	s.nextID++
	s.repos[key] = &repoState{owner: owner, name: name, id: s.nextID, org: s.orgs[strings.ToLower(owner)]}
	return nil
}

// AddOrganization makes an organization exist (with its Default runner group).
func (s *Server) AddOrganization(login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addOrgLocked(login)
}

// AddRepository makes "owner/name" exist.
func (s *Server) AddRepository(fullName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.addRepoLocked(fullName); err != nil {
		return fmt.Errorf("githubsim: %w", err)
	}
	return nil
}

// AddRunnerGroup creates a runner group in an organization and returns its ID.
func (s *Server) AddRunnerGroup(org, name string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orgs[strings.ToLower(org)]
	if !ok {
		return 0, fmt.Errorf("githubsim: no organization %q", org)
	}
	for _, g := range o.groups {
		if strings.EqualFold(g.name, name) {
			return 0, fmt.Errorf("githubsim: organization %s already has a runner group %q", org, name)
		}
	}
	s.nextID++
	o.groups = append(o.groups, &groupState{id: s.nextID, name: name})
	return s.nextID, nil
}

// group finds a runner group of scope by ID (repositories have only the
// default group, ID 1). The caller holds s.mu.
func (s *Server) group(scope string, id int64) *groupState {
	if strings.Contains(scope, "/") {
		if id == 1 {
			return &groupState{id: 1, name: "Default", isDefault: true}
		}
		return nil
	}
	if o := s.orgs[scope]; o != nil {
		for _, g := range o.groups {
			if g.id == id {
				return g
			}
		}
	}
	return nil
}

func (s *Server) groupByName(scope, name string) *groupState {
	if name == "" {
		return s.group(scope, 1)
	}
	if strings.Contains(scope, "/") {
		if strings.EqualFold(name, "Default") {
			return s.group(scope, 1)
		}
		return nil
	}
	if o := s.orgs[scope]; o != nil {
		for _, g := range o.groups {
			if strings.EqualFold(g.name, name) {
				return g
			}
		}
	}
	return nil
}

// labelID gives a label name a stable ID, as GitHub does. The caller holds s.mu.
func (s *Server) labelID(name string) int64 {
	key := strings.ToLower(name)
	if id, ok := s.labelIDs[key]; ok {
		return id
	}
	s.nextID++
	s.labelIDs[key] = s.nextID
	return s.nextID
}

// makeLabels builds a runner's labels: the defaults (self-hosted, OS, arch)
// as read-only, then the custom ones, without duplicates.
func (s *Server) makeLabels(defaults, custom []string) []labelState {
	var out []labelState
	seen := map[string]bool{}
	add := func(name, typ string) {
		name = strings.TrimSpace(name)
		if name == "" || seen[strings.ToLower(name)] {
			return
		}
		seen[strings.ToLower(name)] = true
		out = append(out, labelState{id: s.labelID(name), name: name, typ: typ})
	}
	for _, l := range defaults {
		add(l, "read-only")
	}
	for _, l := range custom {
		add(l, "custom")
	}
	return out
}

// runnerInScope finds a runner by ID within scope. The caller holds s.mu.
func (s *Server) runnerInScope(scope string, id int64) *runnerState {
	if r := s.runners[id]; r != nil && r.scope == scope {
		return r
	}
	return nil
}

func (s *Server) runnerByName(scope, name string) *runnerState {
	for _, r := range s.runners {
		if r.scope == scope && strings.EqualFold(r.name, name) {
			return r
		}
	}
	return nil
}

// sortedRunners lists runners of scope ("" for all) by ID. The caller holds s.mu.
func (s *Server) sortedRunners(scope string) []*runnerState {
	var out []*runnerState
	for _, r := range s.runners {
		if scope == "" || r.scope == scope {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *runnerState) int { return int(a.id - b.id) })
	return out
}

// removeRunnerLocked deletes a registration; its process exits, as a real
// runner does when told its registration is gone.
func (s *Server) removeRunnerLocked(r *runnerState) {
	delete(s.runners, r.id)
	r.removed = true
	r.exit()
}

// Runners returns every registered runner, by ID.
func (s *Server) Runners() []Runner {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Runner
	for _, r := range s.sortedRunners("") {
		out = append(out, r.snapshot())
	}
	return out
}

// Runner returns one registered runner.
func (s *Server) Runner(id int64) (Runner, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runners[id]; r != nil {
		return r.snapshot(), true
	}
	return Runner{}, false
}

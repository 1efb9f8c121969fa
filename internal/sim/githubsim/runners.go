package githubsim

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// RegisterRequest is what config.sh sends to register a runner with a
// registration token.
type RegisterRequest struct {
	// URL is config.sh's --url: https://github.com/owner/repo or
	// https://github.com/org (any host; the path names the scope).
	URL string `json:"url"`
	// Token is a registration token for that scope.
	Token string `json:"token"`
	// Name must be unique in the scope unless Replace is set.
	Name string `json:"name"`
	// Labels are custom labels, added to self-hosted, the OS and the arch
	// (unless NoDefaultLabels).
	Labels          []string `json:"labels,omitempty"`
	NoDefaultLabels bool     `json:"no_default_labels,omitempty"`
	Ephemeral       bool     `json:"ephemeral,omitempty"`
	// RunnerGroup to join (organizations only); empty is Default.
	RunnerGroup string `json:"runner_group,omitempty"`
	WorkFolder  string `json:"work_folder,omitempty"`
	// Replace an existing runner of the same name.
	Replace bool `json:"replace,omitempty"`
	// OS ("linux", "windows", "macos") and Arch ("x64", "arm64", "arm"); default linux/x64.
	OS   string `json:"os,omitempty"`
	Arch string `json:"arch,omitempty"`
}

// RunRequest is what run.sh does: start a configured runner (by ID) or a
// just-in-time one (by its config).
type RunRequest struct {
	ID        int64  `json:"id,omitempty"`
	JITConfig string `json:"jitconfig,omitempty"`
	// Wait blocks until the runner's process exits: an ephemeral runner
	// after its job, any runner when stopped or deleted.
	Wait bool `json:"wait,omitempty"`
}

// RemoveRequest is config.sh remove: deregister a runner by name with a
// remove token.
type RemoveRequest struct {
	URL   string `json:"url"`
	Token string `json:"token"`
	Name  string `json:"name"`
}

// scopeFromURL reads the scope key ("owner/repo" or "org", lower case) from
// a runner URL. The caller holds s.mu.
func (s *Server) scopeFromURL(raw string) (string, *apiError) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Path == "" {
		return "", errf(http.StatusBadRequest, "Invalid URL %q: use https://github.com/owner/repo or https://github.com/org", raw)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch len(parts) {
	case 1:
		if _, ok := s.orgs[strings.ToLower(parts[0])]; ok {
			return strings.ToLower(parts[0]), nil
		}
	case 2:
		key := strings.ToLower(parts[0] + "/" + parts[1])
		if _, ok := s.repos[key]; ok {
			return key, nil
		}
	}
	return "", errf(http.StatusNotFound, "No repository or organization at %s", raw)
}

func osLabel(os string) string {
	switch strings.ToLower(os) {
	case "windows", "win":
		return "Windows"
	case "macos", "osx", "darwin":
		return "macOS"
	}
	return "Linux"
}

func archLabel(arch string) string {
	switch strings.ToLower(arch) {
	case "arm64", "aarch64":
		return "ARM64"
	case "arm":
		return "ARM"
	}
	return "X64"
}

// RegisterRunner registers a runner as config.sh does: offline until
// RunRunner starts it. Errors carry the HTTP status GitHub would give
// (StatusCode() int): 404 for a bad token or URL, 401 for an expired token,
// 409 for a taken name.
func (s *Server) RegisterRunner(req RegisterRequest) (Runner, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kit.Closed() {
		return Runner{}, errf(http.StatusServiceUnavailable, "githubsim: closed")
	}
	scope, aerr := s.scopeFromURL(req.URL)
	if aerr != nil {
		return Runner{}, aerr
	}
	if aerr := s.checkRegToken(req.Token, scope, false); aerr != nil {
		return Runner{}, aerr
	}
	if strings.TrimSpace(req.Name) == "" {
		return Runner{}, errf(http.StatusBadRequest, "A runner name is required")
	}
	g := s.groupByName(scope, req.RunnerGroup)
	if g == nil {
		return Runner{}, errf(http.StatusNotFound, "Could not find any self-hosted runner group named %q.", req.RunnerGroup)
	}
	if old := s.runnerByName(scope, req.Name); old != nil {
		if !req.Replace {
			return Runner{}, errf(http.StatusConflict, "A runner exists with the same name %s.", req.Name)
		}
		if old.busy {
			return Runner{}, errf(http.StatusUnprocessableEntity, "Runner %q is still running a job and cannot be replaced", old.name)
		}
		s.removeRunnerLocked(old)
	}
	var defaults []string
	if !req.NoDefaultLabels {
		defaults = []string{"self-hosted", osLabel(req.OS), archLabel(req.Arch)}
	}
	r := s.newRunnerLocked(scope, req.Name, g.id, s.makeLabels(defaults, req.Labels), req.Ephemeral)
	rt := s.regTokens[req.Token]
	rt.registered = append(rt.registered, req.Name)
	s.regTokens[req.Token] = rt
	if req.OS != "" {
		r.os = strings.ToLower(req.OS)
	}
	if req.Arch != "" {
		r.arch = strings.ToLower(req.Arch)
	}
	return r.snapshot(), nil
}

// RunRunner starts a runner's process as run.sh does: it comes online
// (after Options.RunnerStartDelay) and takes a queued job its labels satisfy.
// With Wait it returns when the process exits (or ctx ends), reporting the
// runner as it was then.
func (s *Server) RunRunner(ctx context.Context, req RunRequest) (Runner, error) {
	s.mu.Lock()
	if s.kit.Closed() {
		s.mu.Unlock()
		return Runner{}, errf(http.StatusServiceUnavailable, "githubsim: closed")
	}
	var r *runnerState
	if req.JITConfig != "" {
		var aerr *apiError
		if r, aerr = s.runnerForJIT(req.JITConfig); aerr != nil {
			s.mu.Unlock()
			return Runner{}, aerr
		}
	} else if r = s.runners[req.ID]; r == nil {
		s.mu.Unlock()
		return Runner{}, errf(http.StatusNotFound, "No runner with ID %d is registered", req.ID)
	} else if r.jit {
		// A JIT runner has no other way in than the credential its config
		// carries: an agent that lost or mangled the config's files must
		// fail here, as the real runner fails to authenticate.
		s.mu.Unlock()
		return Runner{}, errf(http.StatusUnauthorized, "The just-in-time runner %q authenticates with its JIT configuration's credentials, not by ID", r.name)
	}
	switch {
	case r.exited && r.jit:
		s.mu.Unlock()
		return Runner{}, errf(http.StatusConflict, "The just-in-time runner %q has already run", r.name)
	case r.exited:
		// A configured runner may be started again after it stopped.
		r.exited, r.done = false, make(chan struct{})
	}
	if !r.running {
		r.running = true
		start := func() {
			if r.running && !r.removed {
				r.online = true
				s.dispatchLocked()
			}
		}
		if d := s.opts.RunnerStartDelay; d > 0 {
			s.kit.After(d, start)
		} else {
			start()
		}
	}
	snap, done := r.snapshot(), r.done
	s.mu.Unlock()
	if !req.Wait {
		return snap, nil
	}
	select {
	case <-done:
	case <-ctx.Done():
		return Runner{}, ctx.Err()
	case <-s.kit.Closing():
		return Runner{}, errf(http.StatusServiceUnavailable, "githubsim: closed")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.snapshot(), nil
}

// StopRunner ends a runner's process (the machine powered off): it goes
// offline and stays registered. A job it was running fails.
func (s *Server) StopRunner(id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runners[id]
	if r == nil {
		return errf(http.StatusNotFound, "No runner with ID %d is registered", id)
	}
	s.killRunnerLocked(r, "failure")
	return nil
}

// killRunnerLocked ends runner r's process without deregistering it; its
// running job, if any, completes with conclusion. The runner is detached
// first, so the job's end neither deregisters it nor gives it another job.
// The caller holds s.mu.
func (s *Server) killRunnerLocked(r *runnerState, conclusion string) {
	jobID := r.jobID
	r.busy, r.jobID = false, 0
	r.exit()
	if j := s.jobs[jobID]; j != nil && j.Status == JobInProgress {
		s.completeJobLocked(j, conclusion)
	}
}

// RemoveRunner deregisters a runner as config.sh remove does, with a
// remove token. A runner running a job cannot be removed (422).
func (s *Server) RemoveRunner(req RemoveRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	scope, aerr := s.scopeFromURL(req.URL)
	if aerr != nil {
		return aerr
	}
	if aerr := s.checkRegToken(req.Token, scope, true); aerr != nil {
		return aerr
	}
	r := s.runnerByName(scope, req.Name)
	if r == nil {
		return errf(http.StatusNotFound, "No runner named %q is registered", req.Name)
	}
	if r.busy {
		return errf(http.StatusUnprocessableEntity, "Runner %q is still running a job", r.name)
	}
	s.removeRunnerLocked(r)
	return nil
}

// jitFiles is an encoded_jit_config: the files config.sh would have written,
// each base64-encoded.
type jitFiles struct {
	Runner         string `json:".runner"`
	Credentials    string `json:".credentials"`
	CredentialsRSA string `json:".credentials_rsaparams"`
}

// encodeJITConfig builds a config in GitHub's shape: base64 of a JSON object
// of base64-encoded files. .runner holds the runner settings (UTF-8 with a
// byte-order mark, PascalCase keys, string values, as the runner writes
// them); .credentials holds the client ID the simulator checks on run.
func (s *Server) encodeJITConfig(r *runnerState, g *groupState, workFolder string) (string, error) {
	bom := "\ufeff"
	settings, err := json.Marshal(map[string]string{
		"AgentId":       strconv.FormatInt(r.id, 10),
		"AgentName":     r.name,
		"PoolId":        strconv.FormatInt(g.id, 10),
		"PoolName":      g.name,
		"DisableUpdate": "True",
		"Ephemeral":     "True",
		"ServerUrl":     "https://pipelines.actions.githubusercontent.com/" + randomAlnum(50),
		"GitHubUrl":     s.kit.URL() + r.scope,
		"WorkFolder":    workFolder,
	})
	if err != nil {
		return "", err
	}
	creds, err := json.Marshal(map[string]any{
		"Scheme": "OAuth",
		"Data": map[string]string{
			"ClientId":                r.jitClientID,
			"AuthorizationUrl":        "https://vstoken.actions.githubusercontent.com/_apis/oauth2/token/" + simkit.RandomUUID(),
			"RequireFipsCryptography": "True",
		},
	})
	if err != nil {
		return "", err
	}
	rsaParams, err := json.Marshal(map[string]string{
		"d": base64.StdEncoding.EncodeToString(randomBytes(256)), "dp": base64.StdEncoding.EncodeToString(randomBytes(128)),
		"dq": base64.StdEncoding.EncodeToString(randomBytes(128)), "exponent": "AQAB",
		"inverseQ": base64.StdEncoding.EncodeToString(randomBytes(128)), "modulus": base64.StdEncoding.EncodeToString(randomBytes(256)),
		"p": base64.StdEncoding.EncodeToString(randomBytes(128)), "q": base64.StdEncoding.EncodeToString(randomBytes(128)),
	})
	if err != nil {
		return "", err
	}
	outer, err := json.Marshal(jitFiles{
		Runner:         base64.StdEncoding.EncodeToString(append([]byte(bom), settings...)),
		Credentials:    base64.StdEncoding.EncodeToString(creds),
		CredentialsRSA: base64.StdEncoding.EncodeToString(rsaParams),
	})
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(outer), nil
}

// runnerForJIT finds the runner a JIT config was generated for and checks
// its credential. The caller holds s.mu.
func (s *Server) runnerForJIT(encoded string) (*runnerState, *apiError) {
	invalid := errf(http.StatusUnauthorized, "The JIT configuration is invalid or was revoked")
	outer, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return nil, invalid
	}
	var files jitFiles
	if json.Unmarshal(outer, &files) != nil {
		return nil, invalid
	}
	settingsJSON, err1 := base64.StdEncoding.DecodeString(files.Runner)
	credsJSON, err2 := base64.StdEncoding.DecodeString(files.Credentials)
	if err := errors.Join(err1, err2); err != nil {
		return nil, invalid
	}
	var settings struct {
		AgentID string `json:"AgentId"`
	}
	var creds struct {
		Data struct {
			ClientID string `json:"ClientId"`
		} `json:"Data"`
	}
	if json.Unmarshal([]byte(strings.TrimPrefix(string(settingsJSON), "\ufeff")), &settings) != nil || json.Unmarshal(credsJSON, &creds) != nil {
		return nil, invalid
	}
	id, err := strconv.ParseInt(settings.AgentID, 10, 64)
	if err != nil {
		return nil, invalid
	}
	r := s.runners[id]
	if r == nil || !r.jit || r.jitClientID == "" || r.jitClientID != creds.Data.ClientID {
		return nil, invalid
	}
	return r, nil
}

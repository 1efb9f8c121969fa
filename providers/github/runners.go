package github

import (
	"context"
	"fmt"
	"strings"
	"time"

	gogithub "github.com/google/go-github/v60/github"

	"github.com/hyperfleet/hyperfleet/providers"
)

// RunnerService is what the runner pools need from GitHub; Client
// implements it against the REST API. Every call is idempotent where GitHub
// allows it: deleting a runner that is gone succeeds.
type RunnerService interface {
	// RegistrationToken returns a token config.sh registers runners with,
	// valid for an hour and for any number of runners.
	RegistrationToken(ctx context.Context, scope Scope) (Token, error)
	// RemoveToken returns a token config.sh remove deregisters runners with.
	RemoveToken(ctx context.Context, scope Scope) (Token, error)
	// GenerateJITConfig registers a runner and returns its just-in-time
	// configuration for run.sh --jitconfig; the runner is ephemeral.
	GenerateJITConfig(ctx context.Context, scope Scope, req JITConfigRequest) (JITConfig, error)
	// ListRunners returns every runner registered in scope, all pages.
	ListRunners(ctx context.Context, scope Scope) ([]Runner, error)
	// GetRunner returns one runner, or an error wrapping providers.ErrNotFound.
	GetRunner(ctx context.Context, scope Scope, id int64) (Runner, error)
	// DeleteRunner removes a runner's registration. A runner that is gone
	// is success; one running a job gives an error wrapping ErrRunnerBusy.
	DeleteRunner(ctx context.Context, scope Scope, id int64) error
	// ListRunnerGroups returns an organization's runner groups.
	ListRunnerGroups(ctx context.Context, org string) ([]RunnerGroup, error)
	// RunnerGroupID resolves a runner group name for scope ("" or "Default"
	// is the default group).
	RunnerGroupID(ctx context.Context, scope Scope, name string) (int64, error)
}

// Scope is where runners register: a repository when Repository is set
// (with Owner), else an organization.
type Scope struct {
	Owner        string
	Repository   string
	Organization string
}

// IsRepository reports whether runners register on a repository.
func (s Scope) IsRepository() bool { return s.Repository != "" }

// String is owner/repo or the organization.
func (s Scope) String() string { return s.path() }

func (s Scope) path() string {
	if s.IsRepository() {
		return s.Owner + "/" + s.Repository
	}
	return s.Organization
}

func (s Scope) validate() error {
	bad := func(v string) bool { return strings.ContainsAny(v, "/?#% \t\r\n") }
	switch {
	case s.Repository != "" && s.Owner == "":
		return providers.Permanent("InvalidScope", "spec.github.repository needs spec.github.owner", nil)
	case s.Repository == "" && s.Organization == "":
		return providers.Permanent("InvalidScope", "spec.github needs owner and repository, or organization", nil)
	case bad(s.Owner) || bad(s.Repository) || bad(s.Organization):
		return providers.Permanent("InvalidScope", fmt.Sprintf("%q is not a valid GitHub owner, repository or organization name", s.path()), nil)
	}
	return nil
}

// DefaultRunnerGroupID is the ID GitHub gives every organization's (and
// repository's) default runner group.
const DefaultRunnerGroupID int64 = 1

// Runner status values as GitHub reports them.
const (
	RunnerOnline  = "online"
	RunnerOffline = "offline"
)

// Runner is a self-hosted runner as GitHub reports it.
type Runner struct {
	ID   int64
	Name string
	OS   string
	// Status is "online" (the runner process is connected) or "offline".
	Status string
	// Busy is true while the runner runs a job.
	Busy   bool
	Labels []string
}

// Online reports whether the runner's process is connected to GitHub.
func (r Runner) Online() bool { return r.Status == RunnerOnline }

// RunnerGroup is an organization's runner group.
type RunnerGroup struct {
	ID         int64
	Name       string
	Default    bool
	Visibility string
}

// Token is a registration or remove token. It is a credential: String and
// GoString print only its expiry, so it never lands in a log by accident.
type Token struct {
	Value     string
	ExpiresAt time.Time
}

func (t Token) String() string {
	return "Token{redacted, expires " + t.ExpiresAt.UTC().Format(time.RFC3339) + "}"
}

// GoString implements fmt.GoStringer with the same redaction as String.
func (t Token) GoString() string { return t.String() }

// JITConfigRequest describes a runner registered just in time.
type JITConfigRequest struct {
	// Name of the runner, unique in its scope.
	Name string
	// Labels the runner has; empty means ["self-hosted"] (GitHub wants one).
	Labels []string
	// RunnerGroupID is the group it joins; 0 means the default group.
	RunnerGroupID int64
	// WorkFolder is relative to the runner's directory; empty means "_work".
	WorkFolder string
}

// JITConfig is a registered runner and the configuration its run.sh
// --jitconfig takes. Encoded is a credential: String and GoString redact it.
type JITConfig struct {
	Runner  Runner
	Encoded string
}

func (j JITConfig) String() string {
	return fmt.Sprintf("JITConfig{runner %d %q, config redacted}", j.Runner.ID, j.Runner.Name)
}

// GoString implements fmt.GoStringer with the same redaction as String.
func (j JITConfig) GoString() string { return j.String() }

// RegistrationToken creates a registration token for scope.
func (c *Client) RegistrationToken(ctx context.Context, scope Scope) (Token, error) {
	if err := scope.validate(); err != nil {
		return Token{}, err
	}
	var (
		t   *gogithub.RegistrationToken
		err error
	)
	if scope.IsRepository() {
		t, _, err = c.gh.Actions.CreateRegistrationToken(ctx, scope.Owner, scope.Repository)
	} else {
		t, _, err = c.gh.Actions.CreateOrganizationRegistrationToken(ctx, scope.Organization)
	}
	if err != nil {
		return Token{}, c.classify(opCreateRegistrationToken, scope, err)
	}
	return Token{Value: t.GetToken(), ExpiresAt: t.GetExpiresAt().Time}, nil
}

// RemoveToken creates a remove token for scope.
func (c *Client) RemoveToken(ctx context.Context, scope Scope) (Token, error) {
	if err := scope.validate(); err != nil {
		return Token{}, err
	}
	var (
		t   *gogithub.RemoveToken
		err error
	)
	if scope.IsRepository() {
		t, _, err = c.gh.Actions.CreateRemoveToken(ctx, scope.Owner, scope.Repository)
	} else {
		t, _, err = c.gh.Actions.CreateOrganizationRemoveToken(ctx, scope.Organization)
	}
	if err != nil {
		return Token{}, c.classify(opCreateRemoveToken, scope, err)
	}
	return Token{Value: t.GetToken(), ExpiresAt: t.GetExpiresAt().Time}, nil
}

// GenerateJITConfig registers an ephemeral runner and returns its config. A
// name already taken in scope gives an error wrapping providers.ErrNameTaken:
// the runner from an earlier call exists, so look it up (or delete it) rather
// than call again with the same name.
func (c *Client) GenerateJITConfig(ctx context.Context, scope Scope, req JITConfigRequest) (JITConfig, error) {
	if err := scope.validate(); err != nil {
		return JITConfig{}, err
	}
	if req.Name == "" {
		return JITConfig{}, providers.Permanent("InvalidRunnerName", "a just-in-time runner needs a name", nil)
	}
	body := &gogithub.GenerateJITConfigRequest{
		Name:          req.Name,
		RunnerGroupID: req.RunnerGroupID,
		Labels:        req.Labels,
	}
	if body.RunnerGroupID == 0 {
		body.RunnerGroupID = DefaultRunnerGroupID
	}
	if len(body.Labels) == 0 {
		body.Labels = []string{"self-hosted"}
	}
	work := req.WorkFolder
	if work == "" {
		work = "_work"
	}
	body.WorkFolder = &work
	var (
		j   *gogithub.JITRunnerConfig
		err error
	)
	if scope.IsRepository() {
		j, _, err = c.gh.Actions.GenerateRepoJITConfig(ctx, scope.Owner, scope.Repository, body)
	} else {
		j, _, err = c.gh.Actions.GenerateOrgJITConfig(ctx, scope.Organization, body)
	}
	if err != nil {
		return JITConfig{}, c.classify(opGenerateJITConfig, scope, err)
	}
	return JITConfig{Runner: runnerFrom(j.GetRunner()), Encoded: j.GetEncodedJITConfig()}, nil
}

// maxPages bounds pagination, in case a server keeps announcing a next page.
const maxPages = 1000

// ListRunners lists every runner in scope, 100 per request.
func (c *Client) ListRunners(ctx context.Context, scope Scope) ([]Runner, error) {
	if err := scope.validate(); err != nil {
		return nil, err
	}
	opts := &gogithub.ListOptions{PerPage: 100}
	var out []Runner
	for range maxPages {
		var (
			page *gogithub.Runners
			resp *gogithub.Response
			err  error
		)
		if scope.IsRepository() {
			page, resp, err = c.gh.Actions.ListRunners(ctx, scope.Owner, scope.Repository, opts)
		} else {
			page, resp, err = c.gh.Actions.ListOrganizationRunners(ctx, scope.Organization, opts)
		}
		if err != nil {
			return nil, c.classify(opListRunners, scope, err)
		}
		for _, r := range page.Runners {
			if r != nil {
				out = append(out, runnerFrom(r))
			}
		}
		if resp.NextPage == 0 || resp.NextPage <= opts.Page {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
	return out, nil
}

// GetRunner reads one runner.
func (c *Client) GetRunner(ctx context.Context, scope Scope, id int64) (Runner, error) {
	if err := scope.validate(); err != nil {
		return Runner{}, err
	}
	var (
		r   *gogithub.Runner
		err error
	)
	if scope.IsRepository() {
		r, _, err = c.gh.Actions.GetRunner(ctx, scope.Owner, scope.Repository, id)
	} else {
		r, _, err = c.gh.Actions.GetOrganizationRunner(ctx, scope.Organization, id)
	}
	if err != nil {
		return Runner{}, c.classify(opGetRunner, scope, err)
	}
	return runnerFrom(r), nil
}

// DeleteRunner removes a runner's registration; a runner already gone is
// success.
func (c *Client) DeleteRunner(ctx context.Context, scope Scope, id int64) error {
	if err := scope.validate(); err != nil {
		return err
	}
	var err error
	if scope.IsRepository() {
		_, err = c.gh.Actions.RemoveRunner(ctx, scope.Owner, scope.Repository, id)
	} else {
		_, err = c.gh.Actions.RemoveOrganizationRunner(ctx, scope.Organization, id)
	}
	err = c.classify(opDeleteRunner, scope, err)
	if isNotFound(err) {
		return nil
	}
	return err
}

// ListRunnerGroups lists an organization's runner groups, all pages.
func (c *Client) ListRunnerGroups(ctx context.Context, org string) ([]RunnerGroup, error) {
	scope := Scope{Organization: org}
	if err := scope.validate(); err != nil {
		return nil, err
	}
	opts := &gogithub.ListOrgRunnerGroupOptions{ListOptions: gogithub.ListOptions{PerPage: 100}}
	var out []RunnerGroup
	for range maxPages {
		page, resp, err := c.gh.Actions.ListOrganizationRunnerGroups(ctx, org, opts)
		if err != nil {
			return nil, c.classify(opListRunnerGroups, scope, err)
		}
		for _, g := range page.RunnerGroups {
			if g != nil {
				out = append(out, RunnerGroup{ID: g.GetID(), Name: g.GetName(), Default: g.GetDefault(), Visibility: g.GetVisibility()})
			}
		}
		if resp.NextPage == 0 || resp.NextPage <= opts.Page {
			break
		}
		opts.Page = resp.NextPage
	}
	c.groupsMu.Lock()
	c.groups[org] = cachedGroups{groups: out, fetched: c.clock.Now()}
	c.groupsMu.Unlock()
	return out, nil
}

// RunnerGroupID resolves a group name. The default group needs no request;
// other names are looked up in a listing at most groupCacheTTL old. Runner
// groups belong to organizations: a repository scope takes only the default.
func (c *Client) RunnerGroupID(ctx context.Context, scope Scope, name string) (int64, error) {
	if err := scope.validate(); err != nil {
		return 0, err
	}
	if name == "" || strings.EqualFold(name, "Default") {
		return DefaultRunnerGroupID, nil
	}
	if scope.IsRepository() {
		return 0, providers.Permanent("RunnerGroupNeedsOrganization",
			fmt.Sprintf("runner group %q: runner groups exist only for organization runners; clear spec.runnerGroup or register the pool on an organization", name), nil)
	}
	org := scope.Organization
	c.groupsMu.Lock()
	cached, ok := c.groups[org]
	c.groupsMu.Unlock()
	groups := cached.groups
	age := c.clock.Since(cached.fetched)
	if !ok || age > groupCacheTTL || (findGroup(groups, name) == 0 && age > groupMissTTL) {
		// A miss in a cached listing is checked against a fresh one (the
		// group may have been created a moment ago), but not on every call.
		var err error
		if groups, err = c.ListRunnerGroups(ctx, org); err != nil {
			return 0, err
		}
	}
	if id := findGroup(groups, name); id != 0 {
		return id, nil
	}
	return 0, providers.Permanent("RunnerGroupNotFound",
		fmt.Sprintf("organization %s has no runner group named %q: create it in the organization's Actions settings or fix spec.runnerGroup", org, name), nil)
}

// findGroup matches exactly first, then ignoring case as GitHub's names do.
func findGroup(groups []RunnerGroup, name string) int64 {
	for _, g := range groups {
		if g.Name == name {
			return g.ID
		}
	}
	for _, g := range groups {
		if strings.EqualFold(g.Name, name) {
			return g.ID
		}
	}
	return 0
}

func runnerFrom(r *gogithub.Runner) Runner {
	if r == nil {
		return Runner{}
	}
	out := Runner{ID: r.GetID(), Name: r.GetName(), OS: r.GetOS(), Status: r.GetStatus(), Busy: r.GetBusy()}
	for _, l := range r.Labels {
		if l != nil && l.GetName() != "" {
			out.Labels = append(out.Labels, l.GetName())
		}
	}
	return out
}

// LabelsMatch reports whether a runner with labels have can take a job that
// asks for want: GitHub requires every label of the job, ignoring case.
func LabelsMatch(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if strings.EqualFold(h, w) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

package webhook

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"strings"

	gogithub "github.com/google/go-github/v60/github"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

// maxLabels bounds what one job may carry; GitHub allows far fewer.
const maxLabels = 64

// Content types GitHub delivers with: JSON, or the UI's default, a form
// whose one field "payload" is the JSON. The signature covers the raw body
// either way.
const (
	contentJSON = "application/json"
	contentForm = "application/x-www-form-urlencoded"
)

// mediaType is the Content-Type without parameters ("; charset=utf-8"),
// which go-github compares verbatim.
func mediaType(header string) (string, error) {
	mt, _, err := mime.ParseMediaType(header)
	if err != nil {
		return "", fmt.Errorf("unreadable Content-Type %q", header)
	}
	if mt != contentJSON && mt != contentForm {
		return "", fmt.Errorf("unsupported Content-Type %q: GitHub sends %s or %s", mt, contentJSON, contentForm)
	}
	return mt, nil
}

// unverifiedPayload extracts the JSON of a body that is not yet verified,
// only to read which scope's secret must verify it.
func unverifiedPayload(mt string, body []byte) []byte {
	if mt != contentForm {
		return body
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil
	}
	return []byte(form.Get("payload"))
}

// Scope is who a delivery says it comes from: the owner (user or
// organization) of its repository, or the organization of an organization
// hook, and the repository's name. Lower case, as GitHub compares logins.
// It selects the secret that must verify the delivery.
type Scope struct {
	Owner, Repository string
}

// scopeOf reads the scope from a payload. A payload naming an organization
// other than its repository's owner is refused: GitHub never sends one, and
// it could otherwise pick one scope's secret while routing to another.
func scopeOf(payload []byte) (Scope, error) {
	var p struct {
		Repository *struct {
			Name  string `json:"name"`
			Owner *struct {
				Login string `json:"login"`
			} `json:"owner"`
		} `json:"repository"`
		Organization *struct {
			Login string `json:"login"`
		} `json:"organization"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return Scope{}, fmt.Errorf("payload is not JSON: %w", err)
	}
	var s Scope
	if p.Repository != nil {
		s.Repository = strings.ToLower(p.Repository.Name)
		if p.Repository.Owner != nil {
			s.Owner = strings.ToLower(p.Repository.Owner.Login)
		}
	}
	if p.Organization != nil && p.Organization.Login != "" {
		org := strings.ToLower(p.Organization.Login)
		if s.Owner != "" && s.Owner != org {
			return Scope{}, fmt.Errorf("payload names organization %q but its repository belongs to %q", org, s.Owner)
		}
		s.Owner = org
	}
	return s, nil
}

// toJobEvent turns go-github's parsed workflow_job into the provider's
// demand type. It refuses events without the fields routing needs, so a
// malformed delivery is answered 400 instead of being half-processed.
func toJobEvent(ev *gogithub.WorkflowJobEvent) (github.JobEvent, error) {
	wj, repo := ev.GetWorkflowJob(), ev.GetRepo()
	if wj == nil || wj.GetID() <= 0 {
		return github.JobEvent{}, fmt.Errorf("workflow_job payload has no workflow_job.id")
	}
	if repo.GetName() == "" {
		return github.JobEvent{}, fmt.Errorf("workflow_job payload has no repository")
	}
	if len(wj.Labels) > maxLabels {
		return github.JobEvent{}, fmt.Errorf("workflow_job has %d labels, more than %d", len(wj.Labels), maxLabels)
	}
	j := github.JobEvent{
		Action: github.JobAction(ev.GetAction()), ID: wj.GetID(), RunID: wj.GetRunID(),
		Labels: wj.Labels, Repository: repo.GetName(), Owner: repo.GetOwner().GetLogin(),
		Organization: ev.GetOrg().GetLogin(), RunnerName: wj.GetRunnerName(),
	}
	if j.Owner == "" {
		if owner, _, ok := strings.Cut(repo.GetFullName(), "/"); ok {
			j.Owner = owner
		}
	}
	// The repository's API URL is in the signed body (a header saying which
	// Enterprise Server sent it is not): it says which GitHub the job is on.
	if u, err := url.Parse(repo.GetURL()); err == nil && u.Host != "" {
		j.Host = strings.ToLower(u.Host)
	}
	return j, nil
}

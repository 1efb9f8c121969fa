package githubsim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // X-Hub-Signature is HMAC-SHA1 by GitHub's definition; receivers should check the SHA-256 one
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// hookID is the simulated App webhook's ID (X-GitHub-Hook-ID).
const hookID = 424242

// Delivery is one attempt to deliver a webhook event, as GitHub's
// "Recent Deliveries" shows it. A redelivery is a new Delivery with the same
// GUID.
type Delivery struct {
	ID         int64  `json:"id"`
	GUID       string `json:"guid"`
	Event      string `json:"event"`
	Action     string `json:"action"`
	JobID      int64  `json:"job_id"`
	Redelivery bool   `json:"redelivery"`
	// Attempted is true once the delivery was sent, or failed to be.
	Attempted bool `json:"attempted"`
	// StatusCode is the receiver's answer; 0 when none came.
	StatusCode int `json:"status_code"`
	// Error says why no answer came (no webhook URL, a dropped delivery,
	// a network error).
	Error string `json:"error,omitempty"`
	// SentAt is when the delivery left (or was dropped); DeliveredAt when
	// its answer came.
	SentAt      time.Time       `json:"sent_at,omitzero"`
	DeliveredAt time.Time       `json:"delivered_at,omitzero"`
	Payload     json.RawMessage `json:"payload"`

	lost bool // JobSpec.LoseDeliveries: attempted, never received
}

// SetWebhook points deliveries at url, signed with secret (empty: unsigned).
// It applies to deliveries sent from now on, redeliveries included.
func (s *Server) SetWebhook(url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webhookURL, s.webhookSecret = url, secret
}

// DropNextDeliveries makes the next n deliveries fail without reaching the
// receiver, as when GitHub cannot connect; they can be redelivered.
func (s *Server) DropNextDeliveries(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropNext = max(n, 0)
}

// Deliveries returns every delivery, oldest first.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.deliveries))
	for i, d := range s.deliveries {
		out[i] = *d
		out[i].Payload = bytes.Clone(d.Payload)
	}
	return out
}

// Redeliver sends delivery id's payload again, with the same GUID, and
// returns the new delivery's ID.
func (s *Server) Redeliver(id int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.deliveries {
		if d.ID == id {
			nd := s.enqueueLocked(d.Event, d.Action, d.JobID, d.Payload, d.GUID)
			nd.Redelivery = true
			return nd.ID, nil
		}
	}
	return 0, fmt.Errorf("githubsim: no delivery %d", id)
}

// enqueueJobEvent queues a workflow_job delivery describing j now. The
// caller holds s.mu.
func (s *Server) enqueueJobEvent(j *jobState, action string) {
	payload, err := json.Marshal(s.workflowJobPayload(j, action))
	if err != nil {
		return // maps of strings and numbers always encode
	}
	d := s.enqueueLocked("workflow_job", action, j.ID, payload, simkit.RandomUUID())
	d.lost = slices.Contains(j.lose, action)
}

func (s *Server) enqueueLocked(event, action string, jobID int64, payload []byte, guid string) *Delivery {
	s.nextDelivery++
	d := &Delivery{ID: s.nextDelivery, GUID: guid, Event: event, Action: action, JobID: jobID, Payload: payload}
	s.deliveries = append(s.deliveries, d)
	s.queue = append(s.queue, d)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return d
}

// deliveryTransport keeps an idle connection per delivery worker to the
// receiver, so concurrent deliveries do not each open a new one (Go's
// default keeps two per host).
func deliveryTransport(workers int) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = max(workers, t.MaxIdleConnsPerHost)
	return t
}

// deliveryWorker sends queued deliveries, oldest first, one at a time, until
// the server closes. Options.DeliveryConcurrency workers run at once: each
// that takes a delivery and leaves more queued wakes another, since a burst
// queued at once leaves a single wake-up.
func (s *Server) deliveryWorker(client *http.Client) {
	for {
		select {
		case <-s.kit.Closing():
			return
		case <-s.wake:
		}
		for {
			s.mu.Lock()
			if s.kit.Closed() || len(s.queue) == 0 {
				s.mu.Unlock()
				break
			}
			d := s.queue[0]
			s.queue = s.queue[1:]
			if len(s.queue) > 0 {
				select {
				case s.wake <- struct{}{}:
				default:
				}
			}
			url, secret := s.webhookURL, s.webhookSecret
			drop := d.lost
			if !drop && s.dropNext > 0 {
				drop = true
				s.dropNext--
			}
			d.SentAt = s.clock.Now().UTC()
			s.mu.Unlock()

			var status int
			var errText string
			switch {
			case drop:
				errText = "simulated delivery failure: the receiver could not be reached"
			case url == "":
				errText = "no webhook URL configured"
			default:
				status, errText = s.send(s.kit.Context(), client, url, secret, d)
			}
			s.mu.Lock()
			d.Attempted, d.StatusCode, d.Error, d.DeliveredAt = true, status, errText, s.clock.Now().UTC()
			s.mu.Unlock()
		}
	}
}

// send POSTs one delivery with GitHub's headers and signatures.
func (s *Server) send(ctx context.Context, client *http.Client, url, secret string, d *Delivery) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Payload))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/5a0e8f1")
	req.Header.Set("X-GitHub-Event", d.Event)
	req.Header.Set("X-GitHub-Delivery", d.GUID)
	req.Header.Set("X-GitHub-Hook-ID", strconv.Itoa(hookID))
	req.Header.Set("X-GitHub-Hook-Installation-Target-Type", "integration")
	req.Header.Set("X-GitHub-Hook-Installation-Target-ID", strconv.FormatInt(s.opts.AppID, 10))
	if secret != "" {
		req.Header.Set("X-Hub-Signature-256", Sign(secret, d.Payload))
		m := hmac.New(sha1.New, []byte(secret))
		m.Write(d.Payload)
		req.Header.Set("X-Hub-Signature", "sha1="+hex.EncodeToString(m.Sum(nil)))
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
	_ = res.Body.Close()
	return res.StatusCode, ""
}

// Sign returns the X-Hub-Signature-256 value of body under secret:
// "sha256=" and the hex HMAC-SHA256.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// workflowJobPayload is a workflow_job event as GitHub sends it. The caller
// holds s.mu.
func (s *Server) workflowJobPayload(j *jobState, action string) map[string]any {
	api, web := s.urls()
	repo := j.repo
	full := repo.fullName()
	job := s.jobWire(j)
	ownerType := "User"
	if repo.org != nil {
		ownerType = "Organization"
	}
	owner := map[string]any{
		"login": repo.owner, "id": ownerID(repo), "node_id": "O_kgDO" + strconv.FormatInt(ownerID(repo), 36),
		"type": ownerType, "site_admin": false,
		"url": api + "/users/" + repo.owner, "html_url": web + "/" + repo.owner,
	}
	payload := map[string]any{
		"action":       action,
		"workflow_job": job,
		"repository": map[string]any{
			"id": repo.id, "node_id": "R_kgDO" + strconv.FormatInt(repo.id, 36), "name": repo.name, "full_name": full,
			"private": false, "owner": owner, "html_url": web + "/" + full, "url": api + "/repos/" + full,
			"default_branch": "main", "visibility": "public", "fork": false,
		},
		"sender": map[string]any{
			"login": "octocat", "id": 583231, "node_id": "MDQ6VXNlcjU4MzIzMQ==", "type": "User", "site_admin": false,
		},
		"installation": map[string]any{
			"id": s.opts.InstallationID, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u" + strconv.FormatInt(s.opts.InstallationID, 10),
		},
	}
	if repo.org != nil {
		payload["organization"] = map[string]any{
			"login": repo.org.login, "id": repo.org.id, "node_id": "O_kgDO" + strconv.FormatInt(repo.org.id, 36),
			"url": api + "/orgs/" + repo.org.login, "description": "",
		}
	}
	return payload
}

func ownerID(repo *repoState) int64 {
	if repo.org != nil {
		return repo.org.id
	}
	return 1000 + int64(len(repo.owner))
}

// urls are the API and web base URLs the payloads link to.
func (s *Server) urls() (api, web string) {
	api = strings.TrimSuffix(s.kit.URL(), "/")
	if api == "" {
		api = "https://api.github.com"
	}
	return api, api
}

// jobWire is a workflow job as GitHub's REST API and workflow_job payloads
// show it. The caller holds s.mu.
func (s *Server) jobWire(j *jobState) map[string]any {
	api, web := s.urls()
	full := j.repo.fullName()
	ts := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.UTC().Format(time.RFC3339)
	}
	job := map[string]any{
		"id":                j.ID,
		"run_id":            j.RunID,
		"workflow_name":     j.Workflow,
		"head_branch":       "main",
		"run_url":           fmt.Sprintf("%s/repos/%s/actions/runs/%d", api, full, j.RunID),
		"run_attempt":       1,
		"node_id":           "CR_kwDO" + strconv.FormatInt(j.ID, 36),
		"head_sha":          j.headSHA,
		"url":               fmt.Sprintf("%s/repos/%s/actions/jobs/%d", api, full, j.ID),
		"html_url":          fmt.Sprintf("%s/%s/actions/runs/%d/job/%d", web, full, j.RunID, j.ID),
		"status":            j.Status,
		"conclusion":        nil,
		"created_at":        ts(j.CreatedAt),
		"started_at":        ts(j.CreatedAt),
		"completed_at":      nil,
		"name":              j.Name,
		"steps":             []any{},
		"check_run_url":     fmt.Sprintf("%s/repos/%s/check-runs/%d", api, full, j.ID),
		"labels":            append([]string{}, j.Labels...),
		"runner_id":         nil,
		"runner_name":       nil,
		"runner_group_id":   nil,
		"runner_group_name": nil,
	}
	if j.RunnerID != 0 {
		job["started_at"] = ts(j.StartedAt)
		job["runner_id"] = j.RunnerID
		job["runner_name"] = j.RunnerName
		job["runner_group_id"] = j.groupID
		job["runner_group_name"] = j.groupName
	}
	if j.Status == JobCompleted {
		job["conclusion"] = j.Conclusion
		job["completed_at"] = ts(j.CompletedAt)
		job["steps"] = []any{map[string]any{
			"name": "Run make", "status": "completed", "conclusion": j.Conclusion, "number": 1,
			"started_at": ts(j.StartedAt), "completed_at": ts(j.CompletedAt),
		}}
	}
	return job
}

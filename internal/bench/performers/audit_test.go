package performers

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// request is one audit event of the operator's: what it asked of the API
// server and when.
type request struct {
	Verb     string    `json:"verb"`
	Received time.Time `json:"requestReceivedTimestamp"`
	Object   struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	// Body is the request's body, logged for status writes only.
	Body json.RawMessage `json:"requestObject,omitempty"`
}

// write tells a request that changes something (what etcd must store).
func (r request) write() bool {
	switch r.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// kind is the request's verb and resource, e.g. "patch performers/status".
func (r request) kind() string {
	res := r.Object.Resource
	if r.Object.Subresource != "" {
		res += "/" + r.Object.Subresource
	}
	return r.Verb + " " + res
}

// readAudit reads every logged request from the audit log: the
// operator's, and everyone's writes. The policy
// logs one event per request, at ResponseComplete; a watch still open is
// not in it yet, which only undercounts watches, never writes.
func readAudit(path string) ([]request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []request
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 16<<20)
	for s.Scan() {
		var r request
		if err := json.Unmarshal(s.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		out = append(out, r)
	}
	return out, s.Err()
}

// byUser keeps the requests of one user.
func byUser(reqs []request, user string) []request {
	var out []request
	for _, r := range reqs {
		if r.User.Username == user {
			out = append(out, r)
		}
	}
	return out
}

// writersBetween counts writes received in [from, to) by user.
func writersBetween(reqs []request, from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, r := range reqs {
		if r.write() && !r.Received.Before(from) && r.Received.Before(to) {
			out[r.User.Username]++
		}
	}
	return out
}

// firstBody is the body of the first write with one received in [from, to):
// what an idle write changed.
func firstBody(reqs []request, from, to time.Time) string {
	for _, r := range reqs {
		if r.write() && len(r.Body) > 0 && !r.Received.Before(from) && r.Received.Before(to) {
			return r.Object.Name + ": " + string(r.Body)
		}
	}
	return ""
}

// between counts requests received in [from, to), and the writes among them.
func between(reqs []request, from, to time.Time) (all, writes int, byKind map[string]int) {
	byKind = map[string]int{}
	for _, r := range reqs {
		if r.Received.Before(from) || !r.Received.Before(to) {
			continue
		}
		all++
		if r.write() {
			writes++
			byKind[r.kind()]++
		}
	}
	return all, writes, byKind
}

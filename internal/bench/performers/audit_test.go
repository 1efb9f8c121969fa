package performers

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"time"
)

// request is one audit event of the operator's: what it asked of the API
// server and when.
type request struct {
	Verb string `json:"verb"`
	// URI is the request's path and query: a read's query tells an
	// informer's from a direct one (readClass).
	URI      string    `json:"requestURI"`
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

// Classes of a read (readClass).
const (
	// readWatch: a watch, which keeps an informer's cache current.
	readWatch = "watch"
	// readInformerList: an informer's list, which fills its cache.
	readInformerList = "informer list"
	// readDirect: a read past the cache, answered from etcd.
	readDirect = "direct"
)

// readClass tells what kind of read a request is, "" for a write or a
// request about no object (discovery: /api, /apis, /version).
//
//   - readWatch: verb watch (a list with watch=true is logged so). The
//     informers behind the operator's cache open these.
//   - readInformerList: a list that names a resourceVersion, or asks for
//     initial events. client-go's reflector, behind every informer, lists
//     with resourceVersion=0 (or the last version it saw) and so is served
//     from the API server's watch cache; a streaming list is a watch with
//     sendInitialEvents.
//   - readDirect: any other get or list. A read through the manager's
//     APIReader, or any client without a cache, names no resourceVersion,
//     asking for the latest: a quorum read of etcd, one per request. These
//     are what the operator pays per object; the issue wants none on a
//     Performer's way to Ready.
func (r request) readClass() string {
	if r.Object.Resource == "" {
		return ""
	}
	switch r.Verb {
	case "watch":
		return readWatch
	case "get", "list":
	default:
		return ""
	}
	u, err := url.Parse(r.URI)
	if err != nil {
		return readDirect
	}
	q := u.Query()
	if r.Verb == "list" && (q.Has("resourceVersion") || q.Has("sendInitialEvents")) {
		return readInformerList
	}
	return readDirect
}

// reads counts the reads received in [from, to) by class, and the direct
// ones by verb and resource ("get services").
func reads(reqs []request, from, to time.Time) (byClass, direct map[string]int) {
	byClass, direct = map[string]int{}, map[string]int{}
	for _, r := range reqs {
		if r.Received.Before(from) || !r.Received.Before(to) {
			continue
		}
		class := r.readClass()
		if class == "" {
			continue
		}
		byClass[class]++
		if class == readDirect {
			direct[r.kind()]++
		}
	}
	return byClass, direct
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

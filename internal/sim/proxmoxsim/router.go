package proxmoxsim

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// reqCtx carries one request through the pipeline.
type reqCtx struct {
	r      *http.Request
	method string
	path   string // below /api2/json
	op     Operation
	vars   map[string]string // path variables
	params map[string]string // query and body parameters
	user   string
	// taskFault, when set, is the exit status an injected fault forces on
	// the task this request creates.
	taskFault string
	// taskWarnings, when set, makes the task this request creates end
	// "WARNINGS: <n>".
	taskWarnings int
}

type handlerFunc func(s *Server, rc *reqCtx) (any, *apiError)

type route struct {
	method  string
	segs    []string
	op      Operation
	h       handlerFunc
	rawBody bool // the handler reads the body itself (multipart upload)
}

var routes = buildRoutes()

func buildRoutes() []route {
	r := func(method, pattern string, op Operation, h handlerFunc) route {
		return route{method: method, segs: strings.Split(strings.Trim(pattern, "/"), "/"), op: op, h: h}
	}
	list := []route{
		r("GET", "/version", OpVersion, (*Server).handleVersion),
		r("POST", "/access/ticket", OpTicket, (*Server).handleTicket),
		r("GET", "/nodes", OpNodes, (*Server).handleNodes),
		r("GET", "/nodes/{node}", OpNodeIndex, (*Server).handleNodeIndex),
		r("GET", "/nodes/{node}/status", OpNodeStatus, (*Server).handleNodeStatus),
		r("GET", "/nodes/{node}/version", OpNodeVersion, (*Server).handleVersion),
		r("GET", "/nodes/{node}/qemu", OpListVMs, (*Server).handleListVMs),
		r("POST", "/nodes/{node}/qemu", OpCreateVM, (*Server).handleCreateVM),
		r("GET", "/nodes/{node}/qemu/{vmid}", OpVMIndex, (*Server).handleVMIndex),
		r("DELETE", "/nodes/{node}/qemu/{vmid}", OpDelete, (*Server).handleDelete),
		r("GET", "/nodes/{node}/qemu/{vmid}/config", OpConfigGet, (*Server).handleConfigGet),
		r("POST", "/nodes/{node}/qemu/{vmid}/config", OpConfigSet, (*Server).handleConfigSet),
		r("PUT", "/nodes/{node}/qemu/{vmid}/config", OpConfigSet, (*Server).handleConfigSet),
		r("GET", "/nodes/{node}/qemu/{vmid}/status/current", OpVMStatus, (*Server).handleVMStatus),
		r("POST", "/nodes/{node}/qemu/{vmid}/status/start", OpStart, (*Server).handleStart),
		r("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown", OpShutdown, (*Server).handleShutdown),
		r("POST", "/nodes/{node}/qemu/{vmid}/status/stop", OpStop, (*Server).handleStop),
		r("POST", "/nodes/{node}/qemu/{vmid}/status/reboot", OpReboot, (*Server).handleReboot),
		r("POST", "/nodes/{node}/qemu/{vmid}/clone", OpClone, (*Server).handleClone),
		r("PUT", "/nodes/{node}/qemu/{vmid}/resize", OpResize, (*Server).handleResize),
		r("POST", "/nodes/{node}/qemu/{vmid}/template", OpTemplate, (*Server).handleTemplate),
		r("GET", "/nodes/{node}/qemu/{vmid}/agent/{command}", OpAgent, (*Server).handleAgent),
		r("POST", "/nodes/{node}/qemu/{vmid}/agent/{command}", OpAgent, (*Server).handleAgent),
		r("GET", "/nodes/{node}/tasks", OpTaskList, (*Server).handleTaskList),
		r("GET", "/nodes/{node}/tasks/{upid}/status", OpTaskStatus, (*Server).handleTaskStatus),
		r("GET", "/nodes/{node}/tasks/{upid}/log", OpTaskLog, (*Server).handleTaskLog),
		r("GET", "/nodes/{node}/storage", OpStorageList, (*Server).handleStorageList),
		r("GET", "/nodes/{node}/storage/{storage}/status", OpStorageStatus, (*Server).handleStorageStatus),
		r("GET", "/nodes/{node}/storage/{storage}/content", OpStorageContent, (*Server).handleStorageContent),
		r("GET", "/nodes/{node}/storage/{storage}/content/{volume...}", OpVolumeGet, (*Server).handleVolumeGet),
		r("DELETE", "/nodes/{node}/storage/{storage}/content/{volume...}", OpVolumeDelete, (*Server).handleVolumeDelete),
		r("GET", "/cluster/status", OpClusterStatus, (*Server).handleClusterStatus),
		r("GET", "/cluster/resources", OpClusterResources, (*Server).handleClusterResources),
		r("GET", "/cluster/nextid", OpNextID, (*Server).handleNextID),
		r("GET", "/cluster/tasks", OpClusterTasks, (*Server).handleClusterTasks),
	}
	up := r("POST", "/nodes/{node}/storage/{storage}/upload", OpUpload, (*Server).handleUpload)
	up.rawBody = true
	return append(list, up)
}

// matchRoute finds the route for method and path.
func matchRoute(method, path string) (*route, map[string]string) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i := range routes {
		rr := &routes[i]
		if rr.method != method {
			continue
		}
		if v, ok := matchSegs(rr.segs, segs); ok {
			return rr, v
		}
	}
	return nil, nil
}

func matchSegs(pattern, segs []string) (map[string]string, bool) {
	vars := map[string]string{}
	for i, p := range pattern {
		if strings.HasSuffix(p, "...}") {
			if i >= len(segs) {
				return nil, false
			}
			rest := strings.Join(segs[i:], "/")
			if rest == "" {
				return nil, false
			}
			vars[strings.TrimSuffix(strings.TrimPrefix(p, "{"), "...}")] = rest
			return vars, true
		}
		if i >= len(segs) {
			return nil, false
		}
		if strings.HasPrefix(p, "{") {
			if segs[i] == "" {
				return nil, false
			}
			vars[strings.Trim(p, "{}")] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	if len(pattern) != len(segs) {
		return nil, false
	}
	return vars, true
}

// ServeHTTP answers one API request: faults first, then the API latency,
// authentication, the node's reachability and finally the operation.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.kit.Enter() {
		s.fail(w, r, errf(http.StatusServiceUnavailable, "server closed"))
		return
	}
	defer s.kit.Leave()

	if !strings.HasPrefix(r.URL.Path, apiPrefix+"/") && r.URL.Path != apiPrefix {
		s.fail(w, r, errf(http.StatusNotFound, "Not found"))
		return
	}
	rel := strings.TrimPrefix(r.URL.Path, apiPrefix)
	if rel == "" {
		rel = "/"
	}
	rt, vars := matchRoute(r.Method, rel)
	op := OpUnknown
	if rt != nil {
		op = rt.op
	}

	s.mu.Lock()
	s.opCounts[op]++
	s.reqCounts[r.Method+" "+rel]++
	apiLatency := s.lat.API
	s.mu.Unlock()

	rc := &reqCtx{r: r, method: r.Method, path: rel, op: op, vars: vars}
	if fault, ok := s.takeFault(r.Method, rel, op); ok && !s.applyFault(w, rc, fault) {
		return
	}
	if !s.kit.Sleep(r.Context(), apiLatency) {
		simkit.DropConnection(w)
		return
	}
	if rt == nil {
		s.fail(w, r, errf(http.StatusNotImplemented, "Method '%s %s' not implemented", r.Method, rel))
		return
	}

	if op != OpTicket {
		s.mu.Lock()
		user, aerr := s.authenticate(r)
		s.mu.Unlock()
		if aerr != nil {
			s.fail(w, r, aerr)
			return
		}
		rc.user = user
	}
	if node, ok := vars["node"]; ok {
		s.mu.Lock()
		aerr := s.checkNode(node)
		s.mu.Unlock()
		if aerr != nil {
			s.fail(w, r, aerr)
			return
		}
	}
	if !rt.rawBody {
		params, perr := parseParams(r)
		if perr != nil {
			s.fail(w, r, perr)
			return
		}
		rc.params = params
	}
	data, aerr := rt.h(s, rc)
	if aerr != nil {
		s.fail(w, r, aerr)
		return
	}
	if upid, ok := data.(string); ok && rc.taskWarnings > 0 {
		s.mu.Lock()
		if t := s.tasks[upid]; t != nil {
			t.warnings = rc.taskWarnings
		}
		s.mu.Unlock()
	}
	writeData(w, data)
}

// applyFault acts out an injected fault; it reports whether the request is
// still to be served (after a delay, or with a task fault armed).
func (s *Server) applyFault(w http.ResponseWriter, rc *reqCtx, fault Fault) bool {
	r := rc.r
	switch fault.Action {
	case FaultHTTPError:
		e := &apiError{}
		e.status, e.msg = simkit.DefaultError(fault.Status, fault.Message)
		switch e.status {
		case 400, 401, 403, 500, 501:
		default:
			e.noBody = true
		}
		if fault.Body != "" {
			b := fault.Body
			e.rawBody = &b
		}
		s.fail(w, r, e)
		return false
	case FaultLockError:
		msg := fault.Message
		if msg == "" {
			msg = "VM is locked (clone)"
		}
		s.fail(w, r, failf("%s", msg))
		return false
	case FaultDrop:
		simkit.DropConnection(w)
		return false
	case FaultHang:
		s.kit.Hang(r.Context())
		simkit.DropConnection(w)
		return false
	case FaultDelay:
		if !s.kit.Sleep(r.Context(), fault.Delay) {
			simkit.DropConnection(w)
			return false
		}
	case FaultTaskWarnings:
		rc.taskWarnings = max(fault.Count, 1)
	case FaultTaskFail:
		rc.taskFault = fault.Message
		if rc.taskFault == "" {
			rc.taskFault = "injected task failure"
		}
	}
	return true
}

// fail answers with e after draining a small unread request body, so that
// closing the connection after the answer cannot reset it before the
// client has read the answer.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, e *apiError) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	}
	writeError(w, e)
}

// checkNode answers like pveproxy for unknown or unreachable nodes. The
// caller must hold s.mu.
func (s *Server) checkNode(node string) *apiError {
	n, ok := s.nodes[node]
	if !ok {
		return failf("hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", node, node)
	}
	if !n.online {
		return &apiError{status: 595, msg: "No route to host", noBody: true}
	}
	return nil
}

// parseParams merges query parameters and a JSON or form-encoded body into
// one string map, normalising JSON numbers and booleans the way Proxmox's
// schema checker sees them.
func parseParams(r *http.Request) (map[string]string, *apiError) {
	params := map[string]string{}
	for k, v := range r.URL.Query() {
		if len(v) > 0 {
			params[k] = v[len(v)-1]
		}
	}
	if r.Body == nil {
		return params, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return nil, errf(http.StatusBadRequest, "error reading request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return params, nil
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, errf(http.StatusBadRequest, "invalid JSON in request body: %v", err)
		}
		for k, v := range m {
			if s, ok := jsonParam(v); ok {
				params[k] = s
			}
		}
	default:
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, errf(http.StatusBadRequest, "invalid form body: %v", err)
		}
		for k, v := range vals {
			if len(v) > 0 {
				params[k] = v[len(v)-1]
			}
		}
	}
	return params, nil
}

func jsonParam(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case bool:
		if x {
			return "1", true
		}
		return "0", true
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10), true
		}
		return strconv.FormatFloat(x, 'f', -1, 64), true
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return "", false
		}
		return string(b), true
	}
}

// ---------------------------------------------------------------------------
// request statistics

// Stats returns how many requests each operation received (including ones
// answered by faults or refused for authentication).
func (s *Server) Stats() map[Operation]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.opCounts)
}

// RequestCount counts requests whose method equals method (empty matches
// any) and whose path below /api2/json matches the regular expression
// pathPattern, e.g. RequestCount("POST", `/qemu/\d+/clone$`). It panics on
// an invalid pattern.
func (s *Server) RequestCount(method, pathPattern string) int {
	re := regexp.MustCompile(pathPattern)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, c := range s.reqCounts {
		m, p, _ := strings.Cut(k, " ")
		if (method == "" || m == method) && re.MatchString(p) {
			n += c
		}
	}
	return n
}

// ResetStats zeroes the request counters.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opCounts = map[Operation]int{}
	s.reqCounts = map[string]int{}
}

// vmidVar parses the {vmid} path variable.
func vmidVar(rc *reqCtx) (int, *apiError) {
	return parseVMID("vmid", rc.vars["vmid"])
}

func parseVMID(field, v string) (int, *apiError) {
	n, err := strconv.Atoi(v)
	if err != nil || !isDigits(v) {
		return 0, paramErr(field, "invalid format - value does not look like a valid VM ID")
	}
	if n < 100 || n > 999999999 {
		return 0, paramErr(field, fmt.Sprintf("value must have a minimum value of 100 and a maximum of 999999999 (got %d)", n))
	}
	return n, nil
}

package proxmoxsim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// maxTasks bounds the task history kept in memory; the oldest finished
// tasks are forgotten first, as Proxmox rotates its task index.
const maxTasks = 20000

type taskState struct {
	upid    string
	node    string
	typ     string
	id      string
	user    string
	pid     int
	pstart  uint64
	start   time.Time
	end     time.Time
	running bool
	exit    string
	// warnings makes a successful task end "WARNINGS: <n>" (an injected
	// FaultTaskWarnings).
	warnings int
	log      []string
}

func (t *taskState) info() TaskInfo {
	return TaskInfo{UPID: t.upid, Node: t.node, Type: t.typ, ID: t.id, User: t.user,
		Running: t.running, ExitStatus: t.exit, Start: t.start, End: t.end}
}

// owner returns the user and token a task is listed with once Proxmox
// converts a token's task: an API token "user@realm!name" becomes user
// "user@realm" and tokenid "name" (pve-manager PVE::API2::Tasks
// $convert_token_task, PVE::API2::Cluster's tasks); "" for a user's task.
func (t *taskState) owner() (user, tokenid string) {
	user, tokenid, _ = strings.Cut(t.user, "!")
	return user, tokenid
}

// statusJSON is the body of GET /nodes/{node}/tasks/{upid}/status, which
// converts a token's task (pve-manager PVE::API2::Tasks read_task_status).
func (t *taskState) statusJSON() map[string]any {
	m := map[string]any{
		"upid":      t.upid,
		"node":      t.node,
		"pid":       t.pid,
		"pstart":    t.pstart,
		"starttime": t.start.Unix(),
		"type":      t.typ,
		"id":        t.id,
		"status":    "running",
	}
	t.putUser(m, true)
	if !t.running {
		m["status"] = "stopped"
		m["exitstatus"] = t.exit
	}
	return m
}

func (t *taskState) putUser(m map[string]any, convert bool) {
	user, token := t.owner()
	if !convert || token == "" {
		m["user"] = t.user
		return
	}
	m["user"], m["tokenid"] = user, token
}

// listUser is the user a node's listing shows, and its userfilter matches:
// a running task comes from Proxmox's active-task file, whose rows the
// listing does not convert, so a token's running task shows the whole token
// as user; an archived one shows the converted user (pve-manager
// PVE::API2::Tasks node_tasks).
func (t *taskState) listUser() string {
	if t.running {
		return t.user
	}
	user, _ := t.owner()
	return user
}

// nodeListJSON is one row of GET /nodes/{node}/tasks. A running task's
// status is "RUNNING" (node_tasks sets it for active rows that have none);
// an ended one's is its exit status.
func (t *taskState) nodeListJSON() map[string]any {
	m := map[string]any{
		"upid":      t.upid,
		"node":      t.node,
		"pid":       t.pid,
		"pstart":    t.pstart,
		"starttime": t.start.Unix(),
		"type":      t.typ,
		"id":        t.id,
		"status":    "RUNNING",
	}
	t.putUser(m, !t.running)
	if !t.running {
		m["status"] = t.exit
		m["endtime"] = t.end.Unix()
	}
	return m
}

// clusterListJSON is one row of GET /cluster/tasks: the nodes' active-task
// lists as pvestatd broadcasts them (pve-common
// PVE::RESTEnvironment::active_workers drops pstart from every row and pid
// from ended ones), every token task converted. A running task has no
// status and no end time.
func (t *taskState) clusterListJSON() map[string]any {
	m := map[string]any{
		"upid":      t.upid,
		"node":      t.node,
		"starttime": t.start.Unix(),
		"type":      t.typ,
		"id":        t.id,
		"saved":     "0",
	}
	t.putUser(m, true)
	if t.running {
		m["pid"] = t.pid
	} else {
		m["status"] = t.exit
		m["endtime"] = t.end.Unix()
		m["saved"] = "1"
	}
	return m
}

// newTask registers a running task. The caller must hold s.mu.
func (s *Server) newTask(node, typ, id, user string) *taskState {
	now := time.Now()
	s.pstart += 137
	t := &taskState{
		node:    node,
		typ:     typ,
		id:      id,
		user:    user,
		pid:     s.nextProcessID(),
		pstart:  s.pstart,
		start:   now,
		running: true,
	}
	// UPID:{node}:{pid}:{pstart}:{starttime}:{type}:{id}:{user}: with 8-digit upper-case hex.
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, t.pid, t.pstart, now.Unix(), typ, id, user)
	s.tasks[t.upid] = t
	s.taskOrder = append(s.taskOrder, t.upid)
	s.pruneTasks()
	return t
}

func (s *Server) pruneTasks() {
	if len(s.taskOrder) <= maxTasks {
		return
	}
	keep := s.taskOrder[:0]
	drop := len(s.taskOrder) - maxTasks
	for _, u := range s.taskOrder {
		t := s.tasks[u]
		if drop > 0 && t != nil && !t.running {
			delete(s.tasks, u)
			drop--
			continue
		}
		keep = append(keep, u)
	}
	s.taskOrder = keep
}

// finish ends a task; errMsg "" means success. The caller must hold s.mu.
func (t *taskState) finish(errMsg string) {
	if !t.running {
		return
	}
	t.running = false
	t.end = time.Now()
	if errMsg == "" && t.warnings > 0 {
		// A task that logged warnings ends "WARNINGS: <n>", a success
		// (pve-common PVE::UPID read_status and status_is_error).
		t.exit = fmt.Sprintf("WARNINGS: %d", t.warnings)
		t.log = append(t.log, "TASK "+t.exit)
		return
	}
	if errMsg == "" {
		t.exit = "OK"
		t.log = append(t.log, "TASK OK")
		return
	}
	errMsg = strings.TrimRight(errMsg, "\n")
	t.exit = errMsg
	t.log = append(t.log, errMsg, "TASK ERROR: "+errMsg)
}

func (t *taskState) logf(format string, args ...any) {
	t.log = append(t.log, fmt.Sprintf(format, args...))
}

// runTask finishes t after d by calling work, which receives the exit
// status an injected fault forces ("" if none) and returns the task's error
// text ("" for OK). work runs with s.mu held. The caller must hold s.mu.
func (s *Server) runTask(t *taskState, d time.Duration, injected string, work func(injected string) string) {
	s.kit.After(d, func() {
		t.finish(work(injected))
	})
}

// parseUPID checks the UPID format and returns its node.
func parseUPID(upid string) (string, bool) {
	parts := strings.Split(upid, ":")
	if len(parts) < 9 || parts[0] != "UPID" || parts[1] == "" {
		return "", false
	}
	for _, h := range parts[2:5] {
		if _, err := strconv.ParseUint(h, 16, 64); err != nil {
			return "", false
		}
	}
	return parts[1], true
}

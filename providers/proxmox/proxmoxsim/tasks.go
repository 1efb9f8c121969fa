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
	log     []string
}

func (t *taskState) info() TaskInfo {
	return TaskInfo{UPID: t.upid, Node: t.node, Type: t.typ, ID: t.id, User: t.user,
		Running: t.running, ExitStatus: t.exit, Start: t.start, End: t.end}
}

// statusJSON is the body of GET /nodes/{node}/tasks/{upid}/status.
func (t *taskState) statusJSON() map[string]any {
	m := map[string]any{
		"upid":      t.upid,
		"node":      t.node,
		"pid":       t.pid,
		"pstart":    t.pstart,
		"starttime": t.start.Unix(),
		"type":      t.typ,
		"id":        t.id,
		"user":      t.user,
		"status":    "running",
	}
	if !t.running {
		m["status"] = "stopped"
		m["exitstatus"] = t.exit
		m["endtime"] = t.end.Unix()
	}
	return m
}

// listJSON is one row of GET /nodes/{node}/tasks and /cluster/tasks.
func (t *taskState) listJSON() map[string]any {
	m := map[string]any{
		"upid":      t.upid,
		"node":      t.node,
		"pid":       t.pid,
		"pstart":    t.pstart,
		"starttime": t.start.Unix(),
		"type":      t.typ,
		"id":        t.id,
		"user":      t.user,
	}
	if !t.running {
		m["status"] = t.exit
		m["endtime"] = t.end.Unix()
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

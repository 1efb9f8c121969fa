package proxmoxsim

import (
	"fmt"
	"net/http"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// Operation names an API operation, for fault matching and request counts.
type Operation string

// The operations the simulator knows, named after what the request does.
const (
	// OpVersion is GET /version.
	OpVersion Operation = "version"
	// OpTicket is POST /access/ticket (login and ticket renewal).
	OpTicket Operation = "ticket"
	// OpNodes is GET /nodes.
	OpNodes Operation = "nodes"
	// OpNodeIndex is GET /nodes/{node}.
	OpNodeIndex Operation = "node-index"
	// OpNodeStatus is GET /nodes/{node}/status.
	OpNodeStatus Operation = "node-status"
	// OpNodeVersion is GET /nodes/{node}/version.
	OpNodeVersion Operation = "node-version"
	// OpClusterStatus is GET /cluster/status.
	OpClusterStatus Operation = "cluster-status"
	// OpClusterResources is GET /cluster/resources.
	OpClusterResources Operation = "cluster-resources"
	// OpNextID is GET /cluster/nextid (with or without ?vmid=).
	OpNextID Operation = "nextid"
	// OpClusterTasks is GET /cluster/tasks.
	OpClusterTasks Operation = "cluster-tasks"
	// OpListVMs is GET /nodes/{node}/qemu.
	OpListVMs Operation = "qemu-list"
	// OpCreateVM is POST /nodes/{node}/qemu.
	OpCreateVM Operation = "qemu-create"
	// OpVMIndex is GET /nodes/{node}/qemu/{vmid}.
	OpVMIndex Operation = "qemu-index"
	// OpVMStatus is GET .../qemu/{vmid}/status/current.
	OpVMStatus Operation = "vm-status"
	// OpConfigGet is GET .../qemu/{vmid}/config.
	OpConfigGet Operation = "config-get"
	// OpConfigSet is POST (asynchronous) or PUT (synchronous) .../qemu/{vmid}/config.
	OpConfigSet Operation = "config-set"
	// OpClone is POST .../qemu/{vmid}/clone.
	OpClone Operation = "clone"
	// OpResize is PUT .../qemu/{vmid}/resize.
	OpResize Operation = "resize"
	// OpTemplate is POST .../qemu/{vmid}/template.
	OpTemplate Operation = "template"
	// OpStart is POST .../qemu/{vmid}/status/start.
	OpStart Operation = "start"
	// OpShutdown is POST .../qemu/{vmid}/status/shutdown.
	OpShutdown Operation = "shutdown"
	// OpStop is POST .../qemu/{vmid}/status/stop.
	OpStop Operation = "stop"
	// OpReboot is POST .../qemu/{vmid}/status/reboot.
	OpReboot Operation = "reboot"
	// OpDelete is DELETE /nodes/{node}/qemu/{vmid}.
	OpDelete Operation = "delete"
	// OpAgent is any .../qemu/{vmid}/agent/{command} request.
	OpAgent Operation = "agent"
	// OpTaskList is GET /nodes/{node}/tasks.
	OpTaskList Operation = "task-list"
	// OpTaskStatus is GET /nodes/{node}/tasks/{upid}/status.
	OpTaskStatus Operation = "task-status"
	// OpTaskLog is GET /nodes/{node}/tasks/{upid}/log.
	OpTaskLog Operation = "task-log"
	// OpStorageList is GET /nodes/{node}/storage.
	OpStorageList Operation = "storage-list"
	// OpStorageStatus is GET /nodes/{node}/storage/{storage}/status.
	OpStorageStatus Operation = "storage-status"
	// OpStorageContent is GET /nodes/{node}/storage/{storage}/content.
	OpStorageContent Operation = "storage-content"
	// OpVolumeGet is GET .../storage/{storage}/content/{volume}.
	OpVolumeGet Operation = "volume-get"
	// OpVolumeDelete is DELETE .../storage/{storage}/content/{volume}.
	OpVolumeDelete Operation = "volume-delete"
	// OpUpload is POST .../storage/{storage}/upload.
	OpUpload Operation = "upload"
	// OpUnknown is any path the simulator does not implement (answered 501).
	OpUnknown Operation = "unknown"
)

// createsTask reports whether a successful request of this operation
// returns a task UPID (so a FaultTaskFail can apply to it).
func (op Operation) createsTask(method string) bool {
	switch op {
	case OpCreateVM, OpClone, OpResize, OpTemplate, OpStart, OpShutdown, OpStop, OpReboot, OpDelete, OpVolumeDelete, OpUpload:
		return true
	case OpConfigSet:
		return method == http.MethodPost
	}
	return false
}

// FaultAction is what an injected fault does to a matching request.
type FaultAction int

const (
	// FaultHTTPError answers with Status (default 500) and Message in the
	// status line, as Proxmox does. 400, 401, 403, 500 and 501 carry
	// Proxmox's JSON error body; other statuses (502, 503, 595, ...) come
	// with an empty body like pveproxy's own errors, unless Body is set.
	FaultHTTPError FaultAction = iota
	// FaultDelay holds the answer for Delay, then serves the request normally.
	FaultDelay
	// FaultHang never answers: the request is held until the client gives
	// up (its timeout or context) or the server closes.
	FaultHang
	// FaultDrop closes the connection without any answer. Note that Go's
	// HTTP client silently retries an idempotent request (GET) that was sent
	// on a reused connection, so a one-shot drop of a GET may go unnoticed.
	FaultDrop
	// FaultTaskFail lets the request succeed and return a UPID, but the task
	// then fails with Message as its exit status (after its usual latency)
	// and has no effect (a failed clone's VM disappears). It only matches
	// requests that create tasks.
	FaultTaskFail
	// FaultLockError answers 500 "VM is locked (clone)" (or Message), the
	// error Proxmox gives when a VM's config lock is held.
	FaultLockError
	// FaultTaskWarnings lets the request succeed and its task do its work,
	// but end with the exit status "WARNINGS: <Count>" (default 1), as a
	// Proxmox task that logged warnings does: a success. It only matches
	// requests that create tasks.
	FaultTaskWarnings
)

func (a FaultAction) String() string {
	switch a {
	case FaultHTTPError:
		return "http-error"
	case FaultDelay:
		return "delay"
	case FaultHang:
		return "hang"
	case FaultDrop:
		return "drop"
	case FaultTaskFail:
		return "task-fail"
	case FaultLockError:
		return "lock-error"
	case FaultTaskWarnings:
		return "task-warnings"
	}
	return fmt.Sprintf("FaultAction(%d)", int(a))
}

// Fault describes an injected failure. A request matches when every set
// criterion matches; the first matching fault (in injection order) applies.
type Fault struct {
	// Method matches the HTTP method ("GET", "POST", ...); empty matches any.
	Method string
	// Path is a regular expression matched against the request path below
	// /api2/json, e.g. `^/nodes/[^/]+/qemu/\d+/clone$`; empty matches any.
	Path string
	// Operation matches the simulator's operation name; empty matches any.
	Operation Operation
	// Times is how many matching requests the fault applies to; 0 means
	// every one until ClearFaults.
	Times int
	// Action is what the fault does.
	Action FaultAction
	// Status is the HTTP status for FaultHTTPError (default 500).
	Status int
	// Message is the error text: the status line for FaultHTTPError and
	// FaultLockError, the exit status for FaultTaskFail.
	Message string
	// Body overrides the response body of FaultHTTPError when non-empty.
	Body string
	// Delay is how long FaultDelay holds the answer.
	Delay time.Duration
	// Count is the number of warnings of FaultTaskWarnings (default 1).
	Count int
}

// InjectFault adds a fault that applies to the next Times matching requests
// (or to all of them until ClearFaults when Times is 0). It fails only on
// an invalid Path expression.
func (s *Server) InjectFault(f Fault) error {
	return s.faults.Add(simkit.Rule{Method: f.Method, Path: f.Path, Times: f.Times}, f)
}

// ClearFaults removes every injected fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// PendingFaults reports how many injected faults are still armed.
func (s *Server) PendingFaults() int { return s.faults.Pending() }

// takeFault returns the first fault matching the request and consumes one
// use of it.
func (s *Server) takeFault(method, path string, op Operation) (Fault, bool) {
	return s.faults.Take(method, path, func(f Fault) bool {
		return (f.Operation == "" || f.Operation == op) && ((f.Action != FaultTaskFail && f.Action != FaultTaskWarnings) || op.createsTask(method))
	})
}

package kubevirtsim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
)

// Latencies sets how long each simulated step takes, so tests run fast while
// the sandbox and the benchmark can see realistic timing. A zero field means
// that step's default (DefaultLatencies); a negative field means no delay.
type Latencies struct {
	// Pending is how long a new VMI stays Pending: virt-controller creating
	// its virt-launcher pod.
	Pending time.Duration
	// Scheduling is how long it stays Scheduling: the scheduler placing the
	// pod and the kubelet starting its containers.
	Scheduling time.Duration
	// Scheduled is how long it stays Scheduled: virt-handler defining and
	// starting the domain.
	Scheduled time.Duration
	// Boot is the guest's boot, from Running until the guest agent reports
	// the IP addresses and the VMI turns Ready.
	Boot time.Duration
	// Shutdown is the graceful shutdown of a running guest whose VMI is
	// deleted (stop, restart, VM deletion), until the VMI is Succeeded.
	Shutdown time.Duration
	// StartFailureBackoff is the unit of KubeVirt's crash-loop backoff: after
	// n consecutive VMIs failed before reaching Running, the next one is
	// created n²×StartFailureBackoff later, at most 30×StartFailureBackoff
	// (KubeVirt: 10 s, at most 300 s).
	StartFailureBackoff time.Duration
}

// DefaultLatencies returns the latencies a zero field stands for: short
// enough for integration tests, long enough that every phase is observable.
func DefaultLatencies() Latencies {
	return Latencies{
		Pending:             100 * time.Millisecond,
		Scheduling:          300 * time.Millisecond,
		Scheduled:           200 * time.Millisecond,
		Boot:                300 * time.Millisecond,
		Shutdown:            200 * time.Millisecond,
		StartFailureBackoff: 500 * time.Millisecond,
	}
}

// Realistic returns latencies close to a small real cluster booting a cloud
// image with cloud-init and the guest agent, for the sandbox and benchmarks.
func Realistic() Latencies {
	return Latencies{
		Pending:             200 * time.Millisecond,
		Scheduling:          3 * time.Second,
		Scheduled:           2 * time.Second,
		Boot:                25 * time.Second,
		Shutdown:            8 * time.Second,
		StartFailureBackoff: 10 * time.Second,
	}
}

// withDefaults fills zero fields from DefaultLatencies and turns negative
// ones into zero (no delay).
func (l Latencies) withDefaults() Latencies {
	d := DefaultLatencies()
	pick := func(v, def time.Duration) time.Duration {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return Latencies{
		Pending:             pick(l.Pending, d.Pending),
		Scheduling:          pick(l.Scheduling, d.Scheduling),
		Scheduled:           pick(l.Scheduled, d.Scheduled),
		Boot:                pick(l.Boot, d.Boot),
		Shutdown:            pick(l.Shutdown, d.Shutdown),
		StartFailureBackoff: pick(l.StartFailureBackoff, d.StartFailureBackoff),
	}
}

// Options configures a Simulator. The zero value gives three nodes, the
// default latencies, the pod network 10.244.0.0/16 and no logging.
type Options struct {
	// Nodes are the names of the nodes VMIs are scheduled onto, least-loaded
	// first; default kv-node-1, kv-node-2, kv-node-3. Each carries the labels
	// kubernetes.io/hostname=<name>, kubernetes.io/os=linux,
	// kubernetes.io/arch=amd64 and kubevirt.io/schedulable=true, which is
	// what a VMI's spec.nodeSelector is matched against.
	Nodes []string
	// Latencies sets the duration of each step; see Latencies.
	Latencies Latencies
	// PodCIDR is the IPv4 network guest interfaces get addresses from,
	// allocated in order like the host-local IPAM plugin; default
	// 10.244.0.0/16.
	PodCIDR string
	// Logger receives the simulator's and its manager's logs; the zero
	// value discards them. (controller-runtime's informers always log
	// through its global logger, set with ctrl.SetLogger.)
	Logger logr.Logger
}

// Default node names, like a small three-worker cluster.
var defaultNodes = []string{"kv-node-1", "kv-node-2", "kv-node-3"}

const defaultPodCIDR = "10.244.0.0/16"

// withDefaults returns a copy of o with every unset field filled in.
func (o Options) withDefaults() (Options, error) {
	if len(o.Nodes) == 0 {
		o.Nodes = defaultNodes
	}
	o.Nodes = append([]string(nil), o.Nodes...)
	seen := map[string]bool{}
	for _, n := range o.Nodes {
		if n == "" || seen[n] {
			return o, fmt.Errorf("kubevirtsim: node names must be non-empty and unique, got %q", o.Nodes)
		}
		seen[n] = true
	}
	o.Latencies = o.Latencies.withDefaults()
	if o.PodCIDR == "" {
		o.PodCIDR = defaultPodCIDR
	}
	if _, err := netip.ParsePrefix(o.PodCIDR); err != nil {
		return o, fmt.Errorf("kubevirtsim: PodCIDR: %w", err)
	}
	if o.Logger.GetSink() == nil {
		// Not logr.Discard(): a manager given a Logger without a sink falls
		// back to controller-runtime's global logger and complains that
		// SetLogger was never called.
		o.Logger = logr.New(discardSink{})
	}
	return o, nil
}

// discardSink drops every log line.
type discardSink struct{}

func (discardSink) Init(logr.RuntimeInfo)            {}
func (discardSink) Enabled(int) bool                 { return false }
func (discardSink) Info(int, string, ...any)         {}
func (discardSink) Error(error, string, ...any)      {}
func (s discardSink) WithValues(...any) logr.LogSink { return s }
func (s discardSink) WithName(string) logr.LogSink   { return s }

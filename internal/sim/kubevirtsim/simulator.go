package kubevirtsim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	// defaultQPS and defaultBurst replace client-go's 5 QPS when the caller's
	// config sets none: a hundred VMs starting take over a thousand writes.
	defaultQPS   = 500
	defaultBurst = 1000
	// syncTimeout bounds how long Start waits for the informers.
	syncTimeout = time.Minute
	// faultTimeout bounds the API calls of FailVMI and GuestShutdown.
	faultTimeout = 30 * time.Second
)

// Simulator plays KubeVirt's controllers against an API server; see the
// package documentation. Its methods are safe for concurrent use.
type Simulator struct {
	opts   Options
	lat    Latencies
	log    logr.Logger
	client client.Client // reads from the informer cache, writes to the API server
	reader client.Reader // reads from the API server, where a stale cache would mislead

	ctx    context.Context // ends on Stop
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the manager's result, valid once done is closed

	// kicks wakes the VMI controller for changes the API server does not
	// see, such as a released scheduling hold.
	kicks chan event.GenericEvent

	mu            sync.Mutex
	vmis          map[types.NamespacedName]*vmiState
	startFailures map[types.NamespacedName]*startFailure
	holds         map[types.NamespacedName]bool
	holdAll       bool
	ipam          *ipam

	counters counters
}

type counters struct {
	created, deleted, collected, restarts, failures, shutdowns, scheduled, booted atomic.Int64
}

// Start runs a simulator until ctx ends or Stop is called. The KubeVirt CRDs
// must already be served (Install). It returns once the informers have
// synced, so every VM and VMI that exists is being handled.
func Start(ctx context.Context, cfg *rest.Config, o Options) (*Simulator, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	pool, err := newIPAM(o.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("kubevirtsim: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS, cfg.Burst = defaultQPS, defaultBurst
	}
	log := o.Logger.WithName("kubevirtsim")
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kubevirtv1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Logger: log,
		// Several simulators may live in one test binary, one per package
		// or sandbox: no listeners, no leader election, no name clashes.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		Controller: config.Controller{
			SkipNameValidation: ptr.To(true),
			CacheSyncTimeout:   syncTimeout,
		},
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
	})
	if err != nil {
		return nil, fmt.Errorf("kubevirtsim: creating the manager: %w", err)
	}
	if err := crdsInstalled(mgr.GetRESTMapper()); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	s := &Simulator{
		opts:          o,
		lat:           o.Latencies,
		log:           log,
		client:        mgr.GetClient(),
		reader:        mgr.GetAPIReader(),
		ctx:           runCtx,
		cancel:        cancel,
		done:          make(chan struct{}),
		kicks:         make(chan event.GenericEvent, 256),
		vmis:          map[types.NamespacedName]*vmiState{},
		startFailures: map[types.NamespacedName]*startFailure{},
		holds:         map[types.NamespacedName]bool{},
		ipam:          pool,
	}
	if err := s.setupControllers(runCtx, mgr); err != nil {
		cancel()
		return nil, err
	}
	// Runnables that need no leader election start once the caches have
	// synced; this one only says so.
	synced := make(chan struct{})
	if err := mgr.Add(manager.RunnableFunc(func(context.Context) error {
		close(synced)
		return nil
	})); err != nil {
		cancel()
		return nil, fmt.Errorf("kubevirtsim: %w", err)
	}
	go func() {
		defer close(s.done)
		s.err = mgr.Start(runCtx)
	}()
	select {
	case <-synced:
		s.log.Info("Simulating KubeVirt", "nodes", o.Nodes, "podCIDR", o.PodCIDR)
		return s, nil
	case <-s.done:
		cancel()
		return nil, fmt.Errorf("kubevirtsim: the manager stopped before its caches synced: %w", s.err)
	case <-ctx.Done():
		cancel()
		<-s.done
		return nil, fmt.Errorf("kubevirtsim: waiting for the caches: %w", ctx.Err())
	}
}

// crdsInstalled fails fast, with advice, where the manager would otherwise
// wait for its cache sync timeout.
func crdsInstalled(mapper apimeta.RESTMapper) error {
	for _, kind := range []string{"VirtualMachine", "VirtualMachineInstance"} {
		gk := kubevirtv1.GroupVersion.WithKind(kind).GroupKind()
		if _, err := mapper.RESTMapping(gk, kubevirtv1.GroupVersion.Version); err != nil {
			return fmt.Errorf("kubevirtsim: kubevirt.io/v1 %s is not served (call Install first): %w", kind, err)
		}
	}
	return nil
}

// Stop stops the simulator and waits for its controllers to finish. The
// objects it manages stay as they are. Calling Stop again does nothing.
func (s *Simulator) Stop() {
	s.cancel()
	<-s.done
}

// Err returns why the simulator stopped, or nil while it runs or after a
// clean Stop.
func (s *Simulator) Err() error {
	select {
	case <-s.done:
		if errors.Is(s.err, context.Canceled) {
			return nil
		}
		return s.err
	default:
		return nil
	}
}

// kick wakes the VMI controller for key without blocking the caller.
func (s *Simulator) kick(key types.NamespacedName) {
	ev := event.GenericEvent{Object: &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
	}}
	select {
	case s.kicks <- ev:
	default:
		go func() {
			select {
			case s.kicks <- ev:
			case <-s.ctx.Done():
			}
		}()
	}
}

// Package manager builds the controller-runtime manager: caches, metrics,
// health probes, leader election, and the reconcilers of every kind.
package manager

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/metricsauth"
	"github.com/hyperfleet/hyperfleet/internal/scheme"
)

// controllerConfig is what every controller of the manager shares: the
// reconcile timeout, and the name check tests that restart the operator
// in one process turn off.
func (o *Options) controllerConfig() config.Controller {
	c := config.Controller{ReconciliationTimeout: o.ReconcileTimeout}
	if o.SkipControllerNameValidation {
		skip := true
		c.SkipNameValidation = &skip
	}
	return c
}

// New builds a manager from a completed Options; its client gets
// ClientConfig's settings whatever cfg carries.
func New(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	cfg = ClientConfig(cfg)
	cacheOpts, err := CacheOptionsFor(cfg, o)
	if err != nil {
		return nil, err
	}

	metricsOpts := metricsserver.Options{BindAddress: o.MetricsAddr, SecureServing: o.MetricsSecure}
	if o.MetricsSecure {
		metricsOpts.FilterProvider = metricsauth.Filter
	}

	mgrOpts := ctrl.Options{
		Scheme:                        scheme.New(),
		Cache:                         cacheOpts,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.LeaseDuration,
		RenewDeadline:                 &o.RenewDeadline,
		RetryPeriod:                   &o.RetryPeriod,
	}
	mgrOpts.Controller = o.controllerConfig()
	if o.LeaderElect {
		// controller-runtime names a candidate hostname_<uuid>; we want the Pod
		// name so `kubectl get lease` tells which replica leads.
		lock, err := leaseLock(cfg, o)
		if err != nil {
			return nil, err
		}
		mgrOpts.LeaderElectionResourceLockInterface = lock
	}

	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if o.InstallationID, err = resolveInstallation(context.Background(), mgr.GetAPIReader(), o, mgr.GetLogger()); err != nil {
		return nil, err
	}
	if err := setupReconcilers(mgr, o); err != nil {
		return nil, fmt.Errorf("setting up the reconcilers: %w", err)
	}
	return mgr, nil
}

// CacheOptions are the operator's cache rules; the suites build their
// managers with them too, so a read the cache cannot answer fails there.
//
// Secrets are watched only in the operator's own namespace, and only with
// the credentials label; Secrets elsewhere are read with a GET
// (credentials.Reader). Pods, Services, Deployments and ConfigMaps are
// watched only with meta.ManagedByLabel=hyperfleet, the label on every one
// the operator makes, so its memory follows its own workloads and not the
// cluster's size. Anything else of those kinds (a template or CA bundle
// ConfigMap, a name taken by someone else's object) is read through the
// manager's APIReader: the cache would answer NotFound for it. KubeVirt
// VirtualMachines and VirtualMachineInstances are watched only with
// kubevirt.LabelManaged, which the provider puts on both (an AlreadyExists
// on create is settled with an uncached read, so a VM someone else made
// under our name is still refused).
//
// Every cached object drops its managedFields: they are the largest part of
// an object that is patched often (a claim's status, a VM's), the
// reconcilers never read them, and an update sent without them keeps the
// server's. Pods and Services drop what the performer reconciler never
// reads from the cache (slimPod, slimService); VirtualMachines and their instances what the provider
// never reads (slimVirtualMachine, slimInstance).
// Every cached object then shares one copy of its repeated strings with the
// others (intern.go).
func CacheOptions(o Options, kubeVirtServed bool) (cache.Options, error) {
	credentials, err := labels.NewRequirement(meta.CredentialsLabel, selection.Exists, nil)
	if err != nil {
		return cache.Options{}, err
	}
	managed := labels.SelectorFromSet(labels.Set{meta.ManagedByLabel: meta.ManagedByValue})
	strings := newInterner()
	opts := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {
				Label:      labels.NewSelector().Add(*credentials),
				Namespaces: map[string]cache.Config{o.OperatorNamespace: {}},
			},
			&corev1.Pod{}:        {Label: managed, Transform: then(slimPod, strings.transform)},
			&corev1.Service{}:    {Label: managed, Transform: then(slimService, strings.transform)},
			&corev1.ConfigMap{}:  {Label: managed},
			&appsv1.Deployment{}: {Label: managed},
			// Performers' NetworkPolicies (reconcilers/performer).
			&networkingv1.NetworkPolicy{}: {Label: managed},
		},
		DefaultTransform: then(cache.TransformStripManagedFields(), strings.transform),
	}
	if kubeVirtServed {
		kubeVirtCacheRules(&opts, strings)
	}
	if len(o.Namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts, nil
}

// CacheOptionsFor is CacheOptions for the cluster cfg reaches: the cache's
// rules for a kind need the kind to be served when the manager is built, so
// the KubeVirt rules apply only where KubeVirt's API is installed. (Where it
// is installed after the operator started, VMs are cached unfiltered until
// the next restart.)
func CacheOptionsFor(cfg *rest.Config, o Options) (cache.Options, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return cache.Options{}, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return cache.Options{}, fmt.Errorf("building a REST mapper: %w", err)
	}
	served, err := kubeVirtServed(mapper)
	if err != nil {
		return cache.Options{}, err
	}
	return CacheOptions(o, served)
}

func leaseLock(cfg *rest.Config, o Options) (resourcelock.Interface, error) {
	cs, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
	if err != nil {
		return nil, fmt.Errorf("building the leader-election client: %w", err)
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, o.LeaderElectionNamespace, o.LeaderElectionID,
		cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: o.Identity})
}

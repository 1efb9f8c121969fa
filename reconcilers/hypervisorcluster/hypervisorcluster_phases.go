package hypervisorcluster

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

const (
	// defaultHealthCheckInterval applies when spec.healthCheckInterval is unset.
	defaultHealthCheckInterval = 5 * time.Minute
	// defaultTransientRetry paces retries after a transient failure with no hint.
	defaultTransientRetry = 15 * time.Second
)

// scope is what one reconcile of a cluster has read and observed.
type scope struct {
	cluster *hypervisorv1alpha1.HypervisorCluster
	// now is when this reconcile started, from the reconciler's clock.
	now time.Time
	// interval is the cluster's health-check interval.
	interval time.Duration

	provider providers.Hypervisor
	// failure is what building the provider, or asking the hypervisor,
	// returned; nil when the check answered.
	failure error
	// answer is what the hypervisor reported, once it answered.
	answer *answer

	// patch is the reconcile's deferred status write.
	patch *skeleton.StatusPatch
	// secretsDeleting are referenced Secrets being deleted, kept readable
	// by SecretFinalizer while the cluster lives.
	secretsDeleting []string
	// deleting: the cluster is deleted and waits for what is left on it.
	deleting *deleting
}

// answer is what a successful check learned of the hypervisor.
type answer struct {
	version string
	nodes   []hypervisorv1alpha1.ClusterNode
	// machines counts the machines the provider lists; 0 when the listing
	// failed (the count is informational, the check still succeeded).
	machines int
}

func healthCheckInterval(c *hypervisorv1alpha1.HypervisorCluster) time.Duration {
	if d := c.Spec.HealthCheckInterval; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return defaultHealthCheckInterval
}

// keepSecrets holds the cluster's Secrets (holdSecrets). A failure is
// retried but does not stop the health check.
func (r *Reconciler) keepSecrets(ctx context.Context, s *scope) (skeleton.Result, error) {
	return skeleton.Continue(), r.holdSecrets(ctx, s)
}

// connect builds (or reuses) the provider from the cluster's spec and Secrets.
func (r *Reconciler) connect(ctx context.Context, s *scope) (skeleton.Result, error) {
	p, err := r.Hypervisors.For(ctx, s.cluster)
	if err != nil {
		s.failure = err
		return skeleton.StopAndRequeue(r.retryAfter(err, s.interval)), nil
	}
	s.provider = p
	return skeleton.Continue(), nil
}

// check asks the hypervisor for its version and nodes, and counts its
// machines; it looks again after the health-check interval.
func (r *Reconciler) check(ctx context.Context, s *scope) (skeleton.Result, error) {
	ctrl.LoggerFrom(ctx).V(1).Info("Checking the hypervisor", "provider", s.cluster.Spec.Provider, "endpoint", s.cluster.Spec.Endpoint)
	info, err := s.provider.Check(ctx)
	if err != nil {
		s.failure = err
		return skeleton.StopAndRequeue(r.retryAfter(err, s.interval)), nil
	}
	a := &answer{version: info.Version}
	for _, n := range info.Nodes {
		a.nodes = append(a.nodes, hypervisorv1alpha1.ClusterNode{
			Name: n.Name, Online: n.Online, CPUs: int32(n.CPUs), //nolint:gosec // CPU counts fit int32
			MemoryTotalBytes: n.MemoryTotal, MemoryFreeBytes: n.MemoryFree,
		})
	}
	if machines, err := s.provider.List(ctx); err == nil {
		a.machines = len(machines)
	}
	s.answer = a
	return skeleton.Requeue(s.interval), nil
}

// retryAfter: a transient failure retries at the provider's hint, else after
// 15 s; a permanent one waits for the health-check interval, at most 30 s:
// Secrets outside the operator's namespace are not watched, so a fixed or
// rotated credential is noticed by looking again. RetryCap, when set, caps
// all three.
func (r *Reconciler) retryAfter(err error, interval time.Duration) time.Duration {
	d := defaultTransientRetry
	if _, permanent := providers.IsPermanent(err); permanent {
		d = min(interval, 30*time.Second)
	} else if hint := providers.RetryAfter(err); hint > 0 {
		d = hint
	}
	if r.RetryCap > 0 {
		d = min(d, r.RetryCap)
	}
	return d
}

package hypervisormachinetemplate

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

const (
	// recheckInterval re-checks that the source still exists on the hypervisor.
	recheckInterval = 10 * time.Minute
	// clusterRetry paces retries after the cluster could not be read.
	clusterRetry = 15 * time.Second
	// providerRetry paces retries after the cluster's provider could not be built.
	providerRetry = time.Minute
	// sourceRetry paces retries after the hypervisor did not answer the check.
	sourceRetry = 30 * time.Second
)

// scope is what one reconcile of a template has read and observed, in the
// order the phases learn it; computeStatus reads the first fact that blocks.
type scope struct {
	template *hypervisorv1alpha1.HypervisorMachineTemplate

	// clusterKey names the cluster spec.clusterRef points at.
	clusterKey types.NamespacedName
	// cluster is the referenced cluster, nil when it does not exist
	// (clusterMissing) or could not be read (clusterErr).
	cluster        *hypervisorv1alpha1.HypervisorCluster
	clusterMissing bool
	clusterErr     error
	// mismatch says why the template's provider section does not fit the
	// cluster; empty when it fits.
	mismatch string
	// clusterReady: the cluster is Ready for its current generation.
	clusterReady bool

	provider    providers.Hypervisor
	providerErr error

	// uncheckable: the provider has no sources to look for (KubeVirt
	// builds machines from the template itself).
	uncheckable bool
	// source is the resolved source, described for people, once found;
	// sourceErr is why it was not.
	source    string
	sourceErr error

	// standby counts the template's standby claims (keepStandby); nil
	// when it keeps none.
	standby *hypervisorv1alpha1.StandbyStatus
	// standbyErr: spec.standby cannot be read (a schedule's expression or
	// time zone); nothing is made or retired until it is fixed.
	standbyErr error
}

// readCluster reads the referenced cluster and decides whether the template
// can be checked against it at all.
func (r *Reconciler) readCluster(ctx context.Context, s *scope) (skeleton.Result, error) {
	t := s.template
	s.clusterKey = types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.ClusterRef.Name}
	cluster := &hypervisorv1alpha1.HypervisorCluster{}
	if err := r.Client.Get(ctx, s.clusterKey, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			s.clusterMissing = true
			// Creating the cluster triggers a reconcile through the watch.
			return skeleton.Stop(), nil
		}
		s.clusterErr = err
		return skeleton.StopAndRequeue(clusterRetry), nil
	}
	s.cluster = cluster
	s.mismatch = providerMismatch(t, cluster)
	s.clusterReady = conditions.IsReady(cluster, cluster.Generation)
	if s.mismatch != "" || !s.clusterReady {
		// A change of the cluster triggers a reconcile through the watch.
		return skeleton.Stop(), nil
	}
	return skeleton.Continue(), nil
}

// connect gets the cluster's provider.
func (r *Reconciler) connect(ctx context.Context, s *scope) (skeleton.Result, error) {
	p, err := r.Hypervisors.For(ctx, s.cluster)
	if err != nil {
		s.providerErr = err
		return skeleton.StopAndRequeue(providerRetry), nil
	}
	s.provider = p
	return skeleton.Continue(), nil
}

// checkSource asks the hypervisor whether the template's source exists, and
// looks again every recheckInterval: someone may delete it.
func (r *Reconciler) checkSource(ctx context.Context, s *scope) (skeleton.Result, error) {
	checker, ok := s.provider.(providers.TemplateChecker)
	if !ok {
		s.uncheckable = true
		return skeleton.Stop(), nil
	}
	spec, err := machinespec.Resolve(ctx, r.Hypervisors.APIReader, s.template, nil)
	if err == nil {
		s.source, err = checker.CheckTemplate(ctx, spec)
	}
	if err != nil {
		s.sourceErr = err
		if _, permanent := providers.IsPermanent(err); permanent {
			return skeleton.Requeue(recheckInterval), nil
		}
		return skeleton.Requeue(sourceRetry), nil
	}
	return skeleton.Requeue(recheckInterval), nil
}

// providerMismatch says why a template's provider section does not fit its
// cluster: each provider reads the section named after it.
func providerMismatch(t *hypervisorv1alpha1.HypervisorMachineTemplate, c *hypervisorv1alpha1.HypervisorCluster) string {
	if t.Spec.Provider() == c.Spec.Provider {
		return ""
	}
	return fmt.Sprintf("HypervisorCluster %s is a %s cluster but the template has no spec.%s section", c.Name, c.Spec.Provider, c.Spec.Provider)
}

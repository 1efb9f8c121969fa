package sandbox

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	cyberdesktemplate "github.com/hyperfleet/hyperfleet/kustomize/cyberdesk"
)

// startKubeVirt runs kubevirtsim in place of KubeVirt's controllers (its
// CRDs were installed with the control plane) and installs the Cyberdesk VM
// template ConfigMap the kustomize base ships, in the operator's namespace.
func startKubeVirt(ctx context.Context, cfg *rest.Config, c client.Client, o Options) (*kubevirtsim.Simulator, error) {
	objs, err := manifests.Decode("kustomize/cyberdesk/vm-template.yaml", cyberdesktemplate.VMTemplateConfigMap)
	if err != nil {
		return nil, err
	}
	if err := manifests.Apply(ctx, c, o.Manager.OperatorNamespace, fieldOwner, objs); err != nil {
		return nil, fmt.Errorf("installing the Cyberdesk VM template: %w", err)
	}
	lat := kubevirtsim.Realistic()
	if o.KubeVirtLatencies != nil {
		lat = *o.KubeVirtLatencies
	}
	sim, err := kubevirtsim.Start(ctx, cfg, kubevirtsim.Options{Latencies: lat, Logger: ctrl.LoggerFrom(ctx).WithName("kubevirtsim")})
	if err != nil {
		return nil, fmt.Errorf("starting the KubeVirt simulator: %w", err)
	}
	return sim, nil
}

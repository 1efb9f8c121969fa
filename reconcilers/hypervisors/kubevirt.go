package hypervisors

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// KeyKubeconfig is the key of a kubevirt cluster's Secret holding the
// kubeconfig of a remote cluster.
const KeyKubeconfig = "kubeconfig"

// LocalCluster is how the operator reaches its own cluster.
type LocalCluster struct {
	// Client is the manager's (cached) client.
	Client client.Client
	// Reader reads uncached.
	Reader client.Reader
	// Scheme builds clients for remote clusters.
	Scheme *runtime.Scheme
	// Installation is the operator's --installation-id, carried by every
	// VirtualMachine and required of every one the provider touches.
	Installation string
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=kubevirts,verbs=get;list
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list

// KubeVirt returns the factory of KubeVirt providers for MachineClaims: on
// the operator's own cluster by default, or on the remote cluster whose
// kubeconfig the cluster's credentials Secret holds.
func KubeVirt(local LocalCluster) Factory {
	return func(cluster *hypervisorv1alpha1.HypervisorCluster, creds Credentials) (providers.Hypervisor, error) {
		cfg := kubevirt.Config{Client: local.Client, Reader: local.Reader, OwnerKind: "MachineClaim", Installation: local.Installation}
		if kv := cluster.Spec.KubeVirt; kv != nil {
			cfg.Namespace, cfg.Labels = kv.Namespace, kv.Labels
		}
		if ref := cluster.Spec.CredentialsRef; ref != nil {
			data := creds.Data[KeyKubeconfig]
			if len(data) == 0 {
				return nil, providers.Permanent("CredentialsIncomplete", fmt.Sprintf(
					"Secret %s (spec.credentialsRef) needs the key %s: a kubeconfig for the remote cluster (or remove credentialsRef to use the operator's own cluster)",
					ref.Name, KeyKubeconfig), nil)
			}
			rc, err := clientcmd.RESTConfigFromKubeConfig(data)
			if err != nil {
				return nil, providers.Permanent("KubeconfigInvalid", fmt.Sprintf(
					"Secret %s key %s is not a usable kubeconfig: %v", ref.Name, KeyKubeconfig, err), err)
			}
			remote, err := client.New(rc, client.Options{Scheme: local.Scheme})
			if err != nil {
				return nil, providers.Permanent("KubeconfigInvalid", fmt.Sprintf(
					"Secret %s key %s: cannot build a client: %v", ref.Name, KeyKubeconfig, err), err)
			}
			cfg.Client, cfg.Reader = remote, remote
		}
		return kubevirt.New(cfg)
	}
}

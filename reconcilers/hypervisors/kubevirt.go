package hypervisors

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
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
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list

// KubeVirt returns the factory of KubeVirt providers for MachineClaims: on
// the operator's own cluster by default, or on the remote cluster whose
// kubeconfig the cluster's credentials Secret holds.
func KubeVirt(local LocalCluster) Factory {
	return func(cluster *hypervisorv1alpha1.HypervisorCluster, creds Credentials) (providers.Hypervisor, error) {
		cfg := kubevirt.Config{Client: local.Client, Reader: local.Reader, OwnerKind: "MachineClaim", Installation: local.Installation}
		if kv := cluster.Spec.KubeVirt; kv != nil {
			cfg.Namespace = kv.Namespace
			if len(kv.Labels) > 0 {
				cfg.Labels = make(map[string]string, len(kv.Labels))
				for k, v := range kv.Labels {
					cfg.Labels[k] = string(v)
				}
			}
		}
		ref := cluster.Spec.CredentialsRef
		if ref == nil && cfg.Namespace != "" && cfg.Namespace != cluster.Namespace {
			// On the operator's own cluster the operator writes with its own
			// rights, which reach every namespace: a namespaced object may only
			// place machines (and their cloud-init Secrets, whose volumes
			// resolve against the namespace's data) in its own namespace. On a
			// remote cluster the tenant's kubeconfig does the writing, so the
			// remote cluster's RBAC decides.
			return nil, providers.Permanent("NamespaceNotAllowed", fmt.Sprintf(
				"spec.kubevirt.namespace %q is not this HypervisorCluster's namespace %q: on the operator's own cluster machines are made only in the cluster's own namespace; remove spec.kubevirt.namespace, or create the HypervisorCluster (and its claims) in %q",
				cfg.Namespace, cluster.Namespace, cfg.Namespace), nil)
		}
		if ref != nil {
			data := creds.Data[KeyKubeconfig]
			if len(data) == 0 {
				return nil, providers.Permanent("CredentialsIncomplete", fmt.Sprintf(
					"Secret %s (spec.credentialsRef) needs the key %s: a kubeconfig for the remote cluster (or remove credentialsRef to use the operator's own cluster)",
					ref.Name, KeyKubeconfig), nil)
			}
			rc, err := RESTConfigFromInlineKubeconfig(data)
			if err != nil {
				return nil, providers.Permanent("KubeconfigInvalid", fmt.Sprintf(
					"Secret %s key %s is refused: %v (only inline credentials: no file paths, exec, auth providers, impersonation or proxy-url)", ref.Name, KeyKubeconfig, err), err)
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

package hypervisors

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// KeyKubeconfig is the key of a kubevirt cluster's Secret holding the
// kubeconfig of a remote cluster.
const KeyKubeconfig = "kubeconfig"

// DefaultTemplateKey is the ConfigMap key a VirtualMachine template is read
// from when none is named.
const DefaultTemplateKey = "template.yaml"

// LocalCluster is how the operator reaches its own cluster.
type LocalCluster struct {
	// Client is the manager's (cached) client.
	Client client.Client
	// Reader reads uncached.
	Reader client.Reader
	// Scheme builds clients for remote clusters.
	Scheme *runtime.Scheme
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
		cfg := kubevirt.Config{Client: local.Client, Reader: local.Reader, OwnerKind: "MachineClaim"}
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

// Spec is MachineSpec completed with what lives in other objects: a
// KubeVirt template held in a ConfigMap.
func (r *Registry) Spec(ctx context.Context, t *hypervisorv1alpha1.HypervisorMachineTemplate, claim *hypervisorv1alpha1.MachineClaim) (providers.MachineSpec, error) {
	s := MachineSpec(t, claim)
	kv := t.Spec.KubeVirt
	if kv == nil {
		return s, nil
	}
	s.KubeVirt = &providers.KubeVirtSpec{RunStrategy: string(kv.RunStrategy)}
	switch {
	case kv.VirtualMachine != nil:
		s.KubeVirt.Template = kv.VirtualMachine.Raw
		s.KubeVirt.TemplateSource = "HypervisorMachineTemplate " + t.Name + " spec.kubevirt.virtualMachine"
	case kv.TemplateConfigMapRef != nil:
		ref := kv.TemplateConfigMapRef
		text, source, err := TemplateFromConfigMap(ctx, r.APIReader, types.NamespacedName{Namespace: t.Namespace, Name: ref.Name}, ref.Key)
		if err != nil {
			return s, err
		}
		s.KubeVirt.Template, s.KubeVirt.TemplateSource = []byte(text), source
	}
	return s, nil
}

// TemplateFromConfigMap reads a VirtualMachine template from a ConfigMap
// key. An empty key means DefaultTemplateKey, or the ConfigMap's only key. It is read directly, not
// from a cache, so an edit reaches the very next machine.
func TemplateFromConfigMap(ctx context.Context, reader client.Reader, key types.NamespacedName, dataKey string) (text, source string, err error) {
	cm := &corev1.ConfigMap{}
	if err := reader.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", providers.Permanent("TemplateNotFound", fmt.Sprintf(
				"ConfigMap %s, which holds the VirtualMachine template, does not exist; create it", key), err)
		}
		return "", "", providers.Transient("TemplateUnreadable", 0, fmt.Errorf("reading ConfigMap %s: %w", key, err))
	}
	if dataKey == "" {
		dataKey = DefaultTemplateKey
		if _, ok := cm.Data[dataKey]; !ok && len(cm.Data) == 1 {
			for k := range cm.Data {
				dataKey = k
			}
		}
	}
	text, ok := cm.Data[dataKey]
	if !ok {
		keys := make([]string, 0, len(cm.Data))
		for k := range cm.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return "", "", providers.Permanent("TemplateNotFound", fmt.Sprintf(
			"ConfigMap %s has no key %q for the VirtualMachine template (it has: %s)", key, dataKey, strings.Join(keys, ", ")), nil)
	}
	return text, fmt.Sprintf("ConfigMap %s key %s", key, dataKey), nil
}

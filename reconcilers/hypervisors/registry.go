// Package hypervisors is the provider registry: it hands reconcilers the
// provider for a HypervisorCluster, built from the cluster's spec, its
// credentials Secret and CA bundle (read through reconcilers/credentials),
// and rebuilt whenever any of them changes — so a rotated token takes effect on
// the next reconcile, without a restart.
package hypervisors

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// The default installation id (internal/manager) is the UID of the
// operator's own namespace, read once at start. The API server authorizes a
// namespace's GET in that namespace, so the namespaced Role grants it and
// no other namespace can be read.
// +kubebuilder:rbac:groups="",namespace=hyperfleet-system,resources=namespaces,verbs=get

// Credentials is what a factory gets besides the cluster: the Secret's data
// (nil when the cluster names none) and the CA bundle (nil for system roots).
type Credentials struct {
	Data map[string][]byte
	CA   []byte
}

// Factory builds a provider for one kind of cluster.
type Factory func(cluster *hypervisorv1alpha1.HypervisorCluster, creds Credentials) (providers.Hypervisor, error)

// Registry caches one provider per HypervisorCluster, keyed by a hash of
// everything it was built from.
type Registry struct {
	// Credentials reads the clusters' credentials Secrets and Secret CA
	// bundles; its short reuse is what lets a rotation take effect.
	Credentials *credentials.Reader
	// APIReader reads past the cache: what template checks read (KubeVirt
	// templates held in ConfigMaps).
	APIReader client.Reader
	Factories map[hypervisorv1alpha1.ProviderType]Factory

	mu      sync.Mutex
	entries map[types.NamespacedName]entry
	// wakes are the functions every provider that is a providers.Waker
	// calls with the owner of a machine that can move on (OnWake).
	wakes []func(providers.Owner)
}

// OnWake adds a function called with the owner of each machine whose
// provider says it can move on (providers.Waker): a reconciler enqueues the
// owner instead of polling it. Providers built before and after the call
// both use it.
func (r *Registry) OnWake(wake func(providers.Owner)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wakes = append(r.wakes, wake)
	for _, e := range r.entries {
		if w, ok := e.provider.(providers.Waker); ok {
			w.OnWake(r.wake)
		}
	}
}

func (r *Registry) wake(o providers.Owner) {
	r.mu.Lock()
	wakes := r.wakes
	r.mu.Unlock()
	for _, w := range wakes {
		w(o)
	}
}

type entry struct {
	hash     string
	provider providers.Hypervisor
}

// For returns the provider for cluster, building or rebuilding it as needed.
// Errors are providers.PermanentError with a reason a user can act on.
func (r *Registry) For(ctx context.Context, cluster *hypervisorv1alpha1.HypervisorCluster) (providers.Hypervisor, error) {
	if err := skeleton.Undecodable(cluster); err != nil {
		// Its undecodable fields were left zero: a provider built from it
		// would talk to a hypervisor with settings nobody wrote.
		return nil, providers.Permanent(meta.InvalidStoredSpecReason, err.Error(), nil)
	}
	factory, ok := r.Factories[cluster.Spec.Provider]
	if !ok {
		return nil, providers.Permanent("ProviderUnsupported", fmt.Sprintf("this operator build has no %q provider", cluster.Spec.Provider), nil)
	}
	creds, err := r.credentials(ctx, cluster)
	if err != nil {
		return nil, err
	}
	hash := fingerprint(cluster, creds)
	key := client.ObjectKeyFromObject(cluster)
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[key]; ok && e.hash == hash {
		return e.provider, nil
	}
	p, err := factory(cluster, creds)
	if err != nil {
		return nil, err
	}
	if w, ok := p.(providers.Waker); ok {
		w.OnWake(r.wake)
	}
	if r.entries == nil {
		r.entries = map[types.NamespacedName]entry{}
	}
	r.entries[key] = entry{hash: hash, provider: p}
	return p, nil
}

// Forget drops the cached provider of a deleted cluster.
func (r *Registry) Forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.entries, key)
}

func (r *Registry) credentials(ctx context.Context, cluster *hypervisorv1alpha1.HypervisorCluster) (Credentials, error) {
	var creds Credentials
	if ref := cluster.Spec.CredentialsRef; ref != nil {
		secret, err := r.Credentials.Secret(ctx, types.NamespacedName{Namespace: cluster.Namespace, Name: ref.Name}, "spec.credentialsRef")
		if err != nil {
			return creds, err
		}
		creds.Data = secret.Data
	}
	if cluster.Spec.TLS != nil && cluster.Spec.TLS.CABundleRef != nil {
		ca, err := r.Credentials.Key(ctx, cluster.Namespace, cluster.Spec.TLS.CABundleRef, "spec.tls.caBundleRef", "CABundleNotFound")
		if err != nil {
			return creds, err
		}
		creds.CA = ca
	}
	return creds, nil
}

// fingerprint hashes what a provider is built from. The hash never leaves
// this process, so it is no leak of the Secret.
func fingerprint(cluster *hypervisorv1alpha1.HypervisorCluster, creds Credentials) string {
	h := sha256.New()
	spec, _ := json.Marshal(cluster.Spec)
	h.Write([]byte(cluster.UID))
	h.Write(spec)
	keys := make([]string, 0, len(creds.Data))
	for k := range creds.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.Write([]byte{0})
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write(creds.Data[k])
	}
	h.Write([]byte{1})
	h.Write(creds.CA)
	return hex.EncodeToString(h.Sum(nil))
}

// Providers lists the kinds of cluster this registry can build providers
// for, in a stable order: sweeps and gauges walk these instead of a list
// written out by hand.
func (r *Registry) Providers() []hypervisorv1alpha1.ProviderType {
	out := make([]hypervisorv1alpha1.ProviderType, 0, len(r.Factories))
	for p := range r.Factories {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

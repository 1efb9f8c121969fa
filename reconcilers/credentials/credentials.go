// Package credentials is HyperFleet's one reader of credentials Secrets:
// hypervisor tokens and CA bundles, GitHub App keys, cloud-init user data,
// the webhook secret. Secrets are read with a GET, never listed or watched
// cluster-wide, and a read is reused for a short while so a burst of
// reconciles does not become a burst of GETs.
package credentials

import (
	"container/list"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
)

// Defaults of Reader.
const (
	// DefaultTTL is how long a read is reused: a rotated Secret takes effect
	// within this long, without a watch on Secrets.
	DefaultTTL = 10 * time.Second
	// DefaultMaxEntries bounds the reads kept. Every cluster, pool and claim
	// that names a Secret adds at most one; beyond this the least recently
	// used go first, so the reader never grows with Secrets no one reads.
	DefaultMaxEntries = 512
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// Reader reads Secrets by name and reuses each read for TTL. It is safe for
// concurrent use; its zero value (with Reader set) is ready.
type Reader struct {
	// Reader reads uncached (the manager's API reader): the cache holds only
	// the operator's own namespace, and a GET needs no list or watch right.
	Reader client.Reader
	// TTL is how long a read is reused (DefaultTTL).
	TTL time.Duration
	// MaxEntries bounds the reads kept (DefaultMaxEntries).
	MaxEntries int
	// Clock tells the age of a read (the real clock when nil).
	Clock clock.PassiveClock

	mu      sync.Mutex
	lru     *list.List // of *entry, most recently used first
	entries map[entryKey]*list.Element
}

// entryKey tells gated and ungated reads apart: an ungated read of a Secret
// without the label must never satisfy a gated one.
type entryKey struct {
	types.NamespacedName
	gated bool
}

type entry struct {
	key    entryKey
	secret *corev1.Secret
	at     time.Time
}

// Secret reads the Secret key for the spec field that names it, and insists
// on the credentials label: only Secrets marked for HyperFleet are read,
// whatever a spec points at. Errors are providers.PermanentError (missing,
// unlabelled: a person must act) or providers.TransientError; their messages
// name the Secret and the field, never the Secret's data. The returned Secret
// is shared: callers must not modify it.
func (r *Reader) Secret(ctx context.Context, key types.NamespacedName, field string) (*corev1.Secret, error) {
	return r.read(ctx, entryKey{NamespacedName: key, gated: true}, field)
}

// OperatorSecret reads a Secret of the operator's own configuration, named
// by a command-line flag rather than by a spec, so the label gate (which
// keeps specs from pointing at arbitrary Secrets) does not apply.
func (r *Reader) OperatorSecret(ctx context.Context, key types.NamespacedName, flag string) (*corev1.Secret, error) {
	return r.read(ctx, entryKey{NamespacedName: key}, flag)
}

// Len is the number of reads kept.
func (r *Reader) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lru == nil {
		return 0
	}
	return r.lru.Len()
}

func (r *Reader) read(ctx context.Context, key entryKey, field string) (*corev1.Secret, error) {
	now := r.now()
	if s, ok := r.lookup(key, now); ok {
		return s, nil
	}
	secret := &corev1.Secret{}
	if err := r.Reader.Get(providers.WithoutBodies(ctx), key.NamespacedName, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, providers.Transient("SecretUnreadable", 0, fmt.Errorf("reading Secret %s (%s): %w", key.NamespacedName, field, err))
		}
		r.forget(key)
		return nil, providers.Permanent(meta.SecretNotFoundReason, fmt.Sprintf(
			"Secret %s (%s) not found: create it, or check the ExternalSecret that syncs it", key.NamespacedName, field), nil)
	}
	if _, ok := secret.Labels[meta.CredentialsLabel]; key.gated && !ok {
		r.forget(key)
		return nil, providers.Permanent(meta.SecretNotFoundReason, fmt.Sprintf(
			"Secret %s (%s) lacks the label %s, which marks the Secrets HyperFleet may read: add it (in the ExternalSecret's target template)",
			key.NamespacedName, field, meta.CredentialsLabel), nil)
	}
	r.store(key, secret, now)
	return secret, nil
}

func (r *Reader) lookup(key entryKey, now time.Time) (*corev1.Secret, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.entries[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*entry)
	if now.Sub(e.at) >= r.ttl() {
		r.lru.Remove(el)
		delete(r.entries, key)
		return nil, false
	}
	r.lru.MoveToFront(el)
	return e.secret, true
}

// store keeps a read, first dropping every expired read (they would never
// be served again) and then the least recently used beyond MaxEntries.
func (r *Reader) store(key entryKey, secret *corev1.Secret, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lru == nil {
		r.lru, r.entries = list.New(), map[entryKey]*list.Element{}
	}
	if el, ok := r.entries[key]; ok {
		r.lru.Remove(el)
		delete(r.entries, key)
	}
	ttl := r.ttl()
	for el := r.lru.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*entry); now.Sub(e.at) >= ttl {
			r.lru.Remove(el)
			delete(r.entries, e.key)
		}
		el = next
	}
	r.entries[key] = r.lru.PushFront(&entry{key: key, secret: secret, at: now})
	maxEntries := r.MaxEntries
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	for r.lru.Len() > maxEntries {
		e := r.lru.Remove(r.lru.Back()).(*entry)
		delete(r.entries, e.key)
	}
}

// forget drops a read of a Secret now gone or unlabelled, so its data is
// not kept after it stopped being readable.
func (r *Reader) forget(key entryKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.entries[key]; ok {
		r.lru.Remove(el)
		delete(r.entries, key)
	}
}

func (r *Reader) ttl() time.Duration {
	if r.TTL > 0 {
		return r.TTL
	}
	return DefaultTTL
}

func (r *Reader) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// Key reads the key a KeyReference names: a ConfigMap's (read past the
// cache, which holds only the operator's own) or a labelled Secret's. field
// names the reference for messages (spec.tls.caBundleRef); reason is the
// Permanent error's when the object or the key is missing or empty.
func (r *Reader) Key(ctx context.Context, namespace string, ref *meta.KeyReference, field, reason string) ([]byte, error) {
	key := types.NamespacedName{Namespace: namespace, Name: ref.Name}
	if ref.Kind == meta.ConfigMapKind {
		cm := &corev1.ConfigMap{}
		if err := r.Reader.Get(ctx, key, cm); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, providers.Permanent(reason, fmt.Sprintf("ConfigMap %s (%s) not found", key, field), nil)
			}
			return nil, providers.Transient(strings.TrimSuffix(reason, "NotFound")+"Unreadable", 0, err)
		}
		if v, ok := cm.Data[ref.Key]; ok && v != "" {
			return []byte(v), nil
		}
		return nil, providers.Permanent(reason, fmt.Sprintf("ConfigMap %s has no key %q, or it is empty (%s.key)", key, ref.Key, field), nil)
	}
	secret, err := r.Secret(ctx, key, field)
	if err != nil {
		return nil, err
	}
	if v := secret.Data[ref.Key]; len(v) > 0 {
		return v, nil
	}
	return nil, providers.Permanent(reason, fmt.Sprintf("Secret %s has no key %q, or it is empty (%s.key)", key, ref.Key, field), nil)
}

// SecretNotForThisClaimReason is the reason a claim is refused a Secret the
// operator made for another machine.
const SecretNotForThisClaimReason = "SecretNotForThisClaim"

// ClaimSecret is Secret for a field of a MachineClaim's spec: besides the
// label gate, a Secret the operator made for one machine (a runner's
// bootstrap Secret: its user data and its runner credential) is given only
// to the claim it was made for. Any other claim of the namespace could name
// it, and its machine would boot with, or be handed, another runner's
// registration.
func (r *Reader) ClaimSecret(ctx context.Context, key types.NamespacedName, field string, claim client.Object) (*corev1.Secret, error) {
	secret, err := r.Secret(ctx, key, field)
	if err != nil {
		return nil, err
	}
	if err := madeForClaim(secret, claim); err != nil {
		return nil, providers.Permanent(SecretNotForThisClaimReason, fmt.Sprintf(
			"Secret %s (%s) %s: name a Secret of your own", key, field, err), nil)
	}
	return secret, nil
}

// madeForClaim says why secret is not claim's to use, or nil when it is:
// a tenant's own Secret (no HyperFleet controller), or one the operator made
// for this very claim.
func madeForClaim(secret *corev1.Secret, claim client.Object) error {
	if forClaim, ok := secret.Labels[meta.ForClaimLabel]; ok && forClaim != claim.GetName() {
		return fmt.Errorf("was made by HyperFleet for the MachineClaim %s", forClaim)
	}
	owner := metav1.GetControllerOf(secret)
	if owner == nil || !strings.HasPrefix(owner.APIVersion, hypervisorv1alpha1.GroupVersion.Group+"/") {
		return nil
	}
	switch {
	case owner.UID == claim.GetUID():
		return nil
	case owner.Kind != "MachineClaim" && secret.Labels[meta.ForClaimLabel] == claim.GetName():
		// Made by the claim's pool for it, before the claim existed to own it.
		if c := metav1.GetControllerOf(claim); c != nil && c.UID == owner.UID {
			return nil
		}
	}
	return fmt.Errorf("was made by HyperFleet for %s %s", owner.Kind, owner.Name)
}

package skeleton

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// RefuseUndecodable is the first step of every Reconcile, right after the
// read. An object stored under an older or looser schema can hold a value
// the types cannot decode; the kinds decode it anyway, leaving those fields
// zero and listing them (meta.Undecoded). Acting on such an object would act
// on a spec nobody wrote, so this step does nothing to the outside world and
// never writes spec or metadata (no finalizer is added): it sets Stalled
// (reason InvalidStoredSpec, each field and what to do in the message),
// emits one Warning event when that message is new, and tells Reconcile to
// return (stop true, with the result and error to return: a terminal error
// when the stall is new, nothing when it was already recorded, so a kind
// whose reconciles are triggered by others' changes does not log it again).
//
// Deletion: an object being deleted whose failing fields are all in its
// spec goes on through the kind's normal deletion path (stop false). That
// path works from what status recorded and from references (which decode,
// being plain strings), and every provider refuses a machine not owned by
// the object's UID, so a zeroed field cannot make it delete the wrong thing.
// A failing status field is what the deletion path would need (the machine
// it made), so then the object stays stalled, and the message says how to
// release it.
func RefuseUndecodable(ctx context.Context, c client.Client, rec events.EventRecorder, obj Object) (stop bool, result ctrl.Result, err error) {
	failures := decodeFailures(obj)
	if len(failures) == 0 {
		reportedUndecodable.forget(kindOf(obj), client.ObjectKeyFromObject(obj))
		return false, ctrl.Result{}, nil
	}
	deleting := !obj.GetDeletionTimestamp().IsZero()
	statusFailed := false
	for _, f := range failures {
		statusFailed = statusFailed || f.Path == "status" || strings.HasPrefix(f.Path, "status.")
	}
	if deleting && !statusFailed {
		return false, ctrl.Result{}, nil
	}
	message := UndecodableMessage(failures)
	switch {
	case deleting:
		message += "; it is being deleted, and its finalizer stays until the field is fixed " +
			"(kubectl edit --subresource=status) or removed by hand, which leaves what it made outside behind"
	case statusFailed:
		message += "; fix the field (kubectl edit, with --subresource=status for a status field) or delete the object"
	default:
		message += "; fix the field or delete the object"
	}
	patch := NewStatusPatch(c, obj)
	result, err = patch.Finalize(ctx, conditions.Summary{}, ctrl.Result{}, Stalled(meta.InvalidStoredSpecReason, message))
	if !patch.Concluded() {
		return true, result, err
	}
	_, before := conditions.ReadyMessage(patch.Before())
	reason, after := conditions.ReadyMessage(obj)
	if after == before || !reportedUndecodable.first(obj, after) {
		return true, ctrl.Result{}, nil
	}
	rec.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Decode", "%s", after)
	return true, result, err
}

// reportedUndecodable remembers, per object, the last message its Warning
// carried. A second reconcile that runs before the cache shows the first
// one's status write reads the object without the condition and would
// repeat the Warning (the upgrade test saw two). A fixed object's message
// decodes again and is forgotten, so a later fault is reported again; an
// object gone or let go of is forgotten by the Driver. It is keyed by kind
// and name, as the Driver knows an object that is gone, and each entry
// keeps the UID, so an object made again under the name starts afresh.
var reportedUndecodable = &lastMessages{byObject: map[objectKey]lastMessage{}}

type lastMessages struct {
	// entries is len(byObject), readable without mu: every reconcile of
	// every kind forgets its object, and almost never is there anything to
	// forget, so that common path must not take a lock all workers share.
	entries  atomic.Int64
	mu       sync.Mutex
	byObject map[objectKey]lastMessage
}

type objectKey struct {
	kind string
	key  types.NamespacedName
}

type lastMessage struct {
	uid     types.UID
	message string
}

// first records message for obj and reports whether it differs from the
// one recorded before for this very object.
func (l *lastMessages) first(obj client.Object, message string) bool {
	k := objectKey{kind: kindOf(obj), key: client.ObjectKeyFromObject(obj)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.byObject[k]; ok && e.uid == obj.GetUID() && e.message == message {
		return false
	}
	l.byObject[k] = lastMessage{uid: obj.GetUID(), message: message}
	l.entries.Store(int64(len(l.byObject)))
	return true
}

// forget drops the entry of the kind's object named key: it decodes, or is
// gone. With no entry at all it returns without locking; a first racing
// with it is a reconcile of another read of the object, ordered no better
// by a lock.
func (l *lastMessages) forget(kind string, key types.NamespacedName) {
	if l.entries.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byObject, objectKey{kind: kind, key: key})
	l.entries.Store(int64(len(l.byObject)))
}

// UndecodableMessage names each field that failed to decode, why, and what
// it accepts: for the condition and event of the object itself, and for the
// objects that depend on it.
func UndecodableMessage(failures []meta.DecodeFailure) string {
	parts := make([]string, len(failures))
	for i, f := range failures {
		parts[i] = f.String()
	}
	return "the object as stored cannot be decoded: " + strings.Join(parts, "; ")
}

// Undecodable returns, for a dependency (a template, a cluster) read by
// another object's reconciler, an error naming it and its failing fields;
// nil when it decoded. Building on it would act on fields left zero.
func Undecodable(obj client.Object) error {
	failures := decodeFailures(obj)
	if len(failures) == 0 {
		return nil
	}
	return fmt.Errorf("%s %s: %s", kindOf(obj), obj.GetName(), UndecodableMessage(failures))
}

func decodeFailures(obj client.Object) []meta.DecodeFailure {
	if a, ok := obj.(meta.DecodeFailuresAccessor); ok {
		return a.GetDecodeFailures()
	}
	return nil
}

// kindOf is the object's Go type name: typed objects read from the cache
// carry no TypeMeta.
func kindOf(obj client.Object) string {
	t := fmt.Sprintf("%T", obj)
	return t[strings.LastIndex(t, ".")+1:]
}

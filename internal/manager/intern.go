package manager

import (
	"sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// The watch decoder gives every string of every cached object its own copy:
// ten thousand claims in one namespace hold ten thousand copies of the
// namespace, of each label key, finalizer, owner kind, condition type,
// reason and status, and of the messages most claims share ("the machine
// is being made: cloning"). make bench-memory showed the decoded objects
// are most of the heap at scale, so the cache keeps one copy of each such
// string. Only the values are shared, never a slice or map, so a
// reconciler that changes its (deep-copied) object changes nothing else.

// internLimit bounds the table. Strings unique to one object (a claim's
// name in its Ready message) pass through it as well; when it is full it
// starts afresh, so it never holds more than this many strings of objects
// long gone, and the strings already shared stay shared.
const internLimit = 8192

// interner keeps one copy of each string it was given, up to internLimit.
// Informers run transforms on their own goroutines, hence the lock.
type interner struct {
	mu sync.Mutex
	m  map[string]string
}

func newInterner() *interner { return &interner{m: map[string]string{}} }

func (in *interner) str(s string) string {
	if s == "" {
		return s
	}
	if v, ok := in.m[s]; ok {
		return v
	}
	if len(in.m) >= internLimit {
		clear(in.m)
	}
	in.m[s] = s
	return s
}

// transform interns obj's repeated strings in place; it is an informer
// transform, run once per object the watch delivers, before the cache
// stores it.
func (in *interner) transform(obj any) (any, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if m, err := apimeta.Accessor(obj); err == nil {
		in.objectMeta(m)
	}
	if c, ok := obj.(interface{ GetConditions() []metav1.Condition }); ok {
		in.conditions(c.GetConditions())
	}
	switch o := obj.(type) {
	case *hypervisorv1alpha1.MachineClaim:
		s := &o.Status
		s.Phase = hypervisorv1alpha1.MachinePhase(in.str(string(s.Phase)))
		s.Provider = hypervisorv1alpha1.ProviderType(in.str(string(s.Provider)))
		s.ClusterName, s.Node = in.str(s.ClusterName), in.str(s.Node)
		s.TerminationReason = in.str(s.TerminationReason)
		o.Spec.TemplateRef.Name = in.str(o.Spec.TemplateRef.Name)
	default:
		in.kubeVirt(obj)
	}
	return obj, nil
}

func (in *interner) objectMeta(m metav1.Object) {
	m.SetNamespace(in.str(m.GetNamespace()))
	m.SetGenerateName(in.str(m.GetGenerateName()))
	m.SetLabels(in.stringMap(m.GetLabels(), true))
	m.SetAnnotations(in.stringMap(m.GetAnnotations(), false))
	if f := m.GetFinalizers(); len(f) > 0 {
		for i := range f {
			f[i] = in.str(f[i])
		}
	}
	if refs := m.GetOwnerReferences(); len(refs) > 0 {
		for i := range refs {
			refs[i].APIVersion, refs[i].Kind = in.str(refs[i].APIVersion), in.str(refs[i].Kind)
		}
	}
}

// stringMap rewrites a label or annotation map's keys, and a label map's
// values, to their shared copies. Annotation values are often long and
// unique (a last-applied configuration), so they stay as they are. A new
// map is built: a Go map cannot swap the storage of a key it holds.
func (in *interner) stringMap(m map[string]string, values bool) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if values {
			v = in.str(v)
		}
		out[in.str(k)] = v
	}
	return out
}

func (in *interner) conditions(cs []metav1.Condition) {
	for i := range cs {
		c := &cs[i]
		c.Type = in.str(c.Type)
		c.Status = metav1.ConditionStatus(in.str(string(c.Status)))
		c.Reason, c.Message = in.str(c.Reason), in.str(c.Message)
	}
}

// then runs a second transform after the first, as one informer transform.
func then(first, second func(any) (any, error)) func(any) (any, error) {
	return func(obj any) (any, error) {
		obj, err := first(obj)
		if err != nil {
			return nil, err
		}
		return second(obj)
	}
}

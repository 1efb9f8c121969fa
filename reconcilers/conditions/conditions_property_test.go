package conditions

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/hyperfleet/hyperfleet/internal/proptest"
)

// step is one reconcile: the spec may have changed (bump), the reconcile
// concluded state, and it succeeded (reconciled: observedGeneration is
// written) or failed after observing.
type step struct {
	State      State
	Reason     string
	Bump       bool
	Reconciled bool
}

func genStep() gopter.Gen {
	return gen.Struct(reflect.TypeOf(step{}), map[string]gopter.Gen{
		"State":      gen.IntRange(int(Ready), int(Finished)).Map(func(i int) State { return State(i) }),
		"Reason":     gen.OneConstOf("Ready", "Provisioning", "HypervisorUnreachable", "InvalidSpec", "Expired"),
		"Bump":       gen.Bool(),
		"Reconciled": gen.Bool(),
	})
}

// kstatusOf is what kstatus (the library Argo CD and Flux health checks
// follow) reads off obj.
func kstatusOf(c *checked) (kstatus.Status, error) {
	conds, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&struct {
		Conditions []metav1.Condition `json:"conditions"`
	}{c.conds})
	if err != nil {
		return "", err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "hypervisor.hyperfleet.io/v1alpha1",
		"kind":       "MachineClaim",
		"metadata":   map[string]any{"name": "x", "generation": c.gen},
		"status":     map[string]any{"observedGeneration": c.observed, "conditions": conds["conditions"]},
	}}
	res, err := kstatus.Compute(u)
	if err != nil {
		return "", err
	}
	return res.Status, nil
}

// wantKstatus is the kstatus each state promises once observed (Set's
// contract); before the generation is observed kstatus says InProgress.
var wantKstatus = map[State]kstatus.Status{
	Ready: kstatus.CurrentStatus, Finished: kstatus.CurrentStatus,
	Progressing: kstatus.InProgressStatus, Waiting: kstatus.InProgressStatus,
	Stalled: kstatus.FailedStatus,
}

// Properties 16 (reconciliation behaviour) and 18 (observability): whatever
// history of conclusions, spec changes and failed reconciles an object went
// through, the conditions Set leaves never contradict each other (no Ready
// with Reconciling or Stalled, no Reconciling with Stalled), never run
// ahead of the generation, and kstatus reads exactly what the last
// conclusion meant: Current, InProgress or Failed once observed, and
// InProgress while a spec change is not.
func TestPropertyConditionsAreKstatusConsistent(t *testing.T) {
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("any history of reconciles", prop.ForAll(
			func(steps []step) string {
				c := &checked{gen: 1}
				for i, s := range steps {
					if s.Bump {
						c.gen++
					}
					Set(c, c.gen, Summary{State: s.State, Reason: s.Reason, Message: "m"})
					if s.Reconciled {
						c.observed = c.gen
					}
					if v := Violations(c, s.Reconciled); len(v) > 0 {
						return fmt.Sprintf("step %d %+v: %s", i, s, strings.Join(v, "; "))
					}
					got, err := kstatusOf(c)
					if err != nil {
						return err.Error()
					}
					want := wantKstatus[s.State]
					if c.observed != c.gen {
						want = kstatus.InProgressStatus
					}
					if got != want {
						return fmt.Sprintf("step %d %+v: kstatus %s, want %s (conditions %+v)", i, s, got, want, c.conds)
					}
				}
				return ""
			},
			gen.SliceOf(genStep()),
		))
	})
}

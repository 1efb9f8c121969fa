package machineclaim

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/proptest"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// observations is what the phases of one reconcile may have found, in any
// combination, on a claim in any phase: computeStatus must make sense of
// each.
type observations struct {
	Phase       hypervisorv1alpha1.MachinePhase
	Reason      string
	Prior       conditions.State
	Generation  int64
	Ended       bool
	Deletion    int // 0 none, 1 retiring, 2 finalizing
	DeleteErr   bool
	Blocked     int // 0 none, else the blocker's state: Progressing, Waiting, Stalled
	KeepPhase   bool
	Machine     bool
	Provisioned bool
	Power       providers.PowerState
	Address     bool
	Progress    bool
	Attestation hypervisorv1alpha1.AttestationPhase
}

func genObservations() gopter.Gen {
	return gen.Struct(reflect.TypeOf(observations{}), map[string]gopter.Gen{
		"Phase": gen.OneConstOf(hypervisorv1alpha1.MachinePhase(""), hypervisorv1alpha1.MachinePending, hypervisorv1alpha1.MachineProvisioning,
			hypervisorv1alpha1.MachineRunning, hypervisorv1alpha1.MachineReady, hypervisorv1alpha1.MachineStopping,
			hypervisorv1alpha1.MachineTerminated, hypervisorv1alpha1.MachineFailed),
		// Every way a claim ends writes its reason (retire, endWith).
		"Reason": gen.OneConstOf(ReasonExpired, ReasonShutDown, ReasonMachineFailed, ReasonDeleted, ReasonProvisioningTimeout, ReasonAttestationFailed,
			ReasonReferencesExhausted, ReasonClusterDeleting),
		"Prior":       gen.IntRange(int(conditions.Ready), int(conditions.Finished)).Map(func(i int) conditions.State { return conditions.State(i) }),
		"Generation":  gen.Int64Range(1, 5),
		"Ended":       gen.Bool(),
		"Deletion":    gen.IntRange(0, 2),
		"DeleteErr":   gen.Bool(),
		"Blocked":     gen.OneConstOf(0, int(conditions.Progressing), int(conditions.Waiting), int(conditions.Stalled)),
		"KeepPhase":   gen.Bool(),
		"Machine":     gen.Bool(),
		"Provisioned": gen.Bool(),
		"Power": gen.OneConstOf(providers.PowerProvisioning, providers.PowerStopped, providers.PowerRunning,
			providers.PowerFailed, providers.PowerUnknown),
		"Address":  gen.Bool(),
		"Progress": gen.Bool(),
		"Attestation": gen.OneConstOf(hypervisorv1alpha1.AttestationPhase(""), hypervisorv1alpha1.AttestationPending,
			hypervisorv1alpha1.AttestationAttested, hypervisorv1alpha1.AttestationCredentialsReleased, hypervisorv1alpha1.AttestationFailed),
	})
}

// scope is the reconcile's scope holding o, on a claim whose conditions
// say what an earlier reconcile (o.Prior) concluded.
func (o observations) scope() *scope {
	c := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", UID: "u", Generation: o.Generation}}
	c.Status.Phase, c.Status.MachineName = o.Phase, "hf-ns-box"
	c.Status.Addresses = []hypervisorv1alpha1.MachineAddress{{Type: "IPv4", Address: "10.0.0.5"}}
	if o.Phase != "" || o.Ended {
		c.Status.TerminationReason = o.Reason
	}
	conditions.Set(c, 1, conditions.Summary{State: o.Prior, Reason: "Earlier", Message: "an earlier reconcile"})
	c.Status.ObservedGeneration = 1
	if o.Attestation != "" {
		c.Status.Attestation = &hypervisorv1alpha1.MachineAttestationStatus{Phase: o.Attestation, SPIFFEID: "spiffe://x/y"}
	}
	s := &scope{claim: c, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), timeout: 10 * time.Minute}
	if o.Ended {
		s.ended = "the machine is gone"
	}
	if o.Deletion > 0 {
		s.deletion = &deletion{finalizing: o.Deletion == 2}
		if o.DeleteErr {
			s.deletion.err = errors.New("hypervisor unreachable")
		}
	}
	if o.Blocked != 0 {
		s.blocked = &blocker{state: conditions.State(o.Blocked), reason: "Blocked", message: "blocked", keepPhase: o.KeepPhase}
	}
	if o.Machine {
		m := providers.Machine{Provisioned: o.Provisioned, State: o.Power, Node: "pve1"}
		if o.Address {
			m.Addresses = []string{"10.0.0.5"}
		}
		s.machine = &m
	}
	if o.Progress {
		s.progress = "chose machine hf-ns-box"
	}
	return s
}

// Properties 16 (reconciliation behaviour) and 18 (observability): for
// every combination of observations, the status computeStatus writes is
// kstatus-correct once finalized (no contradicting conditions, every
// condition with a reason, observedGeneration current), and says the same
// as the phase: Ready only for a Ready machine with an address, Finished
// only for a Terminated claim, and a machine that is gone keeps no address.
func TestPropertyClaimStatusIsConsistent(t *testing.T) {
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("any combination of observations", prop.ForAll(
			func(o observations) string {
				s := o.scope()
				c := s.claim
				sum := computeStatus(s, nil)
				if sum == (conditions.Summary{}) {
					return "" // nothing concluded: the conditions stay as they were
				}
				conditions.Set(c, c.Generation, sum)
				c.Status.ObservedGeneration = c.Generation
				if v := conditions.Violations(c, true); len(v) > 0 {
					return fmt.Sprintf("%+v: %s", o, strings.Join(v, "; "))
				}
				phase := c.Status.Phase
				switch {
				case sum.State == conditions.Ready && (phase != hypervisorv1alpha1.MachineReady || s.machine == nil || len(s.machine.Addresses) == 0):
					return fmt.Sprintf("%+v: Ready in phase %s", o, phase)
				case sum.State == conditions.Finished && phase != hypervisorv1alpha1.MachineTerminated:
					return fmt.Sprintf("%+v: Finished in phase %s", o, phase)
				case s.ended != "" && len(c.Status.Addresses) > 0:
					return fmt.Sprintf("%+v: a machine that is gone keeps its addresses", o)
				}
				return ""
			},
			genObservations(),
		))
	})
}

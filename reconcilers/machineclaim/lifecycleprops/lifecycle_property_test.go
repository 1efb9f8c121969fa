package lifecycleprops_test

import (
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/commands"

	"github.com/hyperfleet/hyperfleet/internal/proptest"
)

// Each sequence is stepsPerSequence steps, the last one settle; make test
// runs defaultSequences of them (PROPERTY_CASES runs more) and shrinks a
// failing one at most maxShrinks times, each a replay against the operator.
const (
	stepsPerSequence = 10
	defaultSequences = 4
	maxShrinks       = 8
)

// TestPropertyMachineLifecycleLeavesNothingBehind checks the design's
// properties of the VM lifecycle (6), cleanup through finalizers (7),
// lifecycle policy (10), the Proxmox API (19), the provider interface
// across two providers (24) and shutdown detection (27) as one state
// machine: for any sequence of claims created and deleted, clusters
// deleted, guests powering off, machines failing, Proxmox faults, operator
// kills and leader hand-overs, no claim is ever on two machines, and once
// the operator settles there is no orphan machine, no leaked ISO or
// cloud-init Secret, every deleted claim and every emptied deleted cluster
// is gone, every claim's status matches its machine, and every status the
// operator wrote was kstatus-correct.
func TestPropertyMachineLifecycleLeavesNothingBehind(t *testing.T) {
	cmds := &commands.ProtoCommands{
		NewSystemUnderTestFunc: func(commands.State) commands.SystemUnderTest {
			return newSystem(t)
		},
		DestroySystemUnderTestFunc: func(sut commands.SystemUnderTest) { sut.(*system).destroy() },
		InitialStateGen:            gen0(),
		GenCommandFunc:             genCommand(stepsPerSequence),
	}
	proptest.CheckWith(t, proptest.Stateful(t, defaultSequences, stepsPerSequence, maxShrinks), func(p *gopter.Properties) {
		p.Property("claims leave nothing behind and say what their machine is", commands.Prop(cmds))
	})
}

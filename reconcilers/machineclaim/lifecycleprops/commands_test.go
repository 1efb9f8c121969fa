package lifecycleprops_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/commands"
	"github.com/leanovate/gopter/gen"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// model is what the sequence did so far, as the test knows it without
// asking the operator: which claims exist, which were deleted, which
// clusters were deleted. Commands never change a model; NextState returns
// a new one.
type model struct {
	step            int
	next            int // the next claim's number: names are never reused
	live            []claimRef
	deleted         []string
	deletedClusters []string
}

// claimRef is a claim the sequence made.
type claimRef struct {
	name     string
	template string
	userData bool
}

func (c claimRef) cluster() string {
	if c.template == templateKV {
		return clusterKV
	}
	return clusterPVE
}

func (m model) clusterDeleted(name string) bool { return slices.Contains(m.deletedClusters, name) }

func (m model) isLive(name string) bool {
	return slices.ContainsFunc(m.live, func(c claimRef) bool { return c.name == name })
}

func (m model) String() string {
	return fmt.Sprintf("step %d, live %v, deleted %v, deleted clusters %v", m.step, m.live, m.deleted, m.deletedClusters)
}

// advanced is m one step later, with change applied to a copy.
func advanced(st commands.State, change func(*model)) commands.State {
	m := st.(model)
	m.live = slices.Clone(m.live)
	m.deleted = slices.Clone(m.deleted)
	m.deletedClusters = slices.Clone(m.deletedClusters)
	m.step++
	if change != nil {
		change(&m)
	}
	return m
}

// step is what every command shares: its Run result is the list of what
// was wrong right after it, which for every command but settle is only the
// invariant that holds at every moment (no claim on two machines).
type step struct{}

func (step) PreCondition(commands.State) bool { return true }

func (step) PostCondition(_ commands.State, result commands.Result) *gopter.PropResult {
	v := result.([]string)
	if len(v) == 0 {
		return &gopter.PropResult{Status: gopter.PropTrue}
	}
	return &gopter.PropResult{Status: gopter.PropFalse, Labels: v}
}

func sys(sut commands.SystemUnderTest) *system { return sut.(*system) }

// createClaim makes a claim on either cluster, with its own user data (so
// a Proxmox machine gets an ISO and a KubeVirt one a cloud-init Secret) or
// without.
type createClaim struct {
	step
	claim claimRef
}

func (c createClaim) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", c)
	mc := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.claim.name, Namespace: s.ns},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: c.claim.template}},
	}
	if c.claim.userData {
		mc.Spec.UserData = "#cloud-config\nruncmd:\n  - echo " + c.claim.name + "\n"
	}
	if err := s.c.Create(context.Background(), mc); err != nil {
		return []string{fmt.Sprintf("creating claim %s: %v", c.claim.name, err)}
	}
	return s.twinCheck()
}

func (c createClaim) NextState(st commands.State) commands.State {
	return advanced(st, func(m *model) { m.live = append(m.live, c.claim); m.next++ })
}

// A shrunk sequence may have dropped an earlier create of the same name.
func (c createClaim) PreCondition(st commands.State) bool {
	m := st.(model)
	return !m.isLive(c.claim.name) && !slices.Contains(m.deleted, c.claim.name)
}

func (c createClaim) String() string {
	return fmt.Sprintf("create %s on %s (user data %t)", c.claim.name, c.claim.template, c.claim.userData)
}

// deleteClaim deletes a claim, wherever it is in its life.
type deleteClaim struct {
	step
	name string
}

func (c deleteClaim) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", c)
	mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: s.ns}}
	if err := s.c.Delete(context.Background(), mc); err != nil && !apierrors.IsNotFound(err) {
		return []string{fmt.Sprintf("deleting claim %s: %v", c.name, err)}
	}
	return s.twinCheck()
}

func (c deleteClaim) NextState(st commands.State) commands.State {
	return advanced(st, func(m *model) {
		m.live = slices.DeleteFunc(m.live, func(r claimRef) bool { return r.name == c.name })
		m.deleted = append(m.deleted, c.name)
	})
}

func (c deleteClaim) PreCondition(st commands.State) bool { return st.(model).isLive(c.name) }
func (c deleteClaim) String() string                      { return "delete " + c.name }

// deleteCluster deletes a HypervisorCluster, as GitOps pruning it would,
// whatever its claims are doing.
type deleteCluster struct {
	step
	name string
}

func (c deleteCluster) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", c)
	hc := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: s.ns}}
	if err := s.c.Delete(context.Background(), hc); err != nil && !apierrors.IsNotFound(err) {
		return []string{fmt.Sprintf("deleting cluster %s: %v", c.name, err)}
	}
	return s.twinCheck()
}

func (c deleteCluster) NextState(st commands.State) commands.State {
	return advanced(st, func(m *model) { m.deletedClusters = append(m.deletedClusters, c.name) })
}

func (c deleteCluster) PreCondition(st commands.State) bool {
	return !st.(model).clusterDeleted(c.name)
}
func (c deleteCluster) String() string { return "delete cluster " + c.name }

// machineEvent is something a machine does by itself: its guest powers off
// (an ephemeral runner's job is done), or, on KubeVirt, its VMI fails (a
// virt-launcher crash). A claim without a machine yet is left alone.
type machineEvent struct {
	step
	name string
	fail bool
}

func (c machineEvent) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", c)
	mc := &hypervisorv1alpha1.MachineClaim{}
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: c.name}, mc); err == nil {
		switch {
		case mc.Status.Provider == hypervisorv1alpha1.ProviderProxmox && mc.Status.VMID != nil:
			s.pve.GuestShutdown(int(*mc.Status.VMID))
		case mc.Status.Provider == hypervisorv1alpha1.ProviderKubeVirt && mc.Status.MachineName != "" && c.fail:
			_ = kvSim.FailVMI(s.ns, mc.Status.MachineName) // no VMI yet: nothing happens
		case mc.Status.Provider == hypervisorv1alpha1.ProviderKubeVirt && mc.Status.MachineName != "":
			_ = kvSim.GuestShutdown(s.ns, mc.Status.MachineName)
		}
	}
	return s.twinCheck()
}

func (c machineEvent) NextState(st commands.State) commands.State { return advanced(st, nil) }
func (c machineEvent) PreCondition(st commands.State) bool        { return st.(model).isLive(c.name) }

func (c machineEvent) String() string {
	if c.fail {
		return "machine of " + c.name + " fails"
	}
	return "guest of " + c.name + " powers off"
}

// pveFaults are the Proxmox faults a step may arm, each for one request:
// every step of a claim's life fails once in a while.
var pveFaults = []struct {
	name  string
	fault proxmoxsim.Fault
}{
	{"clone task fails", proxmoxsim.Fault{Operation: proxmoxsim.OpClone, Action: proxmoxsim.FaultTaskFail, Message: "injected: clone failed"}},
	{"clone call 500", proxmoxsim.Fault{Operation: proxmoxsim.OpClone, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "injected"}},
	{"ISO upload task fails", proxmoxsim.Fault{Operation: proxmoxsim.OpUpload, Action: proxmoxsim.FaultTaskFail, Message: "injected: upload failed"}},
	{"ISO delete 500", proxmoxsim.Fault{Operation: proxmoxsim.OpVolumeDelete, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "injected"}},
	{"destroy task fails", proxmoxsim.Fault{Operation: proxmoxsim.OpDelete, Action: proxmoxsim.FaultTaskFail, Message: "injected: destroy failed"}},
	{"destroy call 500", proxmoxsim.Fault{Operation: proxmoxsim.OpDelete, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "injected"}},
	{"start task fails", proxmoxsim.Fault{Operation: proxmoxsim.OpStart, Action: proxmoxsim.FaultTaskFail, Message: "injected: start failed"}},
	{"config locked", proxmoxsim.Fault{Operation: proxmoxsim.OpConfigSet, Action: proxmoxsim.FaultLockError}},
	{"config read 503", proxmoxsim.Fault{Operation: proxmoxsim.OpConfigGet, Action: proxmoxsim.FaultHTTPError, Status: 503}},
	{"status connection dropped", proxmoxsim.Fault{Operation: proxmoxsim.OpVMStatus, Action: proxmoxsim.FaultDrop}},
	{"resources 2 s slow", proxmoxsim.Fault{Operation: proxmoxsim.OpClusterResources, Action: proxmoxsim.FaultDelay, Delay: 2 * time.Second}},
}

// fault arms one Proxmox fault for its next matching request.
type fault struct {
	step
	i, times int
}

func (c fault) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", c)
	f := pveFaults[c.i].fault
	f.Times = c.times
	if err := s.pve.InjectFault(f); err != nil {
		return []string{"arming a fault: " + err.Error()}
	}
	return s.twinCheck()
}

func (c fault) NextState(st commands.State) commands.State { return advanced(st, nil) }
func (c fault) String() string                             { return fmt.Sprintf("Proxmox: %s ×%d", pveFaults[c.i].name, c.times) }

// timePasses moves the claims' clock past every join token's lifetime: a
// machine that has not attested by then is retired, and its SPIRE entry
// and join token must go with it.
type timePasses struct{ step }

func (timePasses) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", timePasses{})
	s.clock.Step(s.t, tokenTTL+time.Second)
	return s.twinCheck()
}

func (timePasses) NextState(st commands.State) commands.State { return advanced(st, nil) }
func (timePasses) String() string                             { return "the join tokens' lifetime passes" }

// restart kills the leader without a word, as the kernel kills a process,
// and starts its successor at once: the successor waits out the Lease.
type restart struct{ step }

func (restart) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", restart{})
	s.op.Kill()
	s.op = s.start()
	return s.twinCheck()
}

func (restart) NextState(st commands.State) commands.State { return advanced(st, nil) }
func (restart) String() string                             { return "operator killed and restarted" }

// leaderChange starts a standby, then stops the leader as a rolling update
// does: it releases its Lease and the standby takes over.
type leaderChange struct{ step }

func (leaderChange) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", leaderChange{})
	standby := s.start()
	time.Sleep(300 * time.Millisecond) // the standby is a candidate by now
	s.op.Stop()
	s.op = standby
	return s.twinCheck()
}

func (leaderChange) NextState(st commands.State) commands.State { return advanced(st, nil) }
func (leaderChange) String() string                             { return "leader hands over to a standby" }

// pause lets the operator work for a while between two steps, so steps
// land at every point of a claim's life, not only at its start.
type pause struct {
	step
	d time.Duration
}

func (c pause) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", c)
	time.Sleep(c.d)
	return s.twinCheck()
}

func (c pause) NextState(st commands.State) commands.State { return advanced(st, nil) }
func (c pause) String() string                             { return "wait " + c.d.String() }

// settleTimeout bounds how long a sequence may take to settle once its
// faults are cleared: well past a finalization deadline plus a sweep.
const settleTimeout = 60 * time.Second

// settle clears any fault still armed, then its postcondition waits until
// the operator has settled — nothing leaked, every claim's status matching
// its machine — or settleTimeout passed, and adds the kstatus check of
// every status the operator wrote in the sequence. The wait is in the
// postcondition because only it sees the model.
type settle struct{ step }

func (settle) Run(sut commands.SystemUnderTest) commands.Result {
	s := sys(sut)
	s.t.Logf("  %s", settle{})
	s.pve.ClearFaults()
	return s
}

func (settle) PostCondition(st commands.State, result commands.Result) *gopter.PropResult {
	s := result.(*system)
	start := time.Now()
	deadline := start.Add(settleTimeout)
	var v []string
	for {
		v = s.settledViolations(st.(model))
		if len(v) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.t.Logf("  settled in %s: %s", time.Since(start).Round(100*time.Millisecond), s.census())
	for _, k := range testenv.KstatusViolations(s.ns) {
		v = append(v, "kstatus: "+k)
	}
	return step{}.PostCondition(st, v)
}

func (settle) NextState(st commands.State) commands.State { return advanced(st, nil) }
func (settle) String() string                             { return "settle" }

// genCommand draws the next step from what the model allows; the last step
// of a sequence is always settle, so every sequence ends checked.
func genCommand(maxSteps int) func(commands.State) gopter.Gen {
	return func(st commands.State) gopter.Gen {
		m := st.(model)
		if m.step >= maxSteps-1 {
			return gen.Const(commands.Command(settle{}))
		}
		name := fmt.Sprintf("c%d", m.next)
		gens := []gen.WeightedGen{
			{Weight: 6, Gen: gen.IntRange(0, 5).Map(func(i int) commands.Command {
				return createClaim{claim: claimRef{name: name, template: []string{templatePVE, templateKV, templateAttested}[i%3], userData: i >= 3}}
			})},
			{Weight: 1, Gen: gen.Const(commands.Command(timePasses{}))},
			{Weight: 3, Gen: gen.IntRange(1, 6).Map(func(i int) commands.Command {
				return pause{d: time.Duration(i) * 400 * time.Millisecond}
			})},
			{Weight: 2, Gen: gen.IntRange(0, 2*len(pveFaults)-1).Map(func(i int) commands.Command {
				return fault{i: i / 2, times: 1 + i%2}
			})},
			{Weight: 1, Gen: gen.Const(commands.Command(restart{}))},
			{Weight: 1, Gen: gen.Const(commands.Command(leaderChange{}))},
			{Weight: 1, Gen: gen.Const(commands.Command(settle{}))},
		}
		if live := m.live; len(live) > 0 {
			gens = append(gens,
				gen.WeightedGen{Weight: 4, Gen: gen.IntRange(0, len(live)-1).Map(func(i int) commands.Command {
					return deleteClaim{name: live[i].name}
				})},
				gen.WeightedGen{Weight: 2, Gen: gen.IntRange(0, 2*len(live)-1).Map(func(i int) commands.Command {
					return machineEvent{name: live[i/2].name, fail: i%2 == 1}
				})})
		}
		var standing []string
		for _, c := range []string{clusterPVE, clusterKV} {
			if !m.clusterDeleted(c) {
				standing = append(standing, c)
			}
		}
		if len(standing) > 0 {
			gens = append(gens, gen.WeightedGen{Weight: 1, Gen: gen.IntRange(0, len(standing)-1).Map(func(i int) commands.Command {
				return deleteCluster{name: standing[i]}
			})})
		}
		return gen.Weighted(gens)
	}
}

// gen0 is the initial model: nothing made yet.
func gen0() gopter.Gen { return gen.Const(model{}) }

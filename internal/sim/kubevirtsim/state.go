package kubevirtsim

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// vmiState is what the simulator remembers about one VMI between reconciles:
// precise phase start times (the API keeps seconds only, too coarse for
// test latencies of tens of milliseconds), its node reservation and, through
// the ipam, its addresses. Everything here can be rebuilt from the API
// objects, so a restarted simulator carries on where the last one stopped.
type vmiState struct {
	uid types.UID
	// since holds when each phase was first seen or written; a stale cache
	// showing an older phase again does not reset the newer one's clock.
	since         map[kubevirtv1.VirtualMachineInstancePhase]time.Time
	deletingSince time.Time
	node          string
}

// startFailure is the simulator's precise copy of a VM's
// status.startFailure, whose retryAfterTimestamp the API keeps in seconds.
type startFailure struct {
	vmUID      types.UID
	vmiUID     types.UID
	count      int
	retryAfter time.Time
}

// stamp turns a time into the whole-second metav1.Time the API server
// stores, so status built in memory compares equal to what is read back and
// an unchanged status is never written again.
func stamp(t time.Time) metav1.Time {
	return metav1.NewTime(t.Truncate(time.Second))
}

// observe brings the simulator's memory of a VMI up to date with the object
// and returns when its current phase began and when its deletion was first
// seen (zero if it is not being deleted).
func (s *Simulator) observe(vmi *kubevirtv1.VirtualMachineInstance, now time.Time) (phaseSince, deletingSince time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(client.ObjectKeyFromObject(vmi), vmi.UID)
	phase := vmi.Status.Phase
	if _, ok := st.since[phase]; !ok {
		st.since[phase] = now
	}
	if vmi.DeletionTimestamp != nil && st.deletingSince.IsZero() {
		st.deletingSince = now
	}
	if vmi.IsFinal() {
		s.releaseLocked(st)
	} else {
		if vmi.Status.NodeName != "" {
			st.node = vmi.Status.NodeName
		}
		var addrs []string
		for _, iface := range vmi.Status.Interfaces {
			addrs = append(addrs, iface.IPs...)
			if len(iface.IPs) == 0 && iface.IP != "" {
				addrs = append(addrs, iface.IP)
			}
		}
		s.ipam.reserve(vmi.UID, addrs)
	}
	return st.since[phase], st.deletingSince
}

// stateLocked returns the state for key, starting afresh when the object
// under that name is a new incarnation.
func (s *Simulator) stateLocked(key types.NamespacedName, uid types.UID) *vmiState {
	st := s.vmis[key]
	if st == nil || st.uid != uid {
		if st != nil {
			s.releaseLocked(st)
		}
		st = &vmiState{uid: uid, since: map[kubevirtv1.VirtualMachineInstancePhase]time.Time{}}
		s.vmis[key] = st
	}
	return st
}

// entered records that the simulator moved a VMI into phase at t.
func (s *Simulator) entered(vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stateLocked(client.ObjectKeyFromObject(vmi), vmi.UID).since[phase] = t
}

// releaseLocked frees a VMI's node slot and addresses, as the pod's deletion
// does in a real cluster.
func (s *Simulator) releaseLocked(st *vmiState) {
	s.ipam.release(st.uid)
	st.node = ""
}

// forgetVMI drops everything remembered about a VMI that no longer exists.
func (s *Simulator) forgetVMI(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.vmis[key]; st != nil {
		s.releaseLocked(st)
		delete(s.vmis, key)
	}
}

// forgetVM drops what is remembered about a VM that no longer exists.
func (s *Simulator) forgetVM(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.startFailures, key)
}

// nodeLoadLocked counts the VMIs holding each node.
func (s *Simulator) nodeLoadLocked() map[string]int {
	load := map[string]int{}
	for _, st := range s.vmis {
		if st.node != "" {
			load[st.node]++
		}
	}
	return load
}

// reserveNode picks a node for the VMI and holds it there, or returns ""
// when no node matches its nodeSelector. Asking again for the same VMI
// returns the same node, so a status write lost to a conflict does not move
// it.
func (s *Simulator) reserveNode(vmi *kubevirtv1.VirtualMachineInstance) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(client.ObjectKeyFromObject(vmi), vmi.UID)
	if st.node != "" {
		return st.node
	}
	st.node = pickNode(s.opts.Nodes, s.nodeLoadLocked(), vmi.Spec.NodeSelector)
	return st.node
}

// allocateIPs returns n guest addresses for the VMI, the same ones on every call.
func (s *Simulator) allocateIPs(vmi *kubevirtv1.VirtualMachineInstance, n int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ipam.allocate(vmi.UID, n)
}

// held reports whether the test holds this VMI in Scheduling.
func (s *Simulator) held(key types.NamespacedName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holdAll || s.holds[key]
}

package kubevirt

import (
	"net"
	"sort"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/hyperfleet/hyperfleet/providers"
)

// machineOf reads a machine's state from its VirtualMachine and instance
// (nil when there is none). KubeVirt restarts an instance that ended when
// the run strategy says so, and that restart is reported as provisioning, not
// as a stop: only an end KubeVirt leaves alone ends the machine.
func machineOf(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) providers.Machine {
	m := providers.Machine{
		Ref:          providers.MachineRef{Name: vm.Name, Namespace: vm.Namespace},
		Owner:        ownerOf(vm),
		Installation: vm.Labels[LabelInstallation],
		ProviderID:   "kubevirt://" + vm.Namespace + "/" + vm.Name,
		UID:          string(vm.UID),
		Provisioned:  true,
	}
	strategy := runStrategy(vm)
	if heldForUserData(vm) && (vmi == nil || vmi.UID == "") {
		// Create has a step left: the next Create call takes it.
		m.State, m.Progress = providers.PowerProvisioning, "made halted; starts once its cloud-init Secret exists"
		m.Provisioned = false
		return m
	}
	if vmi == nil || vmi.UID == "" {
		// No instance: stopped only if nothing will start one. Always
		// always starts one. RerunOnFailure and Once start one for a new VM
		// (KubeVirt has not recorded the strategy in status yet) and after a
		// failure (a start request); after a clean end they leave it off.
		starting := false
		switch strategy {
		case kubevirtv1.RunStrategyAlways:
			starting = true
		case kubevirtv1.RunStrategyRerunOnFailure, kubevirtv1.RunStrategyOnce:
			// Stopped for good only once KubeVirt says so; until then the
			// instance may just not be visible yet.
			starting = vm.Status.RunStrategy != strategy || hasStartRequest(vm) ||
				vm.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusStopped
		case kubevirtv1.RunStrategyManual:
			starting = hasStartRequest(vm)
		}
		if !starting {
			m.State, m.Progress = providers.PowerStopped, "stopped"
			return m
		}
		m.State, m.Progress = providers.PowerProvisioning, "waiting for KubeVirt to create the VirtualMachineInstance"
		if vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusCrashLoopBackOff {
			m.Progress = "KubeVirt waits to restart the failed VirtualMachineInstance (CrashLoopBackOff)"
		}
		return m
	}
	m.Node = vmi.Status.NodeName
	switch vmi.Status.Phase {
	case kubevirtv1.Running:
		m.State, m.Progress = providers.PowerRunning, "running"
		if !vmiReady(vmi) {
			m.Progress = "running; guest not ready yet"
		}
		m.Addresses = addresses(vmi)
	case kubevirtv1.Succeeded:
		m.State, m.Progress = providers.PowerStopped, "the guest shut down"
		if strategy == kubevirtv1.RunStrategyAlways {
			m.State, m.Progress = providers.PowerProvisioning, "the guest shut down; KubeVirt restarts it (runStrategy Always)"
		}
	case kubevirtv1.Failed:
		m.State, m.Progress = providers.PowerFailed, "the VirtualMachineInstance failed"+failureReason(vmi)
		if strategy == kubevirtv1.RunStrategyAlways || strategy == kubevirtv1.RunStrategyRerunOnFailure {
			m.State, m.Progress = providers.PowerProvisioning, "the VirtualMachineInstance failed"+failureReason(vmi)+"; KubeVirt restarts it"
		}
	case kubevirtv1.Pending, kubevirtv1.VmPhaseUnset:
		m.State, m.Progress = providers.PowerProvisioning, "VirtualMachineInstance pending"
	case kubevirtv1.Scheduling:
		m.State, m.Progress = providers.PowerProvisioning, "VirtualMachineInstance scheduling"
	case kubevirtv1.Scheduled:
		m.State, m.Progress = providers.PowerProvisioning, "VirtualMachineInstance scheduled on "+vmi.Status.NodeName+"; starting"
	default:
		m.State, m.Progress = providers.PowerUnknown, "VirtualMachineInstance phase "+string(vmi.Status.Phase)
	}
	if vmi.DeletionTimestamp != nil && m.State == providers.PowerRunning {
		m.State, m.Progress = providers.PowerProvisioning, "the VirtualMachineInstance is shutting down"
	}
	return m
}

func hasStartRequest(vm *kubevirtv1.VirtualMachine) bool {
	for _, r := range vm.Status.StateChangeRequests {
		if r.Action == kubevirtv1.StartRequest {
			return true
		}
	}
	return false
}

// runStrategy is the VM's effective run strategy, the deprecated
// spec.running included.
func runStrategy(vm *kubevirtv1.VirtualMachine) kubevirtv1.VirtualMachineRunStrategy {
	if rs := vm.Spec.RunStrategy; rs != nil {
		return *rs
	}
	if r := vm.Spec.Running; r != nil && !*r {
		return kubevirtv1.RunStrategyHalted
	}
	return kubevirtv1.RunStrategyAlways
}

func vmiReady(vmi *kubevirtv1.VirtualMachineInstance) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstanceReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func failureReason(vmi *kubevirtv1.VirtualMachineInstance) string {
	for _, c := range vmi.Status.Conditions {
		if c.Status != corev1.ConditionTrue && (c.Reason != "" || c.Message != "") {
			if c.Message != "" {
				return ": " + c.Message
			}
			return ": " + c.Reason
		}
	}
	return ""
}

// addresses are the instance's interface addresses, IPv4 before IPv6,
// link-local ones left out; a guest only counts as reachable once the
// instance is Ready (KubeVirt reports the pod IP before the guest is up).
func addresses(vmi *kubevirtv1.VirtualMachineInstance) []string {
	if !vmiReady(vmi) {
		return nil
	}
	seen := map[string]bool{}
	var v4, v6 []string
	add := func(s string) {
		ip := net.ParseIP(s)
		if ip == nil || ip.IsLinkLocalUnicast() || ip.IsLoopback() || seen[s] {
			return
		}
		seen[s] = true
		if ip.To4() != nil {
			v4 = append(v4, s)
		} else {
			v6 = append(v6, s)
		}
	}
	ifaces := append([]kubevirtv1.VirtualMachineInstanceNetworkInterface(nil), vmi.Status.Interfaces...)
	sort.SliceStable(ifaces, func(i, j int) bool { return ifaces[i].Name < ifaces[j].Name })
	for _, iface := range ifaces {
		add(iface.IP)
		for _, ip := range iface.IPs {
			add(ip)
		}
	}
	return append(v4, v6...)
}

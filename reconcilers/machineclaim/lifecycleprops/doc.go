// Package lifecycleprops checks the machine lifecycle as a state machine:
// gopter's commands package generates sequences of what happens to claims
// in the real world — a claim created or deleted, its cluster deleted, the
// guest powering itself off, a hypervisor fault, the operator killed and
// restarted, the leader handing over — runs each against the real API
// server, the Proxmox and KubeVirt simulators and the operator's own
// reconcilers, and checks after the operator settles that nothing leaked
// and every claim's status matches its machine. It has its own control
// plane because it starts and kills operators itself.
package lifecycleprops

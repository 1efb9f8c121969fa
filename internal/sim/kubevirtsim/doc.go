// Package kubevirtsim plays KubeVirt's control plane against a real API
// server, so the operator's KubeVirt provider, the Cyberdesk reconciler, the
// benchmark and `hyperfleet-dev` run end to end without nodes, libvirt or a
// KubeVirt install.
//
// CRDs and Install put the kubevirt.io/v1 VirtualMachine and
// VirtualMachineInstance resources on the API server (namespaced, status
// subresource, KubeVirt's short names and printer columns; spec and status
// keep unknown fields instead of KubeVirt's full schema). Start runs one
// controller-runtime manager of its own that plays:
//
//   - virt-controller's VirtualMachine controller: spec.runStrategy (or the
//     deprecated spec.running) decides whether a VirtualMachineInstance should
//     exist; it is created from spec.template with a controller
//     ownerReference, KubeVirt's finalizer, the kubevirt.io/vm-generation
//     annotation, a stable firmware UUID and the default pod network; it is
//     stopped by deleting it and restarted after Failed/Succeeded as each run
//     strategy demands, with KubeVirt's crash-loop backoff when a VMI fails
//     before ever running. status.stateChangeRequests written by a client
//     (as virt-api does for `virtctl start/stop`) are honoured. VM status is
//     kept as KubeVirt keeps it: created, ready, printableStatus, the Ready
//     condition and the VMI's other conditions, runStrategy, startFailure,
//     observed/desiredGeneration.
//   - virt-controller's VMI controller and the scheduler: Pending →
//     Scheduling → Scheduled on the least-loaded simulated node that matches
//     spec.nodeSelector (otherwise PodScheduled=False/Unschedulable, which the
//     VM shows as ErrorUnschedulable).
//   - virt-handler: Scheduled → Running, then the guest's boot (interface IP
//     addresses from a pod CIDR, Ready, AgentConnected, guestOSInfo), the
//     graceful shutdown of a deleted running VMI (→ Succeeded), and removal
//     of the VMI's finalizers.
//   - kube-controller-manager's garbage collector for VMIs, since the test
//     control plane has none: a VMI whose owning VMs are all gone is
//     deleted, and a VM deleted with foreground or orphan propagation has
//     its VMI deleted or released and the GC's finalizer removed.
//
// Every step runs on a watch event or a delayed requeue (Latencies), never a
// polling loop per VM, so hundreds of VMs cost little; status is written
// through the status subresource with optimistic locking. Tests inject what
// real clusters do to an operator: FailVMI (virt-launcher crashed),
// HangScheduling / HangAllScheduling (no node fits), GuestShutdown (the
// guest powered itself off).
//
// It does not play virt-api (no start/stop/console subresources, admission
// webhooks, defaulting or validation), virt-launcher pods, CDI DataVolumes,
// instance types and preferences, live migration, pause, hotplug,
// ControllerRevisions or Events. Run one Simulator per API server: two
// would fight over the same objects.
package kubevirtsim

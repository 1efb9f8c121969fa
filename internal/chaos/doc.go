// Package chaos is HyperFleet's failover test: two real `hyperfleet run`
// processes with leader election on, a real kube-apiserver and etcd, the
// Proxmox and KubeVirt simulators injecting faults, a workload of
// MachineClaims created and deleted continuously, and the leader SIGKILLed
// at random moments (from a printed seed) while a claim is being created,
// being deleted, or having its cloud-init ISO uploaded.
//
// It proves, from the simulators' own state, that no claim ever got two
// machines (twins), that nothing is left once every claim is gone and the
// orphan grace has passed (orphan VMs, user-data ISOs, cloud-init Secrets),
// and measures each failover. It runs for minutes, so it is a benchmark
// (`make chaos`), not part of `make test`:
//
//	CHAOS_SEED=42 CHAOS_KILLS=50 make chaos
package chaos

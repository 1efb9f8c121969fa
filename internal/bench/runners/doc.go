// Package runners measures how fast a burst of queued jobs turns into
// runners: N workflow_job "queued" deliveries, signed and
// sent by githubsim to the operator's webhook receiver as GitHub sends
// them, and for each the time to its MachineClaim's provider Create call
// (the KubeVirt VirtualMachine POST, timestamped as it leaves the
// operator), to its runner's registration on githubsim, and to a runner
// taking the job. The real manager runs in process against a real
// kube-apiserver, kubevirtsim and githubsim. `make bench-runners` runs it;
// the figures are printed, never asserted.
package runners

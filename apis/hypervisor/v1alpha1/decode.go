package v1alpha1

import "github.com/hyperfleet/hyperfleet/apis/meta"

// Each kind decodes itself tolerantly (meta.UnmarshalTolerant), so one object
// stored under a looser schema never fails the list, or the watch, that
// carries it: its undecodable fields are left zero and listed in
// DecodeFailures, and the reconcilers refuse to act on it. The alias types
// have the fields but not the method, so the strict first attempt does not
// recurse.

type (
	hypervisorClusterJSON         HypervisorCluster
	hypervisorMachineTemplateJSON HypervisorMachineTemplate
	machineClaimJSON              MachineClaim
	runnerPoolJSON                RunnerPool
	runnerJobJSON                 RunnerJob
)

// UnmarshalJSON decodes a stored HypervisorCluster, tolerating undecodable fields.
func (o *HypervisorCluster) UnmarshalJSON(b []byte) (err error) {
	o.DecodeFailures, err = meta.UnmarshalTolerant(b, (*hypervisorClusterJSON)(o))
	return err
}

// UnmarshalJSON decodes a stored HypervisorMachineTemplate, tolerating undecodable fields.
func (o *HypervisorMachineTemplate) UnmarshalJSON(b []byte) (err error) {
	o.DecodeFailures, err = meta.UnmarshalTolerant(b, (*hypervisorMachineTemplateJSON)(o))
	return err
}

// UnmarshalJSON decodes a stored MachineClaim, tolerating undecodable fields.
func (o *MachineClaim) UnmarshalJSON(b []byte) (err error) {
	o.DecodeFailures, err = meta.UnmarshalTolerant(b, (*machineClaimJSON)(o))
	return err
}

// UnmarshalJSON decodes a stored RunnerPool, tolerating undecodable fields.
func (o *RunnerPool) UnmarshalJSON(b []byte) (err error) {
	o.DecodeFailures, err = meta.UnmarshalTolerant(b, (*runnerPoolJSON)(o))
	return err
}

// UnmarshalJSON decodes a stored RunnerJob, tolerating undecodable fields.
func (o *RunnerJob) UnmarshalJSON(b []byte) (err error) {
	o.DecodeFailures, err = meta.UnmarshalTolerant(b, (*runnerJobJSON)(o))
	return err
}

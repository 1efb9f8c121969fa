package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Conditions accessors, so shared status helpers work on every kind.

func (o *HypervisorCluster) GetConditions() []metav1.Condition  { return o.Status.Conditions }
func (o *HypervisorCluster) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

func (o *HypervisorMachineTemplate) GetConditions() []metav1.Condition  { return o.Status.Conditions }
func (o *HypervisorMachineTemplate) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

func (o *MachineClaim) GetConditions() []metav1.Condition  { return o.Status.Conditions }
func (o *MachineClaim) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

func (o *RunnerPool) GetConditions() []metav1.Condition  { return o.Status.Conditions }
func (o *RunnerPool) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// Observed-generation accessors, so the shared finalize-status step stamps
// status.observedGeneration on every kind.

func (o *HypervisorCluster) GetObservedGeneration() int64  { return o.Status.ObservedGeneration }
func (o *HypervisorCluster) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

func (o *HypervisorMachineTemplate) GetObservedGeneration() int64  { return o.Status.ObservedGeneration }
func (o *HypervisorMachineTemplate) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

func (o *MachineClaim) GetObservedGeneration() int64  { return o.Status.ObservedGeneration }
func (o *MachineClaim) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

func (o *RunnerPool) GetObservedGeneration() int64  { return o.Status.ObservedGeneration }
func (o *RunnerPool) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// Provider is the provider the template is written for: the one provider
// section it sets (the API server insists on exactly one), whose field name
// is the provider's name (spec.proxmox, spec.kubevirt).
func (s *HypervisorMachineTemplateSpec) Provider() ProviderType {
	if s.KubeVirt != nil {
		return ProviderKubeVirt
	}
	return ProviderProxmox
}

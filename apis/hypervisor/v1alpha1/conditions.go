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

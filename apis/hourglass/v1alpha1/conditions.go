package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Conditions accessors, so shared status helpers work on every kind.

func (o *HourglassExecutor) GetConditions() []metav1.Condition  { return o.Status.Conditions }
func (o *HourglassExecutor) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

func (o *Performer) GetConditions() []metav1.Condition  { return o.Status.Conditions }
func (o *Performer) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

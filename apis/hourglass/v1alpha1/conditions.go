package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Conditions accessors, so shared status helpers work on every kind.

func (o *HourglassExecutor) GetConditions() []metav1.Condition  { return o.Status.Conditions }
func (o *HourglassExecutor) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

func (o *Performer) GetConditions() []metav1.Condition  { return o.Status.Conditions }
func (o *Performer) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// Observed-generation accessors, so the shared finalize-status step stamps
// status.observedGeneration on every kind.

func (o *HourglassExecutor) GetObservedGeneration() int64  { return o.Status.ObservedGeneration }
func (o *HourglassExecutor) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

func (o *Performer) GetObservedGeneration() int64  { return o.Status.ObservedGeneration }
func (o *Performer) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

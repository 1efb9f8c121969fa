package performer

import (
	corev1 "k8s.io/api/core/v1"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// ForgetAdoptions drops what adoptLegacy remembers, as a restart of the
// operator does, so a suite can show what a new process finds.
func ForgetAdoptions(r *Reconciler) {
	r.adopted.Clear()
}

// FirstPod is the Pod create makes first for p's spec, named.
func FirstPod(r *Reconciler, p *hourglassv1alpha1.Performer) (*corev1.Pod, error) {
	pod, hash, err := desiredPod(p, r.Placement)
	if err != nil {
		return nil, err
	}
	pod.Name, pod.GenerateName = firstPodName(p, hash), ""
	return pod, nil
}

// MarkAdopted records that adoptLegacy looked for p's Pods in this process.
func MarkAdopted(r *Reconciler, p *hourglassv1alpha1.Performer) {
	r.adopted.Store(p, adoptListed)
}

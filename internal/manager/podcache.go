package manager

import (
	corev1 "k8s.io/api/core/v1"
)

// The performer reconciler is the one reader of cached Pods (the cache
// holds only the operator's, which are performer Pods). It reads their
// metadata, and of the spec only the node, the node selector, the runtime
// class and each container's name, image, ports and resource limits (for
// the Unschedulable message and the gRPC port in the starting one); of the
// status the phase, reason, message, conditions and each container's
// name, image, ready flag and states. It deletes a Pod by name and UID and
// never sends a cached one back with Update. The rest of a Pod — its
// environment, probes, volumes (the projected service account token),
// tolerations, security contexts, every container status's mounts and
// resources — is most of what a cached Pod holds, at 1,000 Performers the
// largest part of the operator's heap after the Performers themselves.

// slimPod drops what the performer reconciler never reads from a cached
// Pod, and its managedFields.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	spec := pod.Spec
	containers := make([]corev1.Container, len(spec.Containers))
	for i, c := range spec.Containers {
		containers[i] = corev1.Container{Name: c.Name, Image: c.Image, Ports: c.Ports,
			Resources: corev1.ResourceRequirements{Limits: c.Resources.Limits}}
	}
	pod.Spec = corev1.PodSpec{Containers: containers, NodeName: spec.NodeName,
		NodeSelector: spec.NodeSelector, RuntimeClassName: spec.RuntimeClassName}
	status := pod.Status
	statuses := make([]corev1.ContainerStatus, len(status.ContainerStatuses))
	for i, cs := range status.ContainerStatuses {
		statuses[i] = corev1.ContainerStatus{Name: cs.Name, Image: cs.Image, Ready: cs.Ready,
			State: cs.State, LastTerminationState: cs.LastTerminationState}
	}
	pod.Status = corev1.PodStatus{Phase: status.Phase, Reason: status.Reason, Message: status.Message,
		Conditions: status.Conditions, ContainerStatuses: statuses}
	return obj, nil
}

// slimService drops what the performer reconciler never reads from a
// cached Service (its status, cluster IPs, IP families, session affinity,
// traffic policies), and its managedFields. It reads the metadata (owner,
// labels, the created-before-apply annotation) and, of the spec, the type,
// the selector and the ports; it applies its own Service rather than send
// a cached one back.
func slimService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	svc.ManagedFields = nil
	spec := svc.Spec
	svc.Spec = corev1.ServiceSpec{Type: spec.Type, Selector: spec.Selector, Ports: spec.Ports}
	svc.Status = corev1.ServiceStatus{}
	return obj, nil
}

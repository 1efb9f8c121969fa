// Package v1alpha1 holds the cyberdesk.io/v1alpha1 API: time-limited desktop
// VMs on KubeVirt, kept compatible with the original Kopf operator's resources.
//
// +kubebuilder:object:generate=true
// +groupName=cyberdesk.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "cyberdesk.io", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

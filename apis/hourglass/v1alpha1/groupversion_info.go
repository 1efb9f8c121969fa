// Package v1alpha1 holds the hourglass.eigenlayer.io/v1alpha1 API: the
// Hourglass executor of an EigenLayer AVS (HourglassExecutor) and the
// performers it sends tasks to (Performer).
//
// +kubebuilder:object:generate=true
// +groupName=hourglass.eigenlayer.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "hourglass.eigenlayer.io", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

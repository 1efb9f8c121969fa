// Package v1alpha1 holds the hypervisor.hyperfleet.io/v1alpha1 API: the
// hypervisors HyperFleet talks to (HypervisorCluster), the machine shapes it
// clones (HypervisorMachineTemplate), single machines (MachineClaim) and pools
// of GitHub Actions runners (RunnerPool).
//
// +kubebuilder:object:generate=true
// +groupName=hypervisor.hyperfleet.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "hypervisor.hyperfleet.io", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

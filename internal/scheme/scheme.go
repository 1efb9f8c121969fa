// Package scheme builds the runtime.Scheme holding every type the operator
// reads or writes.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// New returns a scheme with the Kubernetes built-in types, KubeVirt's
// VirtualMachine types (the kubevirt provider and Cyberdesk read and write
// them; not in the Hourglass build), and every HyperFleet API.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(hypervisorv1alpha1.AddToScheme(s))
	utilruntime.Must(cyberdeskv1alpha1.AddToScheme(s))
	utilruntime.Must(hourglassv1alpha1.AddToScheme(s))
	addKubeVirt(s)
	return s
}

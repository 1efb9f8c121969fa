package performer

import (
	"fmt"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// Labels and annotations on what the reconciler makes. The first two are the
// original Hourglass operator's, kept so selectors written for it still match.
const (
	// LabelApp is the original operator's app label.
	LabelApp = "app"
	// LabelPerformer names the Performer a Pod or Service belongs to.
	LabelPerformer = "hourglass.eigenlayer.io/performer"
	// LabelTemplateHash tells a Pod's revision: a hash of its spec. The
	// Service selects the serving revision through it.
	LabelTemplateHash = "hourglass.eigenlayer.io/template-hash"
	// AnnotationVersion records spec.version on the Pod (a version may be
	// longer than a label value may be).
	AnnotationVersion = "hourglass.eigenlayer.io/version"

	labelName     = "app.kubernetes.io/name"
	labelInstance = "app.kubernetes.io/instance"
	appName       = "hourglass-performer"

	// DefaultGRPCPort is used when spec.config.grpcPort is unset (the CRD
	// defaults it, but objects stored before the default existed lack it).
	DefaultGRPCPort int32 = 8080
	// DefaultClusterDomain is the DNS suffix of Services.
	DefaultClusterDomain = "cluster.local"
	// containerName is the performer container's name, as in the original.
	containerName = "performer"
	// portName names the gRPC port; the Service targets it by name, so a
	// changed port routes to whichever revision serves.
	portName = "grpc"
)

// ServiceName is the Service of a Performer: performer-<name>, as the
// original operator named it, so executors keep finding it.
func ServiceName(performerName string) string { return "performer-" + performerName }

// DNSName is the Service's stable DNS name.
func DNSName(p *hourglassv1alpha1.Performer, clusterDomain string) string {
	if clusterDomain == "" {
		clusterDomain = DefaultClusterDomain
	}
	return fmt.Sprintf("%s.%s.svc.%s", ServiceName(p.Name), p.Namespace, clusterDomain)
}

// GRPCPort is the performer's gRPC port.
func GRPCPort(p *hourglassv1alpha1.Performer) int32 {
	if p.Spec.Config.GRPCPort > 0 {
		return p.Spec.Config.GRPCPort
	}
	return DefaultGRPCPort
}

// Endpoint is host:port an executor dials.
func Endpoint(p *hourglassv1alpha1.Performer, clusterDomain string) string {
	return fmt.Sprintf("%s:%d", DNSName(p, clusterDomain), GRPCPort(p))
}

// selectorLabels pick every Pod of a Performer, of any revision.
func selectorLabels(p *hourglassv1alpha1.Performer) map[string]string {
	return map[string]string{LabelPerformer: p.Name}
}

// commonLabels go on the Pods and the Service.
func commonLabels(p *hourglassv1alpha1.Performer) map[string]string {
	return map[string]string{
		LabelApp:       appName,
		LabelPerformer: p.Name,
		labelName:      appName,
		labelInstance:  p.Name,
		// The operator's cache selects on it: a Pod or Service without it
		// is invisible to the reconciler (see adoptLegacy).
		meta.ManagedByLabel: meta.ManagedByValue,
	}
}

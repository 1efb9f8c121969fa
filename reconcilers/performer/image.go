package performer

import (
	"strings"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// imageRef is the image the container runs. An image that carries a tag or
// digest is used as given, as the original operator did and as the
// executor writes it (repository:tag, with spec.version the same tag);
// a bare repository takes spec.version as its tag. The API server refuses
// a bare repository without a version.
func imageRef(p *hourglassv1alpha1.Performer) string {
	img := p.Spec.Image
	if _, ok := imageVersion(img); ok || p.Spec.Version == "" {
		return img
	}
	return img + ":" + p.Spec.Version
}

// Version is the performer's version as the status and events report it:
// spec.version, else the image's own tag or digest.
func Version(p *hourglassv1alpha1.Performer) string {
	if p.Spec.Version != "" {
		return p.Spec.Version
	}
	v, _ := imageVersion(p.Spec.Image)
	return v
}

// imageVersion is the digest or tag an image reference carries. A colon
// before the last slash is a registry's port, not a tag.
func imageVersion(img string) (string, bool) {
	if i := strings.Index(img, "@"); i >= 0 {
		return img[i+1:], true
	}
	last := img[strings.LastIndex(img, "/")+1:]
	if i := strings.Index(last, ":"); i >= 0 {
		return last[i+1:], true
	}
	return "", false
}

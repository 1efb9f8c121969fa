package performer

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// The performer Pod meets the restricted Pod Security Standard unless the
// Performer opts out for an image that must run as root or needs a
// capability. Both profiles keep seccomp RuntimeDefault and forbid
// privilege escalation: no performer needs either, and a namespace that
// enforces baseline accepts them.

func restricted(profile hourglassv1alpha1.PodSecurityProfile) bool {
	return profile != hourglassv1alpha1.PodSecurityBaseline
}

// podSecurity is the Pod's security context. runAsNonRoot is set for the
// whole Pod: the kubelet then refuses to start an image whose user is root
// (CreateContainerConfigError) rather than run it as root.
func podSecurity(profile hourglassv1alpha1.PodSecurityProfile) *corev1.PodSecurityContext {
	sc := &corev1.PodSecurityContext{
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if restricted(profile) {
		sc.RunAsNonRoot = ptr.To(true)
	}
	return sc
}

// containerSecurity is the performer container's security context.
func containerSecurity(profile hourglassv1alpha1.PodSecurityProfile) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)}
	if restricted(profile) {
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	}
	return sc
}

// containerConfigHint says what to fix when the kubelet cannot start the
// container. Its message for a root image under runAsNonRoot ("container
// has runAsNonRoot and image will run as root") names the profile's
// requirement, so the hint names the opt-out; anything else is most often
// a missing Secret or ConfigMap key.
func containerConfigHint(kubeletMessage string) string {
	if strings.Contains(kubeletMessage, "runAsNonRoot") {
		return "the image runs as root, which the restricted Pod Security profile forbids: use an image with a non-root user, or set spec.podSecurityProfile: Baseline"
	}
	return "check that the Secrets and ConfigMaps in spec.config.env, environmentFrom and envFrom exist"
}

package performer

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// containerEnv joins the variables of both shapes: the original
// operator's environment map (sorted, so the same spec always makes the
// same Pod and revision hash) and environmentFrom list, then env, which
// may refer to them as $(NAME). The API server refuses a name set twice.
func containerEnv(cfg *hourglassv1alpha1.PerformerConfig) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, name := range slices.Sorted(maps.Keys(cfg.Environment)) {
		out = append(out, corev1.EnvVar{Name: name, Value: cfg.Environment[name]})
	}
	for _, e := range cfg.EnvironmentFrom {
		out = append(out, corev1.EnvVar{Name: e.Name, ValueFrom: valueFrom(e.ValueFrom)})
	}
	return append(out, cfg.Env...)
}

func valueFrom(v hourglassv1alpha1.EnvironmentValueFrom) *corev1.EnvVarSource {
	switch {
	case v.SecretKeyRef != nil:
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: v.SecretKeyRef.Name}, Key: v.SecretKeyRef.Key}}
	case v.ConfigMapKeyRef != nil:
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: v.ConfigMapKeyRef.Name}, Key: v.ConfigMapKeyRef.Key}}
	}
	return nil
}

// serviceAccountName is the Pod's service account from either place: ours
// (spec.serviceAccountName) or the original operator's
// (spec.config.serviceAccountName). The API server refuses the two naming
// different accounts.
func serviceAccountName(p *hourglassv1alpha1.Performer) string {
	if p.Spec.ServiceAccountName != "" {
		return p.Spec.ServiceAccountName
	}
	return p.Spec.Config.ServiceAccountName
}

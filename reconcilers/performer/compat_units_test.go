package performer

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// Both image shapes: the original's tagged or digested image as given, ours
// with version as its tag; a registry's port is not a tag.
func TestImageRef(t *testing.T) {
	for _, tc := range []struct{ image, version, ref, shown string }{
		{"ghcr.io/x/perf", "v1", "ghcr.io/x/perf:v1", "v1"},
		{"registry:5000/team/perf", "v1", "registry:5000/team/perf:v1", "v1"},
		{"registry:5000/team/perf:v2", "v2", "registry:5000/team/perf:v2", "v2"},
		{"myavs/performer:v1.0.0", "", "myavs/performer:v1.0.0", "v1.0.0"},
		{"ghcr.io/x/y@sha256:abc", "v3", "ghcr.io/x/y@sha256:abc", "v3"},
		{"ghcr.io/x/y@sha256:abc", "", "ghcr.io/x/y@sha256:abc", "sha256:abc"},
	} {
		p := perf()
		p.Spec.Image, p.Spec.Version = tc.image, tc.version
		if got := imageRef(p); got != tc.ref {
			t.Errorf("imageRef(%s, %s) = %s, want %s", tc.image, tc.version, got, tc.ref)
		}
		if got := Version(p); got != tc.shown {
			t.Errorf("Version(%s, %s) = %s, want %s", tc.image, tc.version, got, tc.shown)
		}
	}
}

// The variables of both shapes, in an order that does not depend on map
// iteration (the revision hash must not change by chance).
func TestContainerEnvBothShapes(t *testing.T) {
	cfg := &hourglassv1alpha1.PerformerConfig{
		Environment: map[string]string{"B": "2", "A": "1", "C": "3"},
		EnvironmentFrom: []hourglassv1alpha1.EnvironmentFromSource{{Name: "S",
			ValueFrom: hourglassv1alpha1.EnvironmentValueFrom{SecretKeyRef: &hourglassv1alpha1.KeySelector{Name: "sec", Key: "k"}}}},
		Env: []corev1.EnvVar{{Name: "Z", Value: "$(A)"}},
	}
	want := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}, {Name: "C", Value: "3"},
		{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "k"}}},
		{Name: "Z", Value: "$(A)"}}
	for range 20 {
		if got := containerEnv(cfg); !equality.Semantic.DeepEqual(got, want) {
			t.Fatalf("env = %+v, want %+v", got, want)
		}
	}
}

// Restricted by default; Baseline keeps seccomp and no privilege
// escalation but lets the image run as root with its capabilities.
func TestPodSecurityProfiles(t *testing.T) {
	pod, _, err := desiredPod(perf(), DefaultPlacement())
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0].SecurityContext
	if ps := pod.Spec.SecurityContext; ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		*c.AllowPrivilegeEscalation || c.Capabilities == nil || len(c.Capabilities.Drop) != 1 || c.Capabilities.Drop[0] != "ALL" {
		t.Errorf("restricted: pod %+v container %+v", ps, c)
	}
	p := perf()
	p.Spec.PodSecurityProfile = hourglassv1alpha1.PodSecurityBaseline
	pod, _, err = desiredPod(p, DefaultPlacement())
	if err != nil {
		t.Fatal(err)
	}
	c = pod.Spec.Containers[0].SecurityContext
	if ps := pod.Spec.SecurityContext; ps.RunAsNonRoot != nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		*c.AllowPrivilegeEscalation || c.Capabilities != nil {
		t.Errorf("baseline: pod %+v container %+v", ps, c)
	}
}

// status.ready follows the serving Pod; readyTime is when it last turned
// true, and stays; lastUpgrade is when the Service last moved.
func TestReadinessFields(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cur := testPod("cur", "b", ready, t0)
	s := &scope{perf: perf(), now: t0, current: cur, serving: cur, serviceReady: true, pendingTimeout: DefaultPendingTimeout}
	computeStatus(s, nil)
	st := s.perf.Status
	if !st.Ready || st.ReadyTime == nil || !st.ReadyTime.Time.Equal(t0) || st.LastUpgrade != nil {
		t.Fatalf("first Ready: %+v", st)
	}
	s2 := &scope{perf: s.perf, now: t0.Add(time.Minute), current: cur, serving: cur, serviceReady: true, upgraded: true, pendingTimeout: DefaultPendingTimeout}
	computeStatus(s2, nil)
	if st := s2.perf.Status; !st.Ready || !st.ReadyTime.Time.Equal(t0) || st.LastUpgrade == nil || !st.LastUpgrade.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("still Ready after an upgrade: %+v", st)
	}
	s3 := &scope{perf: s.perf, now: t0.Add(2 * time.Minute), current: testPod("cur", "b", running, t0), pendingTimeout: DefaultPendingTimeout}
	computeStatus(s3, nil)
	if st := s3.perf.Status; st.Ready {
		t.Errorf("ready with no serving Pod: %+v", st)
	}
}

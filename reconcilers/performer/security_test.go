package performer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/performer"
)

// enforce labels the test's namespace so the API server's PodSecurity
// admission refuses any Pod that does not meet level.
func (e *env) enforce(level string) {
	e.t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":%q,"pod-security.kubernetes.io/enforce-version":"latest"}}}`, level)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}
	if err := e.c.Patch(context.Background(), ns, client.RawPatch(types.MergePatchType, patch)); err != nil {
		e.t.Fatalf("labelling namespace %s: %v", e.ns, err)
	}
}

// In a namespace that enforces the restricted Pod Security Standard, a
// Performer's Pod is admitted and serves: the real API server's admission
// is the judge. One that opts out (Baseline) is refused there, saying why.
func TestRestrictedPodSecurity(t *testing.T) {
	e := newEnv(t)
	e.enforce("restricted")
	e.performer("strict")
	p := e.waitReason("strict", performer.ReasonServing, 30*time.Second)
	if !p.Status.Ready {
		t.Errorf("status.ready false while Serving: %s", describe(p))
	}

	e.performer("rooted", func(p *hourglassv1alpha1.Performer) {
		p.Spec.PodSecurityProfile = hourglassv1alpha1.PodSecurityBaseline
	})
	rooted := e.waitReason("rooted", performer.ReasonPodRejected, 20*time.Second)
	if msg := findCondition(rooted, "Ready").Message; !strings.Contains(msg, "restricted") {
		t.Errorf("rejection: %s", describe(rooted))
	}
}

// The opt-out: a Baseline Performer, whose image may run as root, serves in
// a namespace that enforces baseline.
func TestBaselineOptOut(t *testing.T) {
	e := newEnv(t)
	e.enforce("baseline")
	e.performer("rooted", func(p *hourglassv1alpha1.Performer) {
		p.Spec.PodSecurityProfile = hourglassv1alpha1.PodSecurityBaseline
	})
	e.waitReason("rooted", performer.ReasonServing, 30*time.Second)
	pod := e.waitPod("rooted", 10*time.Second, anyPod)
	if pod.Spec.SecurityContext.RunAsNonRoot != nil || pod.Spec.Containers[0].SecurityContext.Capabilities != nil {
		t.Errorf("Baseline Pod security: %+v %+v", pod.Spec.SecurityContext, pod.Spec.Containers[0].SecurityContext)
	}
}

// A namespace's Performers share one NetworkPolicy that admits only
// executor Pods (ours and the original chart's) to their Pods' gRPC port:
// made with the first Performer, kept while one is left, made again if
// someone deletes it, and deleted with the last Performer. A policy an
// earlier version made for one Performer (performer-<name>, owned by it)
// is removed. No CNI enforces it in the test cluster; this checks the
// objects.
func TestNetworkPolicy(t *testing.T) {
	e := newEnv(t)
	fenced := e.performer("fenced")
	// An earlier version's own policy for "fenced".
	legacy := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: performer.ServiceName("fenced"), Namespace: e.ns,
		Labels: map[string]string{meta.ManagedByLabel: meta.ManagedByValue}}}
	if err := controllerutil.SetControllerReference(fenced, legacy, testenv.Scheme()); err != nil {
		t.Fatal(err)
	}
	legacy.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{performer.LabelPerformer: "fenced"}}
	if err := e.c.Create(context.Background(), legacy); err != nil {
		t.Fatal(err)
	}
	second := e.performer("second", func(p *hourglassv1alpha1.Performer) { p.Spec.Config.GRPCPort = 9090 })
	np := &networkingv1.NetworkPolicy{}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		err := e.get(performer.NetworkPolicyName, np)
		return err == nil, fmt.Sprintf("NetworkPolicy: %v", err)
	})
	port := intstr.FromString("grpc")
	tcp := corev1.ProtocolTCP
	want := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "hourglass-performer", meta.ManagedByLabel: meta.ManagedByValue}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "hourglass-executor"}}},
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "hourglass", "component": "executor"}}},
			},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
		}},
	}
	if !equality.Semantic.DeepEqual(np.Spec, want) {
		t.Errorf("NetworkPolicy spec = %+v, want %+v", np.Spec, want)
	}
	if len(np.OwnerReferences) != 0 {
		t.Errorf("NetworkPolicy owners = %v, want none: it is the namespace's", np.OwnerReferences)
	}
	// Both Performers' Pods carry the labels the policy selects, and name
	// their port as it admits, whatever its number.
	for _, name := range []string{"fenced", "second"} {
		pod := e.waitPod(name, 20*time.Second, anyPod)
		sel, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if !sel.Matches(labels.Set(pod.Labels)) || pod.Spec.Containers[0].Ports[0].Name != "grpc" {
			t.Errorf("Pod %s labels %v ports %v: not selected, or its port not named grpc", pod.Name, pod.Labels, pod.Spec.Containers[0].Ports)
		}
	}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		err := e.get(legacy.Name, &networkingv1.NetworkPolicy{})
		return isGone(err), fmt.Sprintf("the earlier version's per-Performer policy: %v", err)
	})

	// Someone deletes it: it is made again.
	if err := e.c.Delete(context.Background(), np); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		again := &networkingv1.NetworkPolicy{}
		err := e.get(performer.NetworkPolicyName, again)
		return err == nil && again.UID != np.UID, fmt.Sprintf("NetworkPolicy after its deletion: %v", err)
	})

	// One Performer goes: the policy stays for the other. The last goes: so
	// does the policy.
	if err := e.c.Delete(context.Background(), fenced); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		err := e.get("fenced", &hourglassv1alpha1.Performer{})
		return isGone(err), fmt.Sprintf("Performer fenced: %v", err)
	})
	eventually.That(t, 5*time.Second, func() (bool, string) {
		err := e.get(performer.NetworkPolicyName, &networkingv1.NetworkPolicy{})
		return err == nil, fmt.Sprintf("NetworkPolicy with one Performer left: %v", err)
	})
	if err := e.c.Delete(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := e.get(performer.NetworkPolicyName, &networkingv1.NetworkPolicy{})
		return isGone(err), fmt.Sprintf("NetworkPolicy after the last Performer was deleted: %v", err)
	})
}

// Where the two shapes say different things, the API server refuses the
// Performer, naming both fields; a bare image needs a version.
func TestBothShapesConflictRefused(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		mutate func(*hourglassv1alpha1.Performer)
		want   string
	}{
		{"env-twice", func(p *hourglassv1alpha1.Performer) {
			p.Spec.Config.Env = []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}}
			p.Spec.Config.Environment = map[string]string{"LOG_LEVEL": "debug"}
		}, "spec.config.env and spec.config.environment set the same variable"},
		{"env-from-twice", func(p *hourglassv1alpha1.Performer) {
			p.Spec.Config.Env = []corev1.EnvVar{{Name: "API_KEY", Value: "x"}}
			p.Spec.Config.EnvironmentFrom = []hourglassv1alpha1.EnvironmentFromSource{{Name: "API_KEY",
				ValueFrom: hourglassv1alpha1.EnvironmentValueFrom{SecretKeyRef: &hourglassv1alpha1.KeySelector{Name: "s", Key: "k"}}}}
		}, "spec.config.environmentFrom and spec.config.env set the same variable"},
		{"env-from-no-ref", func(p *hourglassv1alpha1.Performer) {
			p.Spec.Config.EnvironmentFrom = []hourglassv1alpha1.EnvironmentFromSource{{Name: "API_KEY"}}
		}, "needs exactly one of secretKeyRef and configMapKeyRef"},
		{"two-accounts", func(p *hourglassv1alpha1.Performer) {
			p.Spec.ServiceAccountName, p.Spec.Config.ServiceAccountName = "a", "b"
		}, "spec.serviceAccountName and spec.config.serviceAccountName name different service accounts"},
		{"two-runtimes", func(p *hourglassv1alpha1.Performer) {
			p.Spec.Scheduling = &hourglassv1alpha1.Scheduling{RuntimeClass: ptrTo("a"), RuntimeClassName: ptrTo("b")}
		}, "spec.scheduling.runtimeClass and spec.scheduling.runtimeClassName name different runtime classes"},
		{"bare-image", func(p *hourglassv1alpha1.Performer) { p.Spec.Version = "" },
			"spec.version is required when spec.image has no tag or digest"},
	} {
		p := &hourglassv1alpha1.Performer{
			ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: e.ns},
			Spec: hourglassv1alpha1.PerformerSpec{AVSAddress: "0x4444444444444444444444444444444444444444",
				Image: "ghcr.io/example/avs-performer", Version: "v1.0.0"},
		}
		tc.mutate(p)
		if err := e.c.Create(context.Background(), p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it refused with %q", tc.name, err, tc.want)
		}
	}
	// The same value in both places merges: one account, one runtime class.
	ensureRuntimeClass(t, "hyperfleet-test-same")
	e.create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "same"}})
	e.performer("merged", func(p *hourglassv1alpha1.Performer) {
		p.Spec.ServiceAccountName, p.Spec.Config.ServiceAccountName = "same", "same"
		p.Spec.Scheduling = &hourglassv1alpha1.Scheduling{RuntimeClass: ptrTo("hyperfleet-test-same"), RuntimeClassName: ptrTo("hyperfleet-test-same")}
	})
	pod := e.waitPod("merged", 20*time.Second, anyPod)
	if pod.Spec.ServiceAccountName != "same" || pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "hyperfleet-test-same" {
		t.Errorf("merged: account %q runtime class %v", pod.Spec.ServiceAccountName, pod.Spec.RuntimeClassName)
	}
}

package gitops_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// The folders a GitOps tool applies: the base, each overlay, the Argo CD
// Applications and each environment's Flux objects.
func appliedDirs() []string {
	dirs := []string{gitops.BaseDir}
	for _, env := range gitops.Overlays {
		dirs = append(dirs, "overlays/"+env, "flux/"+env)
	}
	return append(dirs, "argocd")
}

// Every object the GitOps tools would apply is accepted by a real API server
// holding our CRDs and the real ExternalSecret, prometheus-operator, Flux and
// Argo CD CRDs: schema, CEL rules, RBAC objects, Pod templates — a server-side
// dry-run apply, as Argo CD (ServerSideApply) and Flux do.
func TestEveryManifestAppliesServerSide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testenv.Client()
	for _, ns := range []string{"argocd", "flux-system"} {
		createNamespace(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	for _, dir := range appliedDirs() {
		t.Run(dir, func(t *testing.T) {
			objs := built(t, dir)
			if len(objs) == 0 {
				t.Fatal("builds to nothing")
			}
			// Namespaced objects need their namespace to exist, dry run or not.
			for _, u := range objs {
				if u.GetKind() == "Namespace" {
					ns := &corev1.Namespace{}
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ns); err != nil {
						t.Fatal(err)
					}
					createNamespace(t, ns)
				}
			}
			for _, u := range objs {
				if err := apply(ctx, c, u.DeepCopy(), true); err != nil {
					t.Errorf("%s: %v", gitops.ID(u), err)
				}
			}
		})
	}
}

// The manager's Pod meets the restricted Pod Security Standard: the API
// server's PodSecurity admission, enforcing restricted in hyperfleet-system
// (the Namespace's labels), admits the Pod each overlay's Deployment makes.
func TestManagerPodIsRestricted(t *testing.T) {
	ctx := context.Background()
	base := built(t, gitops.BaseDir)
	nsObj := gitops.Find(base, "Namespace", gitops.Namespace)
	if nsObj == nil {
		t.Fatal("the base has no Namespace")
	}
	if got := nsObj.GetLabels()["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Fatalf("Namespace enforces %q, want restricted", got)
	}
	ns := &corev1.Namespace{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(nsObj.Object, ns); err != nil {
		t.Fatal(err)
	}
	createNamespace(t, ns)

	// A Pod that breaks the standard is refused: PodSecurity admission is on.
	bad := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: gitops.Namespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptrTo(true)},
		}}},
	}
	if err := testenv.Client().Create(ctx, bad, client.DryRunAll); err == nil || !apierrors.IsForbidden(err) {
		t.Fatalf("a privileged Pod in %s was not refused by PodSecurity admission: %v", gitops.Namespace, err)
	}

	for _, env := range gitops.Overlays {
		objs := built(t, "overlays/"+env)
		dep := gitops.Find(objs, "Deployment", gitops.ManagerName)
		if dep == nil {
			t.Fatalf("%s: no Deployment %s", env, gitops.ManagerName)
		}
		tmpl, _, err := unstructured.NestedMap(dep.Object, "spec", "template")
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, pod); err != nil {
			t.Fatal(err)
		}
		pod.Name, pod.Namespace = "manager-"+env, gitops.Namespace
		if err := testenv.Client().Create(ctx, pod, client.DryRunAll); err != nil {
			t.Errorf("%s: the manager Pod is refused: %v", env, err)
		}
	}
}

func createNamespace(t *testing.T, ns *corev1.Namespace) {
	t.Helper()
	ns = ns.DeepCopy()
	ns.ResourceVersion = ""
	if err := testenv.Client().Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns.Name, err)
	}
}

func ptrTo[T any](v T) *T { return &v }

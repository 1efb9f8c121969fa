package sandbox_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/samples"
)

// sandboxKinds are what `kubectl get hvc,hmt,mc,rp,cd,perf,hge -A` lists.
var sandboxKinds = []schema.GroupVersionKind{
	{Group: "hypervisor.hyperfleet.io", Version: "v1alpha1", Kind: "HypervisorCluster"},
	{Group: "hypervisor.hyperfleet.io", Version: "v1alpha1", Kind: "HypervisorMachineTemplate"},
	{Group: "hypervisor.hyperfleet.io", Version: "v1alpha1", Kind: "MachineClaim"},
	{Group: "hypervisor.hyperfleet.io", Version: "v1alpha1", Kind: "RunnerPool"},
	{Group: "cyberdesk.io", Version: "v1alpha1", Kind: "Cyberdesk"},
	{Group: "hourglass.eigenlayer.io", Version: "v1alpha1", Kind: "Performer"},
	{Group: "hourglass.eigenlayer.io", Version: "v1alpha1", Kind: "HourglassExecutor"},
}

// sampleObjects names every object of sandboxKinds in samples/, as
// "Kind namespace/name" in namespace.
func sampleObjects(t *testing.T, namespace string) []string {
	t.Helper()
	files, names, err := samples.Files()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, k := range sandboxKinds {
		want[k.Kind] = true
	}
	var out []string
	for _, name := range names {
		objs, err := manifests.Decode(name, files[name])
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if want[o.GetKind()] {
				out = append(out, o.GetKind()+" "+namespace+"/"+o.GetName())
			}
		}
	}
	return out
}

// checkEveryObjectReady waits until every object of sandboxKinds in every
// namespace is Ready (condition Ready True, kstatus Current) and each of
// want exists. No sample is meant to fail, so nothing is exempt: one that
// stalls or never turns Ready fails the test, named with its condition.
func checkEveryObjectReady(t *testing.T, c client.Client, want []string) {
	t.Helper()
	ctx := context.Background()
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		seen := map[string]bool{}
		var notReady []string
		for _, gvk := range sandboxKinds {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err := c.List(ctx, list); err != nil {
				return false, fmt.Sprintf("listing %s: %v", gvk.Kind, err)
			}
			for i := range list.Items {
				u := &list.Items[i]
				id := gvk.Kind + " " + u.GetNamespace() + "/" + u.GetName()
				seen[id] = true
				if why := whyNotReady(u); why != "" {
					notReady = append(notReady, id+": "+why)
				}
			}
		}
		for _, id := range want {
			if !seen[id] {
				notReady = append(notReady, id+": missing")
			}
		}
		sort.Strings(notReady)
		return len(notReady) == 0, "not Ready:\n  " + strings.Join(notReady, "\n  ")
	})
}

// whyNotReady is empty for an object kstatus reads as Current whose Ready
// condition is True; otherwise it says what the object reports.
func whyNotReady(u *unstructured.Unstructured) string {
	res, err := status.Compute(u)
	if err != nil {
		return "kstatus: " + err.Error()
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	ready := "no Ready condition"
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			if m["status"] == "True" && res.Status == status.CurrentStatus {
				return ""
			}
			ready = fmt.Sprintf("Ready %v %v: %v", m["status"], m["reason"], m["message"])
		}
	}
	return fmt.Sprintf("kstatus %s (%s); %s", res.Status, res.Message, ready)
}

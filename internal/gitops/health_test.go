package gitops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/samples"
)

// healthScripts reads argocd/argocd-cm-patch.yaml: kind key → Lua script.
func healthScripts(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, gitops.ArgoCDPatch))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

// argoHealth runs a health script the way Argo CD does: a Lua state with the
// safe standard libraries, the object as the global obj (converted through
// JSON, numbers as Lua numbers), and the returned table's status and message.
func argoHealth(script string, obj map[string]any) (string, string, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return "", "", err
		}
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return "", "", err
	}
	var generic any
	if err := json.Unmarshal(data, &generic); err != nil {
		return "", "", err
	}
	L.SetGlobal("obj", toLua(L, generic))
	if err := L.DoString(script); err != nil {
		return "", "", err
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the script returned %s, not a table", L.Get(-1).Type())
	}
	return lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message")), nil
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch t := v.(type) {
	case map[string]any:
		tbl := L.NewTable()
		for k, e := range t {
			tbl.RawSetString(k, toLua(L, e))
		}
		return tbl
	case []any:
		tbl := L.NewTable()
		for _, e := range t {
			tbl.Append(toLua(L, e))
		}
		return tbl
	case string:
		return lua.LString(t)
	case float64:
		return lua.LNumber(t)
	case bool:
		return lua.LBool(t)
	}
	return lua.LNil
}

// Every kind has a health check, and each passes its fixtures (argocd/testdata,
// in Argo CD's health_test.yaml format).
func TestArgoCDHealthChecks(t *testing.T) {
	scripts := healthScripts(t)
	kinds, err := gitops.Kinds()
	if err != nil {
		t.Fatal(err)
	}
	if len(kinds) != 7 {
		t.Fatalf("%d kinds, want 7", len(kinds))
	}
	for _, k := range kinds {
		group, kind, _ := strings.Cut(k, "_")
		t.Run(k, func(t *testing.T) {
			script := scripts[gitops.HealthKey(group, kind)]
			if script == "" {
				t.Fatalf("argocd-cm has no %s", gitops.HealthKey(group, kind))
			}
			data, err := os.ReadFile(filepath.Join(root, "argocd", "testdata", k, "health_test.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var suite struct {
				Tests []struct {
					HealthStatus struct{ Status, Message string } `json:"healthStatus"`
					InputPath    string                           `json:"inputPath"`
				} `json:"tests"`
			}
			if err := yaml.UnmarshalStrict(data, &suite); err != nil {
				t.Fatal(err)
			}
			statuses := map[string]bool{}
			for _, tc := range suite.Tests {
				objs, err := manifests.Decode(tc.InputPath, mustRead(t, filepath.Join(root, "argocd", tc.InputPath)))
				if err != nil || len(objs) != 1 {
					t.Fatalf("%s: %d objects, %v", tc.InputPath, len(objs), err)
				}
				u := objs[0]
				if u.GetKind() != kind || u.GroupVersionKind().Group != group {
					t.Fatalf("%s holds a %s", tc.InputPath, u.GroupVersionKind())
				}
				// The fixture must be a valid object of its kind, status included.
				typed, err := testenv.Scheme().New(u.GroupVersionKind())
				if err != nil {
					t.Fatal(err)
				}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, typed, true); err != nil {
					t.Errorf("%s: %v", tc.InputPath, err)
				}
				gotStatus, gotMessage, err := argoHealth(script, u.Object)
				if err != nil {
					t.Fatalf("%s: %v", tc.InputPath, err)
				}
				if gotStatus != tc.HealthStatus.Status || gotMessage != tc.HealthStatus.Message {
					t.Errorf("%s: health %s %q, want %s %q", tc.InputPath, gotStatus, gotMessage, tc.HealthStatus.Status, tc.HealthStatus.Message)
				}
				statuses[gotStatus] = true
			}
			for _, s := range []string{"Healthy", "Progressing", "Degraded"} {
				if !statuses[s] {
					t.Errorf("no fixture is %s", s)
				}
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// For every kind, a status written the way the reconcilers write it
// (reconcilers/conditions, observedGeneration stamped) and stored by the API
// server reads as kstatus and Argo CD should read it: Ready is Current and
// Healthy, Reconciling is InProgress and Progressing, Stalled is Failed and
// Degraded, a wait on something outside is InProgress, an end as planned
// (Finished) is Current and Healthy, and a status older than the spec is
// InProgress.
func TestStatusesReadAsKstatusAndArgoCDExpect(t *testing.T) {
	ctx := context.Background()
	c := testenv.Client()
	ns := testenv.Namespace(t)
	scripts := healthScripts(t)
	files, names, err := samples.Files()
	if err != nil {
		t.Fatal(err)
	}
	firstOfKind := map[string]*unstructured.Unstructured{}
	for _, name := range names {
		objs, err := manifests.Decode(name, files[name])
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range objs {
			if _, seen := firstOfKind[u.GetKind()]; !seen {
				firstOfKind[u.GetKind()] = u
			}
		}
	}
	kinds, err := gitops.Kinds()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		state  conditions.State
		reason string
		kstat  status.Status
		health string
	}{
		{"Ready", conditions.Ready, meta.SucceededReason, status.CurrentStatus, "Healthy"},
		{"Progressing", conditions.Progressing, meta.ProgressingReason, status.InProgressStatus, "Progressing"},
		{"Stalled", conditions.Stalled, meta.InvalidSpecReason, status.FailedStatus, "Degraded"},
		{"Waiting", conditions.Waiting, meta.DependencyNotReadyReason, status.InProgressStatus, "Progressing"},
		// Ended as planned (a claim expired, a desk timed out): done, as a
		// completed Job is, so GitOps waits finish.
		{"Finished", conditions.Finished, "Expired", status.CurrentStatus, "Healthy"},
	}
	for _, k := range kinds {
		group, kind, _ := strings.Cut(k, "_")
		t.Run(kind, func(t *testing.T) {
			sample := firstOfKind[kind]
			if sample == nil {
				t.Fatalf("samples/ has no %s", kind)
			}
			u := sample.DeepCopy()
			u.SetNamespace(ns)
			if err := c.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
			for _, tc := range cases {
				typed, err := testenv.Scheme().New(u.GroupVersionKind())
				if err != nil {
					t.Fatal(err)
				}
				obj := typed.(client.Object)
				if err := c.Get(ctx, client.ObjectKeyFromObject(u), obj); err != nil {
					t.Fatal(err)
				}
				accessor := obj.(meta.ConditionsAccessor)
				conditions.Set(accessor, obj.GetGeneration(), conditions.Summary{State: tc.state, Reason: tc.reason, Message: "what the reconciler saw"})
				content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
				if err != nil {
					t.Fatal(err)
				}
				stored := &unstructured.Unstructured{Object: content}
				stored.SetGroupVersionKind(u.GroupVersionKind())
				if err := unstructured.SetNestedField(stored.Object, obj.GetGeneration(), "status", "observedGeneration"); err != nil {
					t.Fatal(err)
				}
				if err := c.Status().Update(ctx, stored); err != nil {
					t.Fatalf("writing the %s status: %v", tc.name, err)
				}
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(u.GroupVersionKind())
				if err := c.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
					t.Fatal(err)
				}
				res, err := status.Compute(got)
				if err != nil {
					t.Fatal(err)
				}
				if res.Status != tc.kstat {
					t.Errorf("%s: kstatus %s (%s), want %s", tc.name, res.Status, res.Message, tc.kstat)
				}
				health, msg, err := argoHealth(scripts[gitops.HealthKey(group, kind)], got.Object)
				if err != nil {
					t.Fatal(err)
				}
				if health != tc.health {
					t.Errorf("%s: Argo CD health %s (%s), want %s", tc.name, health, msg, tc.health)
				}

				// The spec moved on since: not Current until the operator looks again.
				stale := got.DeepCopy()
				stale.SetGeneration(got.GetGeneration() + 1)
				if res, err := status.Compute(stale); err != nil || res.Status != status.InProgressStatus {
					t.Errorf("%s with a newer generation: kstatus %v, %v; want InProgress", tc.name, res, err)
				}
				if health, _, err := argoHealth(scripts[gitops.HealthKey(group, kind)], stale.Object); err != nil || health != "Progressing" {
					t.Errorf("%s with a newer generation: Argo CD health %s, %v; want Progressing", tc.name, health, err)
				}
			}
		})
	}
}

package upgrade_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/kustomize/crd"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisormachinetemplate"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
	"github.com/hyperfleet/hyperfleet/reconcilers/performer"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// machineReady is a MachineClaim's Ready reason once its machine is.
const machineReady = "MachineReady"

// The kinds this test stores bad objects of.
var kinds = []string{"machineclaims", "hypervisormachinetemplates", "performers"}

// An upgrade meets objects an older, looser schema accepted: the test
// installs a looser variant of the real CRDs, stores objects the Go types
// cannot decode (a duration in days, a quantity with a space, an int32 that
// overflows), installs the real CRDs again and only then starts the
// operator. Every good object of those kinds is reconciled as usual; each
// bad one is Stalled with InvalidStoredSpec and one Warning event naming the
// field, gets no finalizer and no machine; one fixed reaches Ready, and one
// already carrying our finalizer can still be deleted.
func TestUpgradeMeetsObjectsItCannotDecode(t *testing.T) {
	ctx := context.Background()
	c := testenv.Client()
	lab := hypervisorlab.Proxmox(t)
	ns := lab.NS

	installCRDs(t, loose)
	t.Cleanup(func() { installCRDs(t, strict) })
	claimBad := badObject(ns, "MachineClaim", "bad-timeout", map[string]any{
		"templateRef": map[string]any{"name": "ubuntu"}, "timeout": "3d"})
	// Stored by an older operator, which had added its finalizer already.
	claimFinalized := badObject(ns, "MachineClaim", "bad-finalized", map[string]any{
		"templateRef": map[string]any{"name": "ubuntu"}, "maxLifetime": "2w"})
	claimFinalized.SetFinalizers([]string{machineclaim.Finalizer})
	templateBad := badObject(ns, "HypervisorMachineTemplate", "bad-memory", map[string]any{
		"clusterRef": map[string]any{"name": "pve"},
		"resources":  map[string]any{"cpuCores": int64(2), "memory": "4 GiB"},
		"proxmox":    map[string]any{"source": map[string]any{"vmid": int64(hypervisorlab.TemplateVMID)}}})
	performerBad := badObject(ns, "Performer", "bad-gpus", map[string]any{
		"avsAddress": "0x4444444444444444444444444444444444444444", "image": "ghcr.io/example/avs-performer", "version": "v1.0.0",
		"hardwareRequirements": map[string]any{"gpuCount": int64(3000000000)}})
	bad := []*unstructured.Unstructured{claimBad, claimFinalized, templateBad, performerBad}
	for _, obj := range bad {
		// The looser schema reaches the API server's handlers a moment
		// after the CRD write.
		eventually.That(t, 30*time.Second, func() (bool, string) {
			err := c.Create(ctx, obj.DeepCopy())
			return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err)
		})
	}

	// The upgrade: the real CRDs, which refuse these values now.
	installCRDs(t, strict)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		probe := claimBad.DeepCopy()
		probe.SetName("probe")
		err := c.Create(ctx, probe, client.DryRunAll)
		return apierrors.IsInvalid(err), fmt.Sprintf("a dry-run create of a 3d timeout answered %v, want Invalid", err)
	})
	// The symptom this guards against: a LIST decoded into a typed list.
	var claims hypervisorv1alpha1.MachineClaimList
	if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil || len(claims.Items) != 2 {
		t.Fatalf("listing the stored claims: %d items, %v", len(claims.Items), err)
	}

	startOperator(t)

	// Every good object of these kinds is reconciled.
	good := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "good"},
		Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"},
			Timeout: &metav1.Duration{Duration: 72 * time.Hour}}}
	lab.Create(good)
	goodPerformer := &hourglassv1alpha1.Performer{ObjectMeta: metav1.ObjectMeta{Name: "good"},
		Spec: hourglassv1alpha1.PerformerSpec{AVSAddress: "0x4444444444444444444444444444444444444444",
			Image: "ghcr.io/example/avs-performer", Version: "v1.0.0"}}
	lab.Create(goodPerformer)
	lab.WaitReason(&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}}, hypervisormachinetemplate.ReasonSourceFound, 30*time.Second)
	lab.WaitReason(good, machineReady, 45*time.Second)
	lab.WaitReason(goodPerformer, performer.ReasonPodStarting, 30*time.Second)

	// Each bad one says which field, why, and what to do, once.
	stalled := map[string]string{
		"bad-timeout": `spec.timeout: time: unknown unit "d" in duration "3d"`,
		"bad-memory":  "spec.resources.memory: quantities must match",
		"bad-gpus":    "spec.hardwareRequirements.gpuCount: json: cannot unmarshal number 3000000000",
	}
	objs := map[string]client.Object{
		"bad-timeout": &hypervisorv1alpha1.MachineClaim{}, "bad-memory": &hypervisorv1alpha1.HypervisorMachineTemplate{},
		"bad-gpus": &hourglassv1alpha1.Performer{},
	}
	for name, want := range stalled {
		obj := objs[name]
		obj.SetName(name)
		waitStalled(t, lab, obj.(stalledObject), want)
		if f := obj.GetFinalizers(); len(f) != 0 {
			t.Errorf("%s got finalizers %v: its metadata must not be written", name, f)
		}
		waitEvent(t, ns, name, want)
	}
	// Nothing was made for the bad claim: the only machine is the good one.
	if vms := lab.OwnedVMs(); len(vms) != 1 {
		t.Errorf("owned VMs = %+v, want the good claim's alone", vms)
	}

	// Fixing the field is all it takes.
	patch := []byte(`{"spec":{"timeout":"72h"}}`)
	if err := c.Patch(ctx, &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-timeout"}},
		client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("fixing spec.timeout: %v", err)
	}
	lab.WaitReason(&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "bad-timeout"}}, machineReady, 45*time.Second)

	// An undecodable claim that carries our finalizer is still deletable:
	// its failing field is in the spec, so the normal deletion path runs.
	if err := c.Delete(ctx, &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-finalized"}}); err != nil {
		t.Fatalf("deleting bad-finalized: %v", err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := lab.Get(&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "bad-finalized"}})
		return apierrors.IsNotFound(err), fmt.Sprintf("bad-finalized still there: %v", err)
	})
}

// startOperator runs the operator's manager, with the reconcilers of these
// kinds, until the test ends.
func startOperator(t *testing.T) {
	t.Helper()
	// The operator's errors, printed if the test fails.
	var mu sync.Mutex
	var logs []string
	ctrl.SetLogger(funcr.New(func(prefix, args string) {
		if !strings.Contains(args, "error") {
			return
		}
		if len(args) > 500 {
			args = args[:500]
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(logs, args) {
			logs = append(logs, args)
		}
	}, funcr.Options{}))
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			for _, l := range logs {
				t.Log(l)
			}
		}
	})
	mgr, err := manager.New(testenv.Config(), manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: hypervisorlab.OperatorNamespace,
		ObserveInterval: time.Second, FinalizationTimeout: 30 * time.Second,
		Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
			manager.ControllerMachineClaim, manager.ControllerHourglass},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testenv.StartManager(mgr))
}

type stalledObject interface {
	client.Object
	meta.ConditionsAccessor
	meta.ObservedGenerationAccessor
}

// waitStalled waits for obj to be Stalled with InvalidStoredSpec, Ready
// False, for its current generation, the message naming want.
func waitStalled(t *testing.T, lab *hypervisorlab.Lab, obj stalledObject, want string) {
	t.Helper()
	eventually.That(t, 30*time.Second, func() (bool, string) {
		if err := lab.Get(obj); err != nil {
			return false, err.Error()
		}
		s := apimeta.FindStatusCondition(obj.GetConditions(), meta.StalledCondition)
		r := apimeta.FindStatusCondition(obj.GetConditions(), meta.ReadyCondition)
		ok := s != nil && s.Status == metav1.ConditionTrue && s.Reason == meta.InvalidStoredSpecReason &&
			strings.Contains(s.Message, want) && strings.Contains(s.Message, "fix the field") &&
			r != nil && r.Status == metav1.ConditionFalse && obj.GetObservedGeneration() == obj.GetGeneration()
		return ok, obj.GetName() + ": " + hypervisorlab.Describe("", obj.GetConditions())
	})
}

// waitEvent waits for the one Warning event about name with the reason
// InvalidStoredSpec, naming want.
func waitEvent(t *testing.T, ns, name, want string) {
	t.Helper()
	eventually.That(t, 10*time.Second, func() (bool, string) {
		var list eventsv1.EventList
		if err := testenv.Client().List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var found []string
		for _, ev := range list.Items {
			if ev.Regarding.Name == name && ev.Reason == meta.InvalidStoredSpecReason {
				found = append(found, ev.Type+": "+ev.Note)
			}
		}
		ok := len(found) == 1 && strings.HasPrefix(found[0], "Warning: ") && strings.Contains(found[0], want)
		return ok, fmt.Sprintf("%s: InvalidStoredSpec events %q, want one Warning naming %q", name, found, want)
	})
}

func badObject(ns, kind, name string, spec map[string]any) *unstructured.Unstructured {
	group := hypervisorv1alpha1.GroupVersion
	if kind == "Performer" {
		group = hourglassv1alpha1.GroupVersion
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(group.WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

const (
	loose  = true
	strict = false
)

// installCRDs writes the real CRDs of kinds, or (loose) their looser
// variant, over the installed ones.
func installCRDs(t *testing.T, looser bool) {
	t.Helper()
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range crds {
		if !contains(kinds, want.Spec.Names.Plural) {
			continue
		}
		if looser {
			for i := range want.Spec.Versions {
				loosen(want.Spec.Versions[i].Schema.OpenAPIV3Schema)
			}
		}
		eventually.That(t, 10*time.Second, func() (bool, string) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := testenv.Client().Get(context.Background(), client.ObjectKey{Name: want.Name}, got); err != nil {
				return false, err.Error()
			}
			got.Spec.Versions = want.Spec.Versions
			err := testenv.Client().Update(context.Background(), got)
			return err == nil, fmt.Sprintf("updating CRD %s: %v", want.Name, err)
		})
	}
}

// loosen strips every value validation from a schema and keeps its
// structure (types, properties, int-or-string, preserve-unknown-fields), as
// an older CRD without patterns, bounds, formats or CEL rules would be.
func loosen(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.Pattern, s.Format = "", ""
	s.Minimum, s.Maximum, s.ExclusiveMinimum, s.ExclusiveMaximum = nil, nil, false, false
	s.MinLength, s.MaxLength, s.MinItems, s.MaxItems, s.MinProperties, s.MaxProperties = nil, nil, nil, nil, nil, nil
	s.Enum, s.XValidations, s.AnyOf, s.OneOf, s.AllOf, s.Not = nil, nil, nil, nil, nil, nil
	for k, p := range s.Properties {
		loosen(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		loosen(s.Items.Schema)
	}
	if s.AdditionalProperties != nil {
		loosen(s.AdditionalProperties.Schema)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

package kubevirtsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

func TestCRDsLookLikeKubeVirts(t *testing.T) {
	crds := CRDs()
	if len(crds) != 2 {
		t.Fatalf("%d CRDs, want 2", len(crds))
	}
	want := map[string]struct {
		kind  string
		short []string
	}{
		"virtualmachines.kubevirt.io":         {"VirtualMachine", []string{"vm", "vms"}},
		"virtualmachineinstances.kubevirt.io": {"VirtualMachineInstance", []string{"vmi", "vmis"}},
	}
	for _, crd := range crds {
		w, ok := want[crd.Name]
		if !ok {
			t.Errorf("unexpected CRD %s", crd.Name)
			continue
		}
		s := crd.Spec
		if s.Group != "kubevirt.io" || s.Scope != "Namespaced" || s.Names.Kind != w.kind ||
			!slices.Equal(s.Names.ShortNames, w.short) || !slices.Equal(s.Names.Categories, []string{"all"}) {
			t.Errorf("%s: spec %+v", crd.Name, s.Names)
		}
		if len(s.Versions) != 1 || s.Versions[0].Name != "v1" || !s.Versions[0].Served || !s.Versions[0].Storage ||
			s.Versions[0].Subresources == nil || s.Versions[0].Subresources.Status == nil {
			t.Errorf("%s: versions %+v, want v1 served, stored, with status", crd.Name, s.Versions)
		}
		props := s.Versions[0].Schema.OpenAPIV3Schema.Properties
		for _, f := range []string{"spec", "status"} {
			if p := props[f]; p.Type != "object" || p.XPreserveUnknownFields == nil || !*p.XPreserveUnknownFields {
				t.Errorf("%s: %s schema %+v, want an object keeping unknown fields", crd.Name, f, p)
			}
		}
		if p := props["metadata"]; p.Type != "object" || p.XPreserveUnknownFields != nil {
			t.Errorf("%s: metadata schema %+v, want a plain object", crd.Name, p)
		}
	}
	// CRDs returns fresh objects every call.
	crds[0].Spec.Names.ShortNames[0] = "changed"
	if CRDs()[0].Spec.Names.ShortNames[0] != "vm" {
		t.Error("CRDs shares state between calls")
	}
}

func TestInstallIsIdempotent(t *testing.T) {
	if err := Install(ctxT(t), testenv.Config()); err != nil {
		t.Fatalf("installing over installed CRDs: %v", err)
	}
}

// `kubectl get vm,vmi` asks the API server for a Table; the printer columns
// must give KubeVirt's output.
func TestKubectlGetColumns(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	vmi := startRunning(t, ns, "web", kubevirtv1.RunStrategyAlways)

	vmTable := getTable(t, "/apis/kubevirt.io/v1/namespaces/"+ns+"/virtualmachines")
	assertColumns(t, vmTable, []string{"Name", "Age", "Status", "Ready"})
	assertRow(t, vmTable, map[string]string{"Name": "web", "Status": "Running", "Ready": "True"})

	vmiTable := getTable(t, "/apis/kubevirt.io/v1/namespaces/"+ns+"/virtualmachineinstances")
	assertColumns(t, vmiTable, []string{"Name", "Age", "Phase", "IP", "NodeName", "Ready", "Live-Migratable", "Paused"})
	assertRow(t, vmiTable, map[string]string{
		"Name": "web", "Phase": "Running", "IP": vmi.Status.Interfaces[0].IP, "NodeName": vmi.Status.NodeName, "Ready": "True",
	})
}

func getTable(t *testing.T, path string) *metav1.Table {
	t.Helper()
	cfg := testenv.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v: %s", path, resp.Status, err, body)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(body, table); err != nil {
		t.Fatalf("decoding the table: %v", err)
	}
	return table
}

func assertColumns(t *testing.T, table *metav1.Table, want []string) {
	t.Helper()
	var got []string
	for _, c := range table.ColumnDefinitions {
		got = append(got, c.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("columns %v, want %v", got, want)
	}
}

func assertRow(t *testing.T, table *metav1.Table, want map[string]string) {
	t.Helper()
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	for i, c := range table.ColumnDefinitions {
		w, ok := want[c.Name]
		if !ok {
			continue
		}
		if got := fmt.Sprint(table.Rows[0].Cells[i]); got != w {
			t.Errorf("column %s = %q, want %q", c.Name, got, w)
		}
	}
}

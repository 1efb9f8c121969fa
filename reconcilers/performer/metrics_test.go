package performer

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// listReader serves one PerformerList, as the cache would.
type listReader struct {
	client.Reader
	items []hourglassv1alpha1.Performer
}

func (r listReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*hourglassv1alpha1.PerformerList).Items = r.items
	return nil
}

// hyperfleet_performers counts what exists at scrape time, with every phase
// present (zero included) so a dashboard never sees a series vanish.
func TestPerformersGauge(t *testing.T) {
	p := func(name string, phase hourglassv1alpha1.PerformerPhase) hourglassv1alpha1.Performer {
		return hourglassv1alpha1.Performer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Status: hourglassv1alpha1.PerformerStatus{Phase: phase}}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(performersCollector{reader: listReader{items: []hourglassv1alpha1.Performer{
		p("a", hourglassv1alpha1.PerformerRunning), p("b", hourglassv1alpha1.PerformerRunning), p("c", ""),
	}}})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"Pending": 1, "Running": 2, "Upgrading": 0, "Failed": 0, "Terminating": 0}
	if len(got) != len(want) {
		t.Fatalf("phases = %v, want %v", got, want)
	}
	for phase, n := range want {
		if got[phase] != n {
			t.Errorf("hyperfleet_performers{phase=%q} = %v, want %v", phase, got[phase], n)
		}
	}
}

package cyberdesk_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	cyberdesktemplate "github.com/hyperfleet/hyperfleet/kustomize/cyberdesk"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/providers/supabase"
)

const operatorNamespace = "hyperfleet-system"

// fakeClock is the operator's clock: a test steps it past a desk's expiry
// instead of waiting its timeoutMs out.
var fakeClock = clocktesting.NewFakeClock(time.Now())

// orphanGrace is how long the sweeper leaves a VM without its claim: long
// enough for a desk's new claim to take over a VM made for the desk itself.
const orphanGrace = 30 * time.Second

var (
	sim      *kubevirtsim.Simulator
	supa     *postgrest
	mgrMu    sync.Mutex
	stopMgr  func()
	mgrOpts  manager.Options
	rootCtx  = context.Background()
	testLogs = logr.Discard()
)

// One manager with the Cyberdesk reconciler runs for the package, against
// the real control plane and kubevirtsim playing KubeVirt; a stand-in Supabase
// receives the status export. Tests run one after another: some edit the
// shared template ConfigMap or restart the manager.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(testLogs)
		ctx, cancel := context.WithCancel(context.Background())
		var err error
		if err := kubevirtsim.Install(ctx, testenv.Config()); err != nil {
			cancel()
			return nil, err
		}
		if sim, err = kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: testLogs}); err != nil {
			cancel()
			return nil, err
		}
		c := testenv.Client()
		supa = &postgrest{rows: map[string]supabase.Row{}}
		hs := httptest.NewServer(supa)
		for _, obj := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}},
			&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "supabase", Namespace: operatorNamespace},
				StringData: map[string]string{"SUPABASE_URL": hs.URL, "SUPABASE_KEY": supabaseKey},
			},
		} {
			if err := c.Create(ctx, obj); err != nil {
				cancel()
				return nil, err
			}
		}
		if err := resetTemplate(ctx); err != nil {
			cancel()
			return nil, err
		}
		mgrOpts = manager.Options{
			OperatorNamespace: operatorNamespace,
			ObserveInterval:   time.Second, FinalizationTimeout: 30 * time.Second,
			// The desks' claims keep their time too: they enforce timeoutMs.
			MachineClaimClock: fakeClock,
			// Sweeps every second; a VM must be orphaned for orphanGrace.
			OrphanSweepInterval: time.Second, OrphanGrace: orphanGrace,
			Cyberdesk: manager.CyberdeskOptions{
				TemplateConfigMap: "cyberdesk-vm-template", ManagedBy: "cyberdesk-operator",
				SupabaseSecret: "supabase", SupabaseTimeout: 5 * time.Second,
				Clock: fakeClock,
			},
		}
		if err := startManager(); err != nil {
			cancel()
			return nil, err
		}
		return func() {
			mgrMu.Lock()
			stopMgr()
			mgrMu.Unlock()
			sim.Stop()
			hs.Close()
			cancel()
		}, nil
	})
}

// startManager starts a manager with the Cyberdesk reconciler alone, as
// the operator wires it; stopMgr stops it and waits.
func startManager() error {
	skipNameValidation := true
	// The operator's cache rules: the template ConfigMap carries no
	// managed-by label, so only a read past the cache finds it.
	cacheOpts, err := manager.CacheOptionsFor(testenv.Config(), manager.Options{OperatorNamespace: operatorNamespace})
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(testenv.Config(), ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// A restart registers the controller again in this process.
		Controller: ctrlconfig.Controller{SkipNameValidation: &skipNameValidation},
	})
	if err != nil {
		return err
	}
	if err := manager.SetupCyberdesk(mgr, mgrOpts); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(rootCtx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopMgr = func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}
	return nil
}

// resetTemplate writes the ConfigMap the kustomize base ships.
func resetTemplate(ctx context.Context) error {
	cm := &corev1.ConfigMap{}
	if err := yaml.Unmarshal(cyberdesktemplate.VMTemplateConfigMap, cm); err != nil {
		return err
	}
	return setTemplate(ctx, cm.Data["template.yaml"])
}

func setTemplate(ctx context.Context, text string) error {
	return setTemplateData(ctx, map[string]string{"template.yaml": text})
}

// setTemplateData replaces the whole data of the template ConfigMap.
func setTemplateData(ctx context.Context, data map[string]string) error {
	c := testenv.Client()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cyberdesk-vm-template", Namespace: operatorNamespace}}
	err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	if apierrors.IsNotFound(err) {
		cm.Data = data
		return c.Create(ctx, cm)
	}
	if err != nil {
		return err
	}
	cm.Data = data
	return c.Update(ctx, cm)
}

func templateText(t *testing.T) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := yaml.Unmarshal(cyberdesktemplate.VMTemplateConfigMap, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data["template.yaml"]
}

// lab is one test's namespace.
type lab struct {
	t  *testing.T
	ns string
	c  client.Client
}

func newLab(t *testing.T) *lab {
	t.Helper()
	return &lab{t: t, ns: testenv.Namespace(t), c: testenv.Client()}
}

func (l *lab) desk(name string, timeoutMs int64, mutate ...func(*cyberdeskv1alpha1.Cyberdesk)) *cyberdeskv1alpha1.Cyberdesk {
	l.t.Helper()
	d := &cyberdeskv1alpha1.Cyberdesk{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.ns},
		Spec:       cyberdeskv1alpha1.CyberdeskSpec{TimeoutMs: timeoutMs, UserData: "#cloud-config\nusers: [{name: " + name + "}]\n"},
	}
	for _, m := range mutate {
		m(d)
	}
	if err := l.c.Create(rootCtx, d); err != nil {
		l.t.Fatalf("creating Cyberdesk %s: %v", name, err)
	}
	return d
}

func (l *lab) get(name string) (*cyberdeskv1alpha1.Cyberdesk, error) {
	d := &cyberdeskv1alpha1.Cyberdesk{}
	return d, l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: name}, d)
}

func (l *lab) waitPhase(name string, phase cyberdeskv1alpha1.CyberdeskPhase, timeout time.Duration) *cyberdeskv1alpha1.Cyberdesk {
	l.t.Helper()
	var d *cyberdeskv1alpha1.Cyberdesk
	eventually.That(l.t, timeout, func() (bool, string) {
		var err error
		if d, err = l.get(name); err != nil {
			return false, err.Error()
		}
		return d.Status.Phase == phase, describe(d)
	})
	return d
}

func (l *lab) waitGone(obj client.Object, timeout time.Duration) {
	l.t.Helper()
	eventually.That(l.t, timeout, func() (bool, string) {
		err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: obj.GetName()}, obj)
		return apierrors.IsNotFound(err), fmt.Sprintf("%T %s still there (err %v)", obj, obj.GetName(), err)
	})
}

// nothingLeft checks a desk's VM, instance and cloud-init Secret are gone.
func (l *lab) nothingLeft(desk string, timeout time.Duration) {
	l.t.Helper()
	vm := "cyberdesk-" + desk
	l.waitGone(&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: vm}}, timeout)
	l.waitGone(&kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: vm}}, timeout)
	l.waitGone(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: vm + "-cloudinit"}}, timeout)
}

// vms lists the namespace's VirtualMachines made for Cyberdesks.
func (l *lab) vms() []kubevirtv1.VirtualMachine {
	l.t.Helper()
	var list kubevirtv1.VirtualMachineList
	if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns), client.MatchingLabels{kubevirt.LabelOwnerKind: "Cyberdesk"}); err != nil {
		l.t.Fatal(err)
	}
	return list.Items
}

func describe(d *cyberdeskv1alpha1.Cyberdesk) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %q; ", d.Status.Phase)
	for _, c := range d.Status.Conditions {
		fmt.Fprintf(&b, "%s=%s %s: %s; ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func readyReason(d *cyberdeskv1alpha1.Cyberdesk) (string, string) {
	c := apimeta.FindStatusCondition(d.Status.Conditions, meta.ReadyCondition)
	if c == nil {
		return "", ""
	}
	return c.Reason, c.Message
}

// metric reads a counter or gauge from the manager's registry.
func metric(t *testing.T, name string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		return sum
	}
	t.Fatalf("metric %s is not exported", name)
	return 0
}

const supabaseKey = "test-service-role-key"

// postgrest is a stand-in Supabase REST endpoint that accepts only
// well-formed upserts into cyberdesk_instances.
type postgrest struct {
	mu   sync.Mutex
	rows map[string]supabase.Row
	bad  []string
}

func (p *postgrest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/rest/v1/cyberdesk_instances" || r.URL.Query().Get("on_conflict") != "id":
		p.bad = append(p.bad, r.Method+" "+r.URL.String())
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	case r.Header.Get("apikey") != supabaseKey || r.Header.Get("Authorization") != "Bearer "+supabaseKey:
		p.bad = append(p.bad, "bad credentials")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	case !strings.Contains(r.Header.Get("Prefer"), "resolution=merge-duplicates"):
		p.bad = append(p.bad, "no merge-duplicates")
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var rows []supabase.Row
	if err := yaml.Unmarshal(body, &rows); err != nil {
		p.bad = append(p.bad, "body: "+err.Error())
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	for _, row := range rows {
		p.rows[row.Namespace+"/"+row.ID] = row
	}
	w.WriteHeader(http.StatusCreated)
}

func (p *postgrest) row(ns, id string) (supabase.Row, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.rows[ns+"/"+id]
	return r, ok
}

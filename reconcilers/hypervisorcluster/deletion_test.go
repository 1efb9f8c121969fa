package hypervisorcluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisorcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
)

var ctx = context.Background()

// GitOps prunes a namespace holding a Proxmox cluster, its Secrets, a
// template and claims with user data, in the worst order: no VM and no
// cloud-init ISO is left on Proxmox, and every object goes.
//
// The guests never boot here: once a guest agent answers, the operator
// ejects and deletes its ISO itself, and the prune must be shown to clean
// up ISOs still in use.
func TestGitOpsPruneOnProxmoxLeavesNothing(t *testing.T) {
	l := hypervisorlab.Proxmox(t, func(o *proxmoxsim.Options, _ *hypervisorv1alpha1.HypervisorCluster) {
		o.Latencies = proxmoxsim.DefaultLatencies()
		o.Latencies.Boot = time.Hour
	})
	claims := startedClaims(l, "ubuntu", "a", "b")
	eventually.That(t, time.Minute, func() (bool, string) {
		left := isos(t, l)
		return len(left) == len(claims), fmt.Sprintf("%d cloud-init ISOs on the simulator before the prune, want %d: %v", len(left), len(claims), left)
	})
	prune(l, "pve", "ubuntu", []string{"pve-token", "pve-ca", "user-data"}, claims)
	eventually.That(t, time.Minute, func() (bool, string) {
		vms, left := l.OwnedVMs(), isos(t, l)
		return len(vms) == 0 && len(left) == 0, fmt.Sprintf("%d VMs and ISOs %v left on Proxmox", len(vms), left)
	})
}

// The same on KubeVirt, through a cluster reached with a kubeconfig in its
// credentials Secret: no VirtualMachine and no cloud-init Secret is left.
func TestGitOpsPruneOnKubeVirtLeavesNothing(t *testing.T) {
	l := hypervisorlab.KubeVirt(t)
	l.RemoteKubeVirt("remote", "remote")
	claims := provisioned(l, "remote", "a", "b")
	for _, mc := range claims {
		if err := l.Get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: mc.Status.MachineName + "-cloudinit"}}); err != nil {
			t.Fatalf("the cloud-init Secret of %s before the prune: %v", mc.Name, err)
		}
	}
	// The lab's own cluster and template go in the same prune; nothing was
	// made through them.
	for _, obj := range []client.Object{
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: l.NS}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Namespace: l.NS}},
	} {
		if err := l.C.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	prune(l, "remote", "remote", []string{"remote-kubeconfig", "user-data"}, claims)
	eventually.That(t, time.Minute, func() (bool, string) {
		var vms kubevirtv1.VirtualMachineList
		if err := l.C.List(ctx, &vms, client.InNamespace(l.NS)); err != nil {
			return false, err.Error()
		}
		return len(vms.Items) == 0, fmt.Sprintf("%d VirtualMachines left", len(vms.Items))
	})
}

// A machine that cannot be deleted holds its cluster only until the
// cluster's deletion timeout: then the cluster is released, with a Warning
// event naming what is left, and lets go of its Secrets.
func TestClusterReleasedAtItsDeadline(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	provisioned(l, "ubuntu", "stuck")
	if err := l.Sim.InjectFault(proxmoxsim.Fault{Operation: proxmoxsim.OpDelete, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "storage offline"}); err != nil {
		t.Fatal(err)
	}
	defer l.Sim.ClearFaults()
	for _, obj := range []client.Object{
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve", Namespace: l.NS}},
		&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: l.NS}},
	} {
		if err := l.C.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}
	l.WaitReason(cluster, hypervisorcluster.ReasonWaitingForMachines, 30*time.Second)

	clk.Step(t, clusterDeletionTimeout+time.Minute)
	eventually.That(t, time.Minute, func() (bool, string) {
		poke(l, &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "stuck"}}) // wakes the cluster now
		err := l.Get(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}})
		return apierrors.IsNotFound(err), fmt.Sprintf("the cluster past its deadline: %v", err)
	})
	warned := false
	for _, e := range events(t, l, "HypervisorCluster", "pve") {
		warned = warned || (e.Type == corev1.EventTypeWarning && e.Reason == "FinalizerDeadlineExceeded" && strings.Contains(e.Note, "stuck"))
	}
	if !warned {
		t.Errorf("no Warning event naming the claim left: %v", events(t, l, "HypervisorCluster", "pve"))
	}
	for _, name := range []string{"pve-token", "pve-ca"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}
		eventually.That(t, 30*time.Second, func() (bool, string) {
			err := l.Get(s)
			return err == nil && !slices.Contains(s.Finalizers, hypervisorcluster.SecretFinalizer), fmt.Sprintf("Secret %s: %v, finalizers %v", name, err, s.Finalizers)
		})
	}

	// The claim gives up at its own, later, deadline (its machine is left
	// to a person, as the cluster's event said).
	clk.Step(t, claimFinalization)
	eventually.That(t, time.Minute, func() (bool, string) {
		mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "stuck"}}
		poke(l, mc)
		err := l.Get(mc)
		return apierrors.IsNotFound(err), fmt.Sprintf("the claim past its deadline: %v", err)
	})
}

// A claim released at its own finalization deadline leaves its machine
// for the orphan sweeper, which reaches it only through the cluster: so a
// deleting cluster also waits for this installation's orphans on it, naming
// them, and is released once they are gone.
func TestClusterWaitsForOrphansOnIt(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	l.Sim.AddVM("pve1", 4321, "hf-orphan", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-000000000001", "hf-inst-" + hypervisorlab.Installation}, false)
	// Another installation's machine and one made before installations are
	// never swept by this one, so the cluster does not wait for them.
	l.Sim.AddVM("pve1", 4322, "hf-other", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-000000000002", "hf-inst-elsewhere"}, false)
	l.Sim.AddVM("pve1", 4323, "hf-unmarked", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-000000000003"}, false)
	cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve", Namespace: l.NS}}
	l.WaitReason(cluster, hypervisorcluster.ReasonConnected, 30*time.Second)
	if err := l.C.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	l.WaitReason(cluster, hypervisorcluster.ReasonWaitingForMachines, 30*time.Second)
	ready := hypervisorlab.ReadyCondition(cluster.Status.Conditions)
	if !strings.Contains(ready.Message, "hf-orphan (VMID 4321)") || strings.Contains(ready.Message, "hf-other") || strings.Contains(ready.Message, "hf-unmarked") {
		t.Fatalf("the waiting cluster's message names %q, want hf-orphan only", ready.Message)
	}

	// The sweeper's deletion, done here by hand through the Proxmox API.
	pveAPI(t, l)(http.MethodDelete, "/nodes/pve1/qemu/4321", nil)
	eventually.That(t, time.Minute, func() (bool, string) {
		poke(l, &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}) // wakes it before its 30 s poll
		err := l.Get(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}})
		return apierrors.IsNotFound(err), fmt.Sprintf("the cluster after its orphan went: %v", err)
	})
}

// provisioned makes a user-data Secret and claims on template with it, and
// waits for each to be Ready.
func provisioned(l *hypervisorlab.Lab, template string, names ...string) []*hypervisorv1alpha1.MachineClaim {
	l.T.Helper()
	return claimsUntil(l, template, func(mc *hypervisorv1alpha1.MachineClaim) bool {
		return mc.Status.Phase == hypervisorv1alpha1.MachineReady
	}, names...)
}

// startedClaims makes claims with user data and waits until each has its
// machine (named in status), Ready or not.
func startedClaims(l *hypervisorlab.Lab, template string, names ...string) []*hypervisorv1alpha1.MachineClaim {
	l.T.Helper()
	return claimsUntil(l, template, func(mc *hypervisorv1alpha1.MachineClaim) bool {
		return mc.Status.MachineName != "" && mc.Status.VMID != nil
	}, names...)
}

func claimsUntil(l *hypervisorlab.Lab, template string, done func(*hypervisorv1alpha1.MachineClaim) bool, names ...string) []*hypervisorv1alpha1.MachineClaim {
	l.T.Helper()
	if err := l.Get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "user-data"}}); apierrors.IsNotFound(err) {
		l.Create(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "user-data", Labels: map[string]string{meta.CredentialsLabel: "true"}},
			StringData: map[string]string{"user-data": "#cloud-config\nruncmd: [[echo, hello]]\n"},
		})
	}
	var out []*hypervisorv1alpha1.MachineClaim
	for _, name := range names {
		l.Create(&hypervisorv1alpha1.MachineClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: hypervisorv1alpha1.MachineClaimSpec{
				TemplateRef:       hypervisorv1alpha1.TemplateReference{Name: template},
				UserDataSecretRef: &meta.SecretKeyReference{Name: "user-data", Key: "user-data"},
			},
		})
	}
	for _, name := range names {
		mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
		eventually.That(l.T, 2*time.Minute, func() (bool, string) {
			if err := l.Get(mc); err != nil {
				return false, err.Error()
			}
			return done(mc), hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions)
		})
		out = append(out, mc)
	}
	return out
}

// prune deletes what GitOps prunes, in the worst order it can: the Secrets
// and the cluster first, then the template, then the claims, then the
// namespace. Between the cluster's deletion and the claims', the cluster
// waits and says for what, its Secrets stay readable, and a new claim is
// refused a machine. At the end every object is gone.
func prune(l *hypervisorlab.Lab, cluster, template string, secrets []string, claims []*hypervisorv1alpha1.MachineClaim) {
	t := l.T
	t.Helper()
	del := func(obj client.Object) {
		t.Helper()
		obj.SetNamespace(l.NS)
		if err := l.C.Delete(ctx, obj); err != nil {
			t.Fatalf("deleting %T %s: %v", obj, obj.GetName(), err)
		}
	}
	for _, name := range secrets {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := l.Get(s); err != nil {
			t.Fatal(err)
		}
		if name != "user-data" && !slices.Contains(s.Finalizers, hypervisorcluster.SecretFinalizer) {
			t.Errorf("Secret %s has finalizers %v, want %s", name, s.Finalizers, hypervisorcluster.SecretFinalizer)
		}
		del(s)
	}
	del(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}})

	c := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}
	l.WaitReason(c, hypervisorcluster.ReasonWaitingForMachines, 30*time.Second)
	msg := hypervisorlab.Describe("", c.Status.Conditions)
	if !apimeta.IsStatusConditionTrue(c.Status.Conditions, meta.ReconcilingCondition) {
		t.Errorf("a cluster waiting for its machines must be Reconciling: %s", msg)
	}
	for _, mc := range claims {
		if !strings.Contains(msg, mc.Name) {
			t.Errorf("the cluster's condition does not name claim %s: %s", mc.Name, msg)
		}
	}
	for _, name := range secrets {
		if name == "user-data" {
			continue
		}
		if err := l.Get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Errorf("Secret %s, needed to delete the machines, is unreadable: %v", name, err)
		}
	}

	// A claim made now gets no machine, and says why.
	l.Create(&hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "late"},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: template}},
	})
	late := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "late"}}
	l.WaitReason(late, machineclaim.ReasonClusterDeleting, 30*time.Second)
	if late.Status.MachineName != "" {
		t.Errorf("a claim on a deleting cluster chose machine %s", late.Status.MachineName)
	}

	del(&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: template}})
	for _, mc := range claims {
		del(&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: mc.Name}})
	}
	del(late)
	waited := false
	for _, e := range events(t, l, "HypervisorCluster", cluster) {
		waited = waited || e.Reason == hypervisorcluster.ReasonWaitingForMachines
	}
	if !waited {
		t.Errorf("no event said the cluster waits for its machines: %v", events(t, l, "HypervisorCluster", cluster))
	}
	if err := l.C.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.NS}}); err != nil {
		t.Fatal(err)
	}

	eventually.That(t, time.Minute, func() (bool, string) {
		left := objectsLeft(l)
		return len(left) == 0, fmt.Sprintf("left in the namespace: %v", left)
	})
}

// objectsLeft names the claims, clusters, templates and Secrets of the
// lab's namespace.
func objectsLeft(l *hypervisorlab.Lab) []string {
	var left []string
	lists := map[string]client.ObjectList{
		"MachineClaim": &hypervisorv1alpha1.MachineClaimList{}, "HypervisorCluster": &hypervisorv1alpha1.HypervisorClusterList{},
		"HypervisorMachineTemplate": &hypervisorv1alpha1.HypervisorMachineTemplateList{}, "Secret": &corev1.SecretList{},
	}
	for kind, list := range lists {
		if err := l.C.List(ctx, list, client.InNamespace(l.NS)); err != nil {
			return []string{err.Error()}
		}
		items, _ := apimeta.ExtractList(list)
		for _, o := range items {
			obj := o.(client.Object)
			left = append(left, fmt.Sprintf("%s %s (finalizers %v)", kind, obj.GetName(), obj.GetFinalizers()))
		}
	}
	return left
}

// events lists the events about one object of the lab's namespace.
func events(t *testing.T, l *hypervisorlab.Lab, kind, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := l.C.List(ctx, &list, client.InNamespace(l.NS)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// poke changes an annotation of obj, which wakes its reconciler (and a
// deleting cluster watching its claims) now rather than at its next requeue.
func poke(l *hypervisorlab.Lab, obj client.Object) {
	if err := l.Get(obj); err != nil {
		return
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	obj.SetAnnotations(map[string]string{"test.hyperfleet.io/poke": time.Now().Format(time.RFC3339Nano)})
	_ = l.C.Patch(ctx, obj, patch)
}

// isos lists the volumes of iso content on every node's "local" storage of
// the lab's simulator, read through the Proxmox API as an admin would.
func isos(t *testing.T, l *hypervisorlab.Lab) []string {
	t.Helper()
	api := pveAPI(t, l)
	var nodes []struct {
		Node string `json:"node"`
	}
	api(http.MethodGet, "/nodes", &nodes)
	var out []string
	for _, n := range nodes {
		var content []struct {
			VolID string `json:"volid"`
		}
		api(http.MethodGet, "/nodes/"+n.Node+"/storage/local/content?content=iso", &content)
		for _, c := range content {
			out = append(out, c.VolID)
		}
	}
	return out
}

// pveAPI calls the lab simulator's Proxmox API as an admin would, with the
// lab's token, decoding the answer's data into into (nil: dropped).
func pveAPI(t *testing.T, l *hypervisorlab.Lab) func(method, path string, into any) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(l.Sim.CACertPEM())
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	tokenID, secret := l.Sim.APIToken()
	base := strings.TrimSuffix(l.Sim.URL(), "/")
	if !strings.HasSuffix(base, "/api2/json") {
		base += "/api2/json"
	}
	return func(method, path string, into any) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "PVEAPIToken="+tokenID+"="+secret)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s", method, path, res.Status)
		}
		if err := json.NewDecoder(res.Body).Decode(&struct {
			Data any `json:"data"`
		}{Data: into}); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

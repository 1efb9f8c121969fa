package hypervisormachinetemplate

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions/conditionstest"
)

func TestComputeStatus(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "pve"}
	cluster := func(mutate ...func(*hypervisorv1alpha1.HypervisorCluster)) *hypervisorv1alpha1.HypervisorCluster {
		c := &hypervisorv1alpha1.HypervisorCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "pve", Namespace: "ns", Generation: 1},
			Spec:       hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderProxmox},
		}
		for _, m := range mutate {
			m(c)
		}
		return c
	}
	notReady := func(c *hypervisorv1alpha1.HypervisorCluster) {
		conditions.Set(c, c.Generation, conditions.Summary{State: conditions.Stalled, Reason: "AuthenticationFailed", Message: "the API token was rejected"})
	}
	tests := []struct {
		name     string
		scope    scope
		err      error
		state    conditions.State
		reason   string
		message  string
		provider hypervisorv1alpha1.ProviderType
		source   string
		none     bool // the conditions are left as they are
	}{{
		name: "a standby schedule cannot be read, whatever the rest",
		scope: scope{clusterKey: key, cluster: cluster(), source: "pve1/9000 (ubuntu)",
			standbyErr: errors.New(`spec.standby.schedules[0]: timeZone "Mars/Olympus" is not an IANA time zone (e.g. Europe/Berlin)`)},
		state: conditions.Stalled, reason: meta.InvalidSpecReason, provider: hypervisorv1alpha1.ProviderProxmox, source: "pve1/9000 (ubuntu)",
		message: `spec.standby.schedules[0]: timeZone "Mars/Olympus" is not an IANA time zone (e.g. Europe/Berlin); no standby machine is made or retired until it is fixed`,
	}, {
		name:  "the cluster does not exist",
		scope: scope{clusterKey: key, clusterMissing: true},
		state: conditions.Waiting, reason: meta.DependencyNotFoundReason, message: "HypervisorCluster pve (spec.clusterRef) not found",
	}, {
		name:  "the cluster cannot be read",
		scope: scope{clusterKey: key, clusterErr: errors.New("etcd timeout")},
		state: conditions.Waiting, reason: ReasonClusterUnreadable, message: "etcd timeout",
	}, {
		name:  "the provider section does not fit the cluster",
		scope: scope{clusterKey: key, cluster: cluster(), mismatch: "HypervisorCluster pve is a proxmox cluster but the template has no spec.proxmox section"},
		state: conditions.Stalled, reason: meta.InvalidSpecReason, provider: hypervisorv1alpha1.ProviderProxmox,
		message: "HypervisorCluster pve is a proxmox cluster but the template has no spec.proxmox section",
	}, {
		name:  "the cluster has not been checked yet",
		scope: scope{clusterKey: key, cluster: cluster()},
		state: conditions.Waiting, reason: meta.DependencyNotReadyReason, provider: hypervisorv1alpha1.ProviderProxmox,
		message: "HypervisorCluster pve is not Ready: its first check has not finished",
	}, {
		name:  "the cluster is not Ready",
		scope: scope{clusterKey: key, cluster: cluster(notReady)},
		state: conditions.Waiting, reason: meta.DependencyNotReadyReason, provider: hypervisorv1alpha1.ProviderProxmox,
		message: "HypervisorCluster pve is not Ready: the API token was rejected",
	}, {
		name:  "the provider cannot be built",
		scope: scope{clusterKey: key, cluster: cluster(), clusterReady: true, providerErr: providers.Permanent(meta.SecretNotFoundReason, "Secret ns/pve-token (spec.credentialsRef) not found", nil)},
		state: conditions.Waiting, reason: meta.DependencyNotReadyReason, provider: hypervisorv1alpha1.ProviderProxmox,
		message: "Secret ns/pve-token (spec.credentialsRef) not found",
	}, {
		name:  "the provider has no sources to check",
		scope: scope{clusterKey: key, cluster: cluster(), clusterReady: true, uncheckable: true},
		state: conditions.Ready, reason: meta.SucceededReason, message: "template accepted", provider: hypervisorv1alpha1.ProviderProxmox,
	}, {
		name:  "the source does not exist",
		scope: scope{clusterKey: key, cluster: cluster(), clusterReady: true, sourceErr: providers.Permanent("SourceNotFound", "no VM 9000 on the cluster (spec.proxmox.source.vmid)", nil)},
		state: conditions.Stalled, reason: "SourceNotFound", message: "no VM 9000 on the cluster (spec.proxmox.source.vmid)", provider: hypervisorv1alpha1.ProviderProxmox,
	}, {
		name:  "the template names an unknown variable",
		scope: scope{clusterKey: key, cluster: cluster(), clusterReady: true, sourceErr: providers.Permanent("TemplateInvalid", "unknown variable ${manager}", nil)},
		state: conditions.Stalled, reason: "TemplateInvalid", message: "unknown variable ${manager}", provider: hypervisorv1alpha1.ProviderProxmox,
	}, {
		name:  "the hypervisor does not answer the check",
		scope: scope{clusterKey: key, cluster: cluster(), clusterReady: true, sourceErr: errors.New("connection refused")},
		state: conditions.Waiting, reason: ReasonUnreachable, message: "connection refused", provider: hypervisorv1alpha1.ProviderProxmox,
	}, {
		name:  "the source is found",
		scope: scope{clusterKey: key, cluster: cluster(), clusterReady: true, source: "pve1/9000 (ubuntu-24.04)"},
		state: conditions.Ready, reason: ReasonSourceFound, message: "source pve1/9000 (ubuntu-24.04) found",
		provider: hypervisorv1alpha1.ProviderProxmox, source: "pve1/9000 (ubuntu-24.04)",
	}, {
		name:  "a reconcile that concluded nothing",
		scope: scope{clusterKey: key},
		err:   errors.New("conflict"),
		none:  true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Namespace: "ns", Generation: 3}}
			s := tt.scope
			s.template = tmpl
			got := computeStatus(&s, tt.err)
			if tt.none {
				if got.Reason != "" {
					t.Fatalf("summary %+v, want none", got)
				}
				return
			}
			if got.State != tt.state || got.Reason != tt.reason || got.Message != tt.message {
				t.Errorf("summary %+v, want state %v, reason %s, message %q", got, tt.state, tt.reason, tt.message)
			}
			if tmpl.Status.Provider != tt.provider || tmpl.Status.ResolvedSource != tt.source {
				t.Errorf("status provider %q, resolved source %q; want %q, %q", tmpl.Status.Provider, tmpl.Status.ResolvedSource, tt.provider, tt.source)
			}
			conditionstest.CheckSummary(t, tmpl, got, true)
			if ready := conditions.IsReady(tmpl, tmpl.Generation); ready != (tt.state == conditions.Ready) {
				t.Errorf("Ready %v for state %v", ready, tt.state)
			}
		})
	}
}

// A source found earlier stays recorded while a later check fails.
func TestComputeStatusKeepsTheLastResolvedSource(t *testing.T) {
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Generation: 1}}
	tmpl.Status.ResolvedSource = "pve1/9000 (ubuntu-24.04)"
	s := &scope{template: tmpl, clusterKey: types.NamespacedName{Name: "pve"}, clusterMissing: true}
	computeStatus(s, nil)
	if tmpl.Status.ResolvedSource != "pve1/9000 (ubuntu-24.04)" {
		t.Errorf("resolved source %q", tmpl.Status.ResolvedSource)
	}
}

func TestProviderMismatch(t *testing.T) {
	vmid := int32(9000)
	proxmoxTemplate := &hypervisorv1alpha1.HypervisorMachineTemplate{Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
		Proxmox: &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
	}}
	kubevirtTemplate := &hypervisorv1alpha1.HypervisorMachineTemplate{Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
		KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{},
	}}
	pve := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}, Spec: hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderProxmox}}
	kv := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv"}, Spec: hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt}}
	if msg := providerMismatch(proxmoxTemplate, pve); msg != "" {
		t.Errorf("proxmox template on a proxmox cluster: %q", msg)
	}
	if msg := providerMismatch(kubevirtTemplate, kv); msg != "" {
		t.Errorf("kubevirt template on a kubevirt cluster: %q", msg)
	}
	if msg := providerMismatch(kubevirtTemplate, pve); msg == "" {
		t.Error("a kubevirt template on a proxmox cluster fits")
	}
	if msg := providerMismatch(proxmoxTemplate, kv); msg == "" {
		t.Error("a proxmox template on a kubevirt cluster fits")
	}
}

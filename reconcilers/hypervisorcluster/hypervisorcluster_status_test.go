package hypervisorcluster

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions/conditionstest"
)

func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	nodes := []hypervisorv1alpha1.ClusterNode{{Name: "pve1", Online: true}, {Name: "pve2", Online: false}}
	tests := []struct {
		name      string
		answer    *answer
		failure   error
		err       error
		state     conditions.State
		reason    string
		message   string
		checked   bool // status.version, nodes and lastCheckTime written
		unchanged bool // the summary leaves the conditions alone
		// secretsDeleting and deleting are what the Secrets' and the
		// deletion's phases observed.
		secretsDeleting []string
		deleting        *deleting
		deleted         bool // the cluster has a deletionTimestamp
	}{{
		name:   "the hypervisor answers",
		answer: &answer{version: "8.2.4", nodes: nodes, machines: 3},
		state:  conditions.Ready, reason: ReasonConnected, message: "proxmox 8.2.4 answers; 1 of 2 nodes online", checked: true,
	}, {
		name:   "an empty cluster answers",
		answer: &answer{version: "8.2.4"},
		state:  conditions.Ready, reason: ReasonConnected, message: "proxmox 8.2.4 answers; 0 of 0 nodes online", checked: true,
	}, {
		name:    "bad credentials",
		failure: providers.Permanent("AuthenticationFailed", "the API token in Secret pve-token (spec.credentialsRef) was rejected", nil),
		state:   conditions.Stalled, reason: "AuthenticationFailed", message: "the API token in Secret pve-token (spec.credentialsRef) was rejected",
	}, {
		name:    "an untrusted certificate",
		failure: providers.Permanent("TLSVerificationFailed", "the certificate is not trusted: set spec.tls.caBundleRef", errors.New("x509")),
		state:   conditions.Stalled, reason: "TLSVerificationFailed", message: "the certificate is not trusted: set spec.tls.caBundleRef",
	}, {
		name:    "the Secret is missing",
		failure: providers.Permanent(meta.SecretNotFoundReason, "Secret ns/pve-token (spec.credentialsRef) not found", nil),
		state:   conditions.Stalled, reason: meta.SecretNotFoundReason, message: "Secret ns/pve-token (spec.credentialsRef) not found",
	}, {
		name:    "a transient failure with a reason",
		failure: providers.Transient("HypervisorError", 0, errors.New("503 Service Unavailable")),
		state:   conditions.Waiting, reason: "HypervisorError", message: "cannot reach https://pve:8006: HypervisorError: 503 Service Unavailable; retrying",
	}, {
		name:    "a failure that names no reason",
		failure: errors.New("connection refused"),
		state:   conditions.Waiting, reason: ReasonUnreachable, message: "cannot reach https://pve:8006: connection refused; retrying",
	}, {
		name:  "a reconcile error no phase recorded",
		err:   errors.New("connection refused"),
		state: conditions.Waiting, reason: ReasonUnreachable, message: "cannot reach https://pve:8006: connection refused; retrying",
	}, {
		name:   "a referenced Secret is being deleted",
		answer: &answer{version: "8.2.4", nodes: nodes}, secretsDeleting: []string{"pve-token"},
		state: conditions.Ready, reason: ReasonConnected, checked: true,
		message: "proxmox 8.2.4 answers; 1 of 2 nodes online; Secret pve-token is being deleted and kept readable until this cluster is deleted",
	}, {
		name:     "deleted, machines left",
		deleting: &deleting{claims: []string{"a", "b", "c", "d", "e", "f", "g"}, pooled: 2, timeout: 30 * time.Minute},
		state:    conditions.Progressing, reason: ReasonWaitingForMachines,
		message: "deleted; waiting for the machines of 7 MachineClaims (2 of RunnerPools): a, b, c, d, e and 2 more to be deleted " +
			"(released at the latest 30m0s after deletion, leaving the rest)",
	}, {
		name: "deleted, the cleanup failed", deleted: true, err: errors.New("listing the cluster's MachineClaims: timeout"),
		state: conditions.Waiting, reason: ReasonDeletionRetrying, message: "deleted; retrying the cleanup: listing the cluster's MachineClaims: timeout",
	}, {
		name:      "nothing concluded",
		unchanged: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &hypervisorv1alpha1.HypervisorCluster{
				ObjectMeta: metav1.ObjectMeta{Name: "pve", Namespace: "ns", Generation: 2},
				Spec:       hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderProxmox, Endpoint: "https://pve:8006"},
			}
			if tt.deleted {
				c.DeletionTimestamp = &metav1.Time{Time: now}
			}
			s := &scope{cluster: c, now: now, interval: time.Minute, answer: tt.answer, failure: tt.failure,
				secretsDeleting: tt.secretsDeleting, deleting: tt.deleting}
			got := computeStatus(s, tt.err)
			if tt.unchanged {
				if got.Reason != "" {
					t.Fatalf("summary %+v, want none", got)
				}
				return
			}
			if got.State != tt.state || got.Reason != tt.reason || got.Message != tt.message {
				t.Errorf("summary %+v, want state %v, reason %s, message %q", got, tt.state, tt.reason, tt.message)
			}
			if checked := c.Status.LastCheckTime != nil; checked != tt.checked {
				t.Errorf("lastCheckTime set: %v, want %v", checked, tt.checked)
			}
			if tt.checked && (c.Status.Version != tt.answer.version || len(c.Status.Nodes) != len(tt.answer.nodes) ||
				c.Status.Machines != int32(tt.answer.machines) || !c.Status.LastCheckTime.Time.Equal(now)) {
				t.Errorf("status not taken from the answer: %+v", c.Status)
			}
			// As the finalize-status step would write it after a successful reconcile.
			conditionstest.CheckSummary(t, c, got, true)
			ready := conditions.IsReady(c, c.Generation)
			if ready != (tt.state == conditions.Ready) {
				t.Errorf("Ready %v for state %v", ready, tt.state)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		name     string
		err      error
		interval time.Duration
		cap      time.Duration
		want     time.Duration
	}{
		{"permanent, short interval", providers.Permanent("AuthenticationFailed", "rejected", nil), time.Second, 0, time.Second},
		{"permanent, long interval", providers.Permanent("AuthenticationFailed", "rejected", nil), 5 * time.Minute, 0, 30 * time.Second},
		{"transient with a hint", providers.Transient("Busy", 7*time.Second, nil), time.Minute, 0, 7 * time.Second},
		{"transient without a hint", errors.New("refused"), time.Minute, 0, 15 * time.Second},
		{"capped hint", providers.Transient("Busy", 7*time.Second, nil), time.Minute, time.Second, time.Second},
		{"capped default", errors.New("refused"), time.Minute, time.Second, time.Second},
		{"capped permanent", providers.Permanent("AuthenticationFailed", "rejected", nil), 5 * time.Minute, time.Second, time.Second},
		{"a cap above the pause", providers.Transient("Busy", 7*time.Second, nil), time.Minute, time.Hour, 7 * time.Second},
	} {
		if got := (&Reconciler{RetryCap: tt.cap}).retryAfter(tt.err, tt.interval); got != tt.want {
			t.Errorf("%s: retryAfter = %v, want %v", tt.name, got, tt.want)
		}
	}
}

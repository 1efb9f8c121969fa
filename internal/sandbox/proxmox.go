package sandbox

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
)

// sandboxTemplateVMID is the template VM the simulated cluster starts with.
const sandboxTemplateVMID = 9000

// startProxmox runs the Proxmox VE simulator with one template VM.
func startProxmox(o Options) (*proxmoxsim.Server, error) {
	lat := proxmoxsim.Realistic()
	if o.ProxmoxLatencies != nil {
		lat = *o.ProxmoxLatencies
	}
	sim := proxmoxsim.New(proxmoxsim.Options{Latencies: lat, StorageLockLimit: 4, ErrorLog: log.New(io.Discard, "", 0)})
	if err := sim.StartOn(o.ProxmoxAddr); err != nil {
		return nil, fmt.Errorf("starting the Proxmox simulator on %s: %w", o.ProxmoxAddr, err)
	}
	sim.AddTemplate("pve1", sandboxTemplateVMID, "ubuntu-24.04", map[string]string{
		"scsi0": "local-lvm:base-9000-disk-0,size=10G", "net0": "virtio=BC:24:11:00:90:00,bridge=vmbr0",
		"ide2": "local-lvm:vm-9000-cloudinit,media=cdrom", "cores": "1", "memory": "2048", "boot": "order=scsi0;ide2;net0",
	})
	return sim, nil
}

// proxmoxSecrets are the two Secrets samples/10-proxmox-cluster.yaml
// references, filled from the simulator: the API token it accepts and the CA
// of its certificate. A real cluster's come from an ExternalSecret instead.
func proxmoxSecrets(sim *proxmoxsim.Server) []client.Object {
	tokenID, secret := sim.APIToken()
	labels := map[string]string{meta.CredentialsLabel: "true"}
	return []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-sim-token", Labels: labels},
			StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-sim-ca", Labels: labels},
			Data: map[string][]byte{"ca.crt": sim.CACertPEM()}},
	}
}

// demoClaims are --demo-claims more MachineClaims on the sample template
// ubuntu-sim, so a newcomer watches several clones share the simulator.
func demoClaims(n int) []client.Object {
	var objs []client.Object
	for i := 1; i <= n; i++ {
		objs = append(objs, &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("demo-%d", i)},
			Spec: hypervisorv1alpha1.MachineClaimSpec{
				TemplateRef: hypervisorv1alpha1.TemplateReference{Name: sampleProxmoxTemplate},
				MaxLifetime: &metav1.Duration{Duration: 8 * time.Hour},
			}})
	}
	return objs
}

func createAll(ctx context.Context, c client.Client, namespace string, objs []client.Object) error {
	for _, o := range objs {
		o.SetNamespace(namespace)
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

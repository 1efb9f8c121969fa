package standby_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

func TestFits(t *testing.T) {
	keeps := &hypervisorv1alpha1.HypervisorMachineTemplate{Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
		Standby: &hypervisorv1alpha1.StandbySpec{Hot: 1}}}
	attests := keeps.DeepCopy()
	attests.Spec.Attestation = &hypervisorv1alpha1.AttestationConfig{Method: hypervisorv1alpha1.AttestationJoinToken}
	noneAttest := keeps.DeepCopy()
	noneAttest.Spec.Attestation = &hypervisorv1alpha1.AttestationConfig{Method: hypervisorv1alpha1.AttestationNone}
	none := &hypervisorv1alpha1.HypervisorMachineTemplate{}
	zero := &hypervisorv1alpha1.HypervisorMachineTemplate{Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{Standby: &hypervisorv1alpha1.StandbySpec{}}}
	claim := func(m func(*hypervisorv1alpha1.MachineClaim)) *hypervisorv1alpha1.MachineClaim {
		c := &hypervisorv1alpha1.MachineClaim{}
		if m != nil {
			m(c)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *hypervisorv1alpha1.MachineClaim
		t    *hypervisorv1alpha1.HypervisorMachineTemplate
		fits bool
	}{
		{"plain claim", claim(nil), keeps, true},
		{"attestation none", claim(nil), noneAttest, true},
		{"template keeps none", claim(nil), none, false},
		{"template keeps zero", claim(nil), zero, false},
		{"template attests", claim(nil), attests, true},
		{"credentials, template attests", claim(func(c *hypervisorv1alpha1.MachineClaim) {
			c.Spec.CredentialsSecretRef = &meta.SecretKeyReference{Name: "s", Key: "k"}
		}), attests, true},
		{"standby claim", claim(func(c *hypervisorv1alpha1.MachineClaim) { c.Labels = map[string]string{standby.TemplateLabel: "t"} }), keeps, false},
		{"user data", claim(func(c *hypervisorv1alpha1.MachineClaim) { c.Spec.UserData = "#cloud-config\n" }), keeps, false},
		{"user data Secret", claim(func(c *hypervisorv1alpha1.MachineClaim) {
			c.Spec.UserDataSecretRef = &meta.SecretKeyReference{Name: "s", Key: "k"}
		}), keeps, false},
		{"hostname", claim(func(c *hypervisorv1alpha1.MachineClaim) { c.Spec.Hostname = "h" }), keeps, false},
		{"machine name", claim(func(c *hypervisorv1alpha1.MachineClaim) { c.Spec.MachineName = "m" }), keeps, false},
		{"credentials", claim(func(c *hypervisorv1alpha1.MachineClaim) {
			c.Spec.CredentialsSecretRef = &meta.SecretKeyReference{Name: "s", Key: "k"}
		}), keeps, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := standby.Fits(tc.c, tc.t)
			if got != tc.fits || (!got && why == "") {
				t.Errorf("Fits = %v (%q), want %v with a reason when false", got, why, tc.fits)
			}
		})
	}
}

func TestBindingRoundTrips(t *testing.T) {
	c := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "app", UID: "u-1"}}
	at := time.Unix(1_800_000_000, 0)
	sb := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{standby.BoundToAnnotation: standby.Value(c, at)}}}
	b, ok := standby.BoundTo(sb)
	if !ok || b.UID != "u-1" || b.Name != "app" || !b.At.Equal(at) {
		t.Fatalf("BoundTo = %+v, %v", b, ok)
	}
	// A value written by hand is a binding of long ago: never recorded.
	sb.Annotations[standby.BoundToAnnotation] = "whatever"
	if b, ok := standby.BoundTo(sb); !ok || !b.At.IsZero() {
		t.Errorf("BoundTo(hand-written) = %+v, %v; want bound, at the zero time", b, ok)
	}
	delete(sb.Annotations, standby.BoundToAnnotation)
	if _, ok := standby.BoundTo(sb); ok {
		t.Error("a claim without the annotation is bound")
	}
}

func TestFreeStandbyClaims(t *testing.T) {
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Generation: 3},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{ClusterRef: meta.LocalObjectReference{Name: "pve"}}}
	ready := func(m func(*hypervisorv1alpha1.MachineClaim)) *hypervisorv1alpha1.MachineClaim {
		c := &hypervisorv1alpha1.MachineClaim{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{standby.GenerationAnnotation: "3"}},
			Status:     hypervisorv1alpha1.MachineClaimStatus{Phase: hypervisorv1alpha1.MachineReady, MachineName: "m", ClusterName: "pve"},
		}
		if m != nil {
			m(c)
		}
		return c
	}
	attesting := tmpl.DeepCopy()
	attesting.Spec.Attestation = &hypervisorv1alpha1.AttestationConfig{Method: hypervisorv1alpha1.AttestationJoinToken}
	attested := ready(func(c *hypervisorv1alpha1.MachineClaim) {
		c.Status.Attestation = &hypervisorv1alpha1.MachineAttestationStatus{Phase: hypervisorv1alpha1.AttestationAttested}
	})
	if !standby.Free(attested, attesting) || standby.Free(ready(nil), attesting) {
		t.Error("where the template attests, a standby machine is free once attested, and only then")
	}
	now := metav1.Now()
	for name, tc := range map[string]struct {
		c    *hypervisorv1alpha1.MachineClaim
		free bool
	}{
		"ready":           {ready(nil), true},
		"older template":  {ready(func(c *hypervisorv1alpha1.MachineClaim) { c.Annotations[standby.GenerationAnnotation] = "2" }), false},
		"bound":           {ready(func(c *hypervisorv1alpha1.MachineClaim) { c.Annotations[standby.BoundToAnnotation] = "u/n/1" }), false},
		"provisioning":    {ready(func(c *hypervisorv1alpha1.MachineClaim) { c.Status.Phase = hypervisorv1alpha1.MachineProvisioning }), false},
		"being deleted":   {ready(func(c *hypervisorv1alpha1.MachineClaim) { c.DeletionTimestamp = &now }), false},
		"another cluster": {ready(func(c *hypervisorv1alpha1.MachineClaim) { c.Status.ClusterName = "old" }), false},
	} {
		if got := standby.Free(tc.c, tmpl); got != tc.free {
			t.Errorf("%s: Free = %v, want %v", name, got, tc.free)
		}
	}
}

// A warm machine has not booted: only a name of its own keeps a claim off
// it.
func TestFitsWarm(t *testing.T) {
	warm := &hypervisorv1alpha1.HypervisorMachineTemplate{Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
		Standby: &hypervisorv1alpha1.StandbySpec{Warm: 1}}}
	hotOnly := &hypervisorv1alpha1.HypervisorMachineTemplate{Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
		Standby: &hypervisorv1alpha1.StandbySpec{Hot: 1}}}
	for _, tc := range []struct {
		name string
		spec hypervisorv1alpha1.MachineClaimSpec
		t    *hypervisorv1alpha1.HypervisorMachineTemplate
		fits bool
	}{
		{"plain claim", hypervisorv1alpha1.MachineClaimSpec{}, warm, true},
		{"own user data and hostname", hypervisorv1alpha1.MachineClaimSpec{UserData: "#cloud-config\n", Hostname: "h"}, warm, true},
		{"own credentials", hypervisorv1alpha1.MachineClaimSpec{CredentialsSecretRef: &meta.SecretKeyReference{Name: "s", Key: "k"}}, warm, true},
		{"own machine name", hypervisorv1alpha1.MachineClaimSpec{MachineName: "m"}, warm, false},
		{"template keeps only hot ones", hypervisorv1alpha1.MachineClaimSpec{}, hotOnly, false},
	} {
		c := &hypervisorv1alpha1.MachineClaim{Spec: tc.spec}
		if fits, why := standby.FitsWarm(c, tc.t); fits != tc.fits || !fits && why == "" {
			t.Errorf("%s: fits %v (%q), want %v", tc.name, fits, why, tc.fits)
		}
	}
	sb := &hypervisorv1alpha1.MachineClaim{}
	sb.Labels = map[string]string{standby.TemplateLabel: "t"}
	if fits, _ := standby.FitsWarm(sb, warm); fits {
		t.Error("a standby claim fits a warm machine")
	}
}

// Package standby holds what the template that keeps standby machines and
// the claims that take them agree on: the marks on a standby claim, which
// claims fit a standby machine, and which standby claim is free to take.
//
// A standby machine is the machine of a standby claim: a MachineClaim the
// template made (label TemplateLabel), Ready, holding no workload
// credential. A claim takes it in three steps, each recorded in the API
// server so a crash or a new leader goes on from where it stopped:
//
//  1. bind: the standby claim's annotation BoundToAnnotation is set to the
//     taking claim's UID, with the standby claim's resourceVersion as a
//     precondition, so of two claims (or two replicas) only one wins;
//  2. record: the taking claim writes the machine into its status, with
//     status.boundFrom naming the standby claim;
//  3. hand over: the machine's owner marks on the hypervisor become the
//     taking claim's, and the standby claim is deleted; its finalizer
//     finds the machine no longer its own and deletes nothing.
package standby

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// TemplateLabel marks a standby claim with the name of the template that
// keeps it.
const TemplateLabel = "hyperfleet.io/standby"

// WarmLabel marks a warm standby claim ("true"): its machine is cloned and
// powered off, never configured or booted, and a claim that takes it
// configures and boots it. A standby claim without it is hot.
const WarmLabel = "hyperfleet.io/standby-warm"

// IsWarm reports whether standby claim c keeps a warm machine.
func IsWarm(c *hypervisorv1alpha1.MachineClaim) bool { return c.Labels[WarmLabel] == "true" }

// GenerationAnnotation records the template generation a standby claim was
// made for: one made for an older generation is never taken, and is
// replaced.
const GenerationAnnotation = "hyperfleet.io/standby-template-generation"

// BoundToAnnotation, on a standby claim, holds "<uid>/<name>/<unix
// seconds>": the claim that took its machine, and when.
const BoundToAnnotation = "hyperfleet.io/bound-to"

// DefaultMaxAge is a standby machine's age limit when the template sets none.
const DefaultMaxAge = 24 * time.Hour

// BindGrace is how long a standby claim bound to a claim that has not
// recorded its machine waits before it returns to standby. A taking claim
// records a binding only while it is younger than RecordWithin, so the
// standby claim's check, a grace later, reads the record if there is one:
// a binding is never undone under a claim that recorded it, and never
// recorded after it was undone.
const BindGrace = time.Minute

// RecordWithin is how old a binding may be when its claim records it.
const RecordWithin = BindGrace / 2

// IsStandby reports whether c is a standby claim.
func IsStandby(c *hypervisorv1alpha1.MachineClaim) bool {
	_, ok := c.Labels[TemplateLabel]
	return ok
}

// Binding is who a standby claim's machine was given to, and when.
type Binding struct {
	UID  types.UID
	Name string
	At   time.Time
}

// BoundTo reads a standby claim's binding; ok is false when it is free. A
// value it cannot read (written by hand) is a binding made long ago, so it
// is undone, never recorded.
func BoundTo(c *hypervisorv1alpha1.MachineClaim) (Binding, bool) {
	v, ok := c.Annotations[BoundToAnnotation]
	if !ok || v == "" {
		return Binding{}, false
	}
	parts := strings.SplitN(v, "/", 3)
	b := Binding{UID: types.UID(parts[0])}
	if len(parts) > 1 {
		b.Name = parts[1]
	}
	if len(parts) > 2 {
		if sec, err := strconv.ParseInt(parts[2], 10, 64); err == nil {
			b.At = time.Unix(sec, 0)
		}
	}
	return b, true
}

// Value is the annotation's value for a binding to c made at now.
func Value(c *hypervisorv1alpha1.MachineClaim, now time.Time) string {
	return string(c.UID) + "/" + c.Name + "/" + strconv.FormatInt(now.Unix(), 10)
}

// Fits says whether claim c may take a standby machine of template t, and
// when not, why. A standby machine booted with the template's user data and
// hostname, so only a claim that asks for none of its own fits: no user
// data, no hostname, no machine name. Credentials fit only where the
// template attests: they then go to the machine through the credential
// endpoint once it is the claim's, never in user data; without attestation
// a claim's credentials would have to be in the user data it booted with.
// A claim that does not fit takes the cold path.
func Fits(c *hypervisorv1alpha1.MachineClaim, t *hypervisorv1alpha1.HypervisorMachineTemplate) (bool, string) {
	switch {
	case IsStandby(c):
		return false, "it is a standby claim"
	case t.Spec.Standby == nil || t.Spec.Standby.Hot == 0:
		return false, "the template keeps no standby machines"
	case c.Spec.UserData != "" || c.Spec.UserDataSecretRef != nil:
		return false, "the claim has its own user data, and a standby machine booted with the template's"
	case c.Spec.Hostname != "":
		return false, "the claim asks for its own hostname"
	case c.Spec.MachineName != "":
		return false, "the claim asks for its own machine name"
	case c.Spec.CredentialsSecretRef != nil && !Attests(t):
		return false, "the claim has its own credentials, and without attestation they would be in the user data"
	}
	return true, ""
}

// FitsWarm says whether claim c may take a warm standby machine of
// template t, and when not, why. A warm machine has not booted: the claim
// configures it with its own user data, hostname and credentials and boots
// it. Only a name of its own does not fit: the machine has its name.
func FitsWarm(c *hypervisorv1alpha1.MachineClaim, t *hypervisorv1alpha1.HypervisorMachineTemplate) (bool, string) {
	switch {
	case IsStandby(c):
		return false, "it is a standby claim"
	case t.Spec.Standby == nil || t.Spec.Standby.Warm == 0:
		return false, "the template keeps no warm machines"
	case c.Spec.MachineName != "":
		return false, "the claim asks for its own machine name"
	}
	return true, ""
}

// Attests reports whether t's machines prove their identity to SPIRE.
func Attests(t *hypervisorv1alpha1.HypervisorMachineTemplate) bool {
	a := t.Spec.Attestation
	return a != nil && a.Method != "" && a.Method != hypervisorv1alpha1.AttestationNone
}

// Free reports whether standby claim s of template t can be taken now: its
// machine Ready (and attested, where the template attests), made for the
// template's current generation on its current cluster, not bound, not
// being deleted.
func Free(s *hypervisorv1alpha1.MachineClaim, t *hypervisorv1alpha1.HypervisorMachineTemplate) bool {
	if _, bound := BoundTo(s); bound {
		return false
	}
	if Attests(t) && !IsWarm(s) && (s.Status.Attestation == nil || s.Status.Attestation.Phase != hypervisorv1alpha1.AttestationAttested) {
		// Not attested yet (or failed): it cannot prove it is the
		// taker's machine, so it is not taken.
		return false
	}
	phase := hypervisorv1alpha1.MachineReady
	if IsWarm(s) {
		phase = hypervisorv1alpha1.MachineWarm
	}
	return s.DeletionTimestamp.IsZero() && s.Status.Phase == phase &&
		s.Status.MachineName != "" && s.Status.ClusterName == t.Spec.ClusterRef.Name && Current(s, t)
}

// Current reports whether standby claim s was made for t's generation.
func Current(s *hypervisorv1alpha1.MachineClaim, t *hypervisorv1alpha1.HypervisorMachineTemplate) bool {
	return s.Annotations[GenerationAnnotation] == strconv.FormatInt(t.Generation, 10)
}

// Oldest orders standby claims oldest first, the order claims take them
// in: the oldest is the nearest its age limit.
func Oldest(claims []*hypervisorv1alpha1.MachineClaim) {
	slices.SortFunc(claims, func(a, b *hypervisorv1alpha1.MachineClaim) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// MaxAge is the template's standby age limit.
func MaxAge(t *hypervisorv1alpha1.HypervisorMachineTemplate) time.Duration {
	if s := t.Spec.Standby; s != nil && s.MaxAge != nil && s.MaxAge.Duration > 0 {
		return s.MaxAge.Duration
	}
	return DefaultMaxAge
}

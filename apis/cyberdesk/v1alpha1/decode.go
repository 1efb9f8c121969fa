package v1alpha1

import "github.com/hyperfleet/hyperfleet/apis/meta"

// Each kind decodes itself tolerantly (meta.UnmarshalTolerant), so one object
// stored under a looser schema never fails the list, or the watch, that
// carries it: its undecodable fields are left zero and listed in
// DecodeFailures, and the reconcilers refuse to act on it. The alias types
// have the fields but not the method, so the strict first attempt does not
// recurse.

type (
	cyberdeskJSON Cyberdesk
)

// UnmarshalJSON decodes a stored Cyberdesk, tolerating undecodable fields.
func (o *Cyberdesk) UnmarshalJSON(b []byte) (err error) {
	o.DecodeFailures, err = meta.UnmarshalTolerant(b, (*cyberdeskJSON)(o))
	return err
}

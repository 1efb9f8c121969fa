package v1alpha1

import "github.com/hyperfleet/hyperfleet/apis/meta"

// Each kind decodes itself tolerantly (meta.UnmarshalTolerant), so one object
// stored under a looser schema never fails the list, or the watch, that
// carries it: its undecodable fields are left zero and listed in
// DecodeFailures, and the reconcilers refuse to act on it. The alias types
// have the fields but not the method, so the strict first attempt does not
// recurse.

type (
	hourglassExecutorJSON HourglassExecutor
	performerJSON         Performer
)

// UnmarshalJSON decodes a stored HourglassExecutor, tolerating undecodable fields.
func (o *HourglassExecutor) UnmarshalJSON(b []byte) (err error) {
	o.DecodeFailures, err = meta.UnmarshalTolerant(b, (*hourglassExecutorJSON)(o))
	return err
}

// UnmarshalJSON decodes a stored Performer, tolerating undecodable fields.
func (o *Performer) UnmarshalJSON(b []byte) (err error) {
	o.DecodeFailures, err = meta.UnmarshalTolerant(b, (*performerJSON)(o))
	return err
}

package machineclaim

import (
	"testing"
	"time"
)

// A standby claim one worker reserved is passed over by the others until
// its reservation ages out or is given back.
func TestReservations(t *testing.T) {
	var r reservations
	t0 := time.Now()
	if !r.reserve("a", t0) || !r.reserve("b", t0) {
		t.Fatal("a free standby claim could not be reserved")
	}
	if r.reserve("a", t0.Add(reservationTTL-time.Second)) {
		t.Error("a reserved standby claim was reserved again")
	}
	r.release("b")
	if !r.reserve("b", t0.Add(time.Second)) {
		t.Error("a standby claim given back could not be reserved")
	}
	if !r.reserve("a", t0.Add(reservationTTL)) {
		t.Error("a reservation did not age out")
	}
	// Aged-out reservations are dropped, not kept for ever.
	r.reserve("c", t0.Add(3*reservationTTL))
	if len(r.m) != 1 {
		t.Errorf("%d reservations kept; want only the live one", len(r.m))
	}
}

package machineclaim

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// A standby claim one worker reserved is passed over by the others until
// its reservation ages out or is given back, and aged-out ones are not
// kept.
func TestReservations(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := reservations{Clock: clk}
	if !r.reserve("a") || !r.reserve("b") {
		t.Fatal("a free standby claim could not be reserved")
	}
	clk.Step(reservationTTL - time.Second)
	if r.reserve("a") {
		t.Error("a reserved standby claim was reserved again")
	}
	r.release("b")
	if !r.reserve("b") {
		t.Error("a standby claim given back could not be reserved")
	}
	clk.Step(time.Second)
	if !r.reserve("a") {
		t.Error("a reservation did not age out")
	}
	clk.Step(3 * reservationTTL)
	r.reserve("c")
	if n := r.held.Len(); n != 1 {
		t.Errorf("%d reservations kept; want only the live one", n)
	}
}

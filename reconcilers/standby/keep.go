package standby

import (
	"hash/fnv"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// Tally is what a keeper of standby claims found, and what it must do to
// keep want of them: the ones to delete and how many to make.
type Tally struct {
	// Hot are free to take; Starting are being made (or attesting).
	Hot, Starting []*hypervisorv1alpha1.MachineClaim
	// Binding counts the ones a claim took and is handing over: they are
	// the taking claim's to finish with.
	Binding int32
	// Retire are to be deleted: ended, failed, made for an older
	// generation, or beyond want (those still starting first, then the
	// youngest hot ones, so the oldest are taken before their age limit).
	Retire []*hypervisorv1alpha1.MachineClaim
	// Make is how many to make.
	Make int
}

// Sort sorts a keeper's standby claims (those being deleted are skipped)
// into a Tally for keeping want of them; free and current are the
// keeper's Free and Current.
func Sort(claims []hypervisorv1alpha1.MachineClaim, want int, free, current func(*hypervisorv1alpha1.MachineClaim) bool) Tally {
	var t Tally
	for i := range claims {
		sb := &claims[i]
		if !sb.DeletionTimestamp.IsZero() {
			continue
		}
		if _, bound := BoundTo(sb); bound {
			t.Binding++
			continue
		}
		switch p := sb.Status.Phase; {
		case p == hypervisorv1alpha1.MachineTerminated || p == hypervisorv1alpha1.MachineFailed ||
			p == hypervisorv1alpha1.MachineStopping || !current(sb):
			t.Retire = append(t.Retire, sb)
		case free(sb):
			t.Hot = append(t.Hot, sb)
		default:
			t.Starting = append(t.Starting, sb)
		}
	}
	Oldest(t.Hot)
	Oldest(t.Starting)
	for len(t.Hot)+len(t.Starting) > want {
		if n := len(t.Starting); n > 0 {
			t.Retire, t.Starting = append(t.Retire, t.Starting[n-1]), t.Starting[:n-1]
			continue
		}
		n := len(t.Hot)
		t.Retire, t.Hot = append(t.Retire, t.Hot[n-1]), t.Hot[:n-1]
	}
	t.Make = max(want-len(t.Hot)-len(t.Starting), 0)
	return t
}

// Lifetime is the maxLifetime of a standby claim named name under age
// limit maxAge: maxAge less up to a tenth, spread by the name, so standby
// machines made together are not all refreshed at once.
func Lifetime(name string, maxAge time.Duration) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return (maxAge - time.Duration(h.Sum32()%1000)*maxAge/10000).Truncate(time.Second)
}

package cyberdesk_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
)

// A session is extended by raising spec.timeoutMs on the running desk: the
// expiry moves and the desk runs on. Lowering it below the time already
// used ends the desk at once, as if it had timed out.
func TestTimeoutMsEditMovesTheExpiry(t *testing.T) {
	l := newLab(t)
	l.desk("extend", 3600000)
	d := l.waitPhase("extend", cyberdeskv1alpha1.CyberdeskRunning, time.Minute)
	start := d.Status.StartTime.Time

	setTimeout := func(ms int64) {
		t.Helper()
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"timeoutMs":%d}}`, ms))
		obj := &cyberdeskv1alpha1.Cyberdesk{}
		obj.Name, obj.Namespace = "extend", l.ns
		if err := l.c.Patch(rootCtx, obj, patch); err != nil {
			t.Fatal(err)
		}
	}

	setTimeout(7200000)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		d, _ = l.get("extend")
		return d.Status.ExpiryTime != nil && d.Status.ExpiryTime.Time.Equal(start.Add(2*time.Hour)) && d.Status.Phase == cyberdeskv1alpha1.CyberdeskRunning,
			fmt.Sprintf("phase %s, expiry %v; want Running until start + 2h (%v)", d.Status.Phase, d.Status.ExpiryTime, start.Add(2*time.Hour))
	})

	// A minute of the session used; then a timeout of 30 s is already past.
	fakeClock.Step(time.Minute)
	setTimeout(30000)
	d = l.waitPhase("extend", cyberdeskv1alpha1.CyberdeskTerminated, 30*time.Second)
	if reason, _ := readyReason(d); reason != "TimedOut" {
		t.Errorf("Ready reason %q, want TimedOut", reason)
	}
	l.nothingLeft("extend", 30*time.Second)
}

package supabase

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// CredentialsFunc returns the current credentials; ok is false when export
// is not configured (no Secret). It is called before every send, so a
// rotated key takes effect without a restart.
type CredentialsFunc func(ctx context.Context) (creds Credentials, ok bool, err error)

// Exporter sends rows in the background. Enqueue never blocks: a row
// replaces the pending one with the same ID (only the latest status
// matters), and failures are retried with exponential backoff, so a slow or
// down Supabase never holds up a VM's lifecycle.
type Exporter struct {
	Credentials CredentialsFunc
	HTTPClient  *http.Client
	Table       string
	Log         logr.Logger
	// MinBackoff and MaxBackoff bound the retry delay (1 s and 5 min).
	MinBackoff, MaxBackoff time.Duration

	mu      sync.Mutex
	pending map[string]Row
	wake    chan struct{}
}

// Enqueue schedules row for export.
func (e *Exporter) Enqueue(row Row) {
	e.mu.Lock()
	if e.pending == nil {
		e.pending = map[string]Row{}
	}
	e.pending[row.ID] = row
	e.mu.Unlock()
	select {
	case e.wakeup() <- struct{}{}:
	default:
	}
}

func (e *Exporter) wakeup() chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wake == nil {
		e.wake = make(chan struct{}, 1)
	}
	return e.wake
}

// Pending returns how many rows wait to be sent.
func (e *Exporter) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pending)
}

// NeedLeaderElection: only the leader reconciles, so only it exports.
func (e *Exporter) NeedLeaderElection() bool { return true }

// Start sends pending rows until ctx ends (a manager Runnable).
func (e *Exporter) Start(ctx context.Context) error {
	minB, maxB := e.MinBackoff, e.MaxBackoff
	if minB <= 0 {
		minB = time.Second
	}
	if maxB <= 0 {
		maxB = 5 * time.Minute
	}
	hc := e.HTTPClient
	if hc == nil {
		hc = NewHTTPClient(0)
	}
	table := e.Table
	if table == "" {
		table = Table
	}
	wake := e.wakeup()
	delay := time.Duration(0)
	for {
		if delay > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
		} else {
			select {
			case <-ctx.Done():
				return nil
			case <-wake:
			}
		}
		err := e.flush(ctx, hc, table)
		switch {
		case err == nil:
			delay = 0
			if e.Pending() > 0 {
				delay = time.Millisecond // more arrived while sending
			}
		case ctx.Err() != nil:
			return nil
		default:
			delay = min(max(delay*2, minB), maxB)
			e.Log.Info("Exporting Cyberdesk status to Supabase failed; retrying", "retryIn", delay.String(), "pending", e.Pending(), "error", err.Error())
		}
	}
}

// flush sends everything pending in one upsert; on failure the rows go back
// unless a newer status for the same desk arrived meanwhile.
func (e *Exporter) flush(ctx context.Context, hc *http.Client, table string) error {
	creds, ok, err := e.Credentials(ctx)
	if err != nil {
		return err
	}
	e.mu.Lock()
	batch := e.pending
	e.pending = map[string]Row{}
	e.mu.Unlock()
	if !ok || len(batch) == 0 {
		return nil // not configured: drop, as there is nowhere to send
	}
	rows := make([]Row, 0, len(batch))
	for _, r := range batch {
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	err = Upsert(ctx, hc, creds, table, rows)
	if err == nil {
		return nil
	}
	var se *StatusError
	if errors.As(err, &se) && !se.Retryable() {
		// A 4xx other than throttling will not heal by resending the same
		// rows: report and drop them; the next status change tries again.
		e.Log.Error(err, "Supabase refused Cyberdesk status rows; dropping them", "rows", len(rows))
		return nil
	}
	e.mu.Lock()
	for id, r := range batch {
		if _, newer := e.pending[id]; !newer {
			e.pending[id] = r
		}
	}
	e.mu.Unlock()
	return err
}

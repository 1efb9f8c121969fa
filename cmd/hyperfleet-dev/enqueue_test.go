package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEnqueueWaitsForTheJobsToStart: with --wait, enqueue-jobs says which
// runner started each job and how long after it was queued, and fails,
// naming how many, when some do not start in time.
func TestEnqueueWaitsForTheJobsToStart(t *testing.T) {
	var mu sync.Mutex
	queued := time.Now()
	var jobs []simJob
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPost {
			j := simJob{ID: int64(len(jobs) + 1), CreatedAt: queued}
			jobs = append(jobs, j)
			_ = json.NewEncoder(w).Encode(j)
			return
		}
		// Job 1 starts at the second look, 1.5 s after it was queued; job 2 never.
		if polls++; polls == 2 {
			jobs[0].RunnerName, jobs[0].StartedAt = "demo-runners-abcde", queued.Add(1500*time.Millisecond)
		}
		_ = json.NewEncoder(w).Encode(jobs)
	}))
	defer srv.Close()

	var out, errOut bytes.Buffer
	err := runEnqueue([]string{"--github-sim", srv.URL, "--count", "1", "--wait", "10s"}, &out, &errOut)
	if err != nil || !strings.Contains(out.String(), "job 1 started on runner demo-runners-abcde 1.5s after it was queued") {
		t.Fatalf("enqueue-jobs --wait: %v\n%s", err, out.String())
	}
	out.Reset()
	err = runEnqueue([]string{"--github-sim", srv.URL, "--count", "1", "--wait", "600ms"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "1 of 1 jobs not started within 600ms") {
		t.Fatalf("a job that never starts: %v", err)
	}
}

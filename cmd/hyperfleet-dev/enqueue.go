package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// runEnqueue queues fake workflow jobs on the sandbox's simulated GitHub,
// which tells the manager of them as workflow_job webhooks (--mode webhook)
// or through the sample scale set's session (--mode scale-set): the sample
// RunnerPool scales up, its runners take the jobs and go away.
func runEnqueue(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hyperfleet-dev enqueue-jobs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sim := fs.String("github-sim", "http://127.0.0.1:8090", "URL of the sandbox's GitHub simulator (hyperfleet-dev --github-sim-address).")
	repo := fs.String("repo", "acme/widgets", "Repository (owner/name) the jobs belong to.")
	mode := fs.String("mode", "webhook", "Which sample pool the jobs are for: webhook (demo-runners, told by workflow_job deliveries) or scale-set (scaleset-runners, told by its scale set's session). Picks the default --labels.")
	labels := fs.String("labels", "", "Comma-separated runs-on labels of the jobs. Default: self-hosted,linux,x64,sandbox for --mode webhook, sandbox-scaleset for --mode scale-set.")
	count := fs.Int("count", 1, "How many jobs to queue.")
	duration := fs.Duration("duration", 20*time.Second, "How long each job runs once a runner takes it.")
	wait := fs.Duration("wait", 0, "Wait up to this long for a runner to start each job, and say how long each waited (e.g. --wait 5m). 0: do not wait.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *labels == "" {
		switch *mode {
		case "webhook":
			*labels = "self-hosted,linux,x64,sandbox"
		case "scale-set":
			*labels = "sandbox-scaleset"
		default:
			return fmt.Errorf("--mode must be webhook or scale-set, not %q", *mode)
		}
	}
	if *count < 1 || *count > 1000 {
		return fmt.Errorf("--count must be between 1 and 1000, not %d", *count)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	base := strings.TrimRight(*sim, "/")
	var queued []int64
	for i := range *count {
		body, _ := json.Marshal(map[string]any{"repo": *repo, "labels": strings.Split(*labels, ","), "duration": duration.String()})
		res, err := hc.Post(base+"/_sim/jobs", "application/json", bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("queueing job %d: %w (is `make dev` running?)", i+1, err)
		}
		raw, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode/100 != 2 {
			return fmt.Errorf("queueing job %d: HTTP %d: %s", i+1, res.StatusCode, strings.TrimSpace(string(raw)))
		}
		var job struct {
			ID int64 `json:"id"`
		}
		_ = json.Unmarshal(raw, &job)
		_, _ = fmt.Fprintf(stdout, "queued job %d on %s (runs-on %s, %s)\n", job.ID, *repo, *labels, duration)
		queued = append(queued, job.ID)
	}
	if *wait > 0 {
		return waitStarted(hc, base, queued, *wait, stdout)
	}
	_, _ = fmt.Fprintln(stdout, "watch them: kubectl get runnerpools,machineclaims -w")
	return nil
}

// simJob is what the simulator says of a job.
type simJob struct {
	ID         int64     `json:"id"`
	RunnerName string    `json:"runner_name"`
	CreatedAt  time.Time `json:"created_at"`
	StartedAt  time.Time `json:"started_at"`
}

// waitStarted polls the simulator until a runner started each job, and
// says which runner and how long after it was queued.
func waitStarted(hc *http.Client, base string, ids []int64, timeout time.Duration, stdout io.Writer) error {
	deadline := time.Now().Add(timeout)
	pending := map[int64]bool{}
	for _, id := range ids {
		pending[id] = true
	}
	for len(pending) > 0 {
		res, err := hc.Get(base + "/_sim/jobs")
		if err != nil {
			return fmt.Errorf("reading the jobs: %w", err)
		}
		var jobs []simJob
		err = json.NewDecoder(res.Body).Decode(&jobs)
		_ = res.Body.Close()
		if err != nil {
			return fmt.Errorf("reading the jobs: %w", err)
		}
		for _, j := range jobs {
			if pending[j.ID] && !j.StartedAt.IsZero() {
				delete(pending, j.ID)
				_, _ = fmt.Fprintf(stdout, "job %d started on runner %s %s after it was queued\n", j.ID, j.RunnerName, j.StartedAt.Sub(j.CreatedAt).Round(100*time.Millisecond))
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs not started within %s: kubectl get runnerpools,machineclaims", len(pending), len(ids), timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return nil
}

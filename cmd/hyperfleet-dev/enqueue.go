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
// which delivers them to the manager as workflow_job webhooks: the demo
// RunnerPool scales up, its runners take the jobs and go away.
func runEnqueue(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hyperfleet-dev enqueue-jobs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sim := fs.String("github-sim", "http://127.0.0.1:8090", "URL of the sandbox's GitHub simulator (hyperfleet-dev --github-sim-address).")
	repo := fs.String("repo", "acme/widgets", "Repository (owner/name) the jobs belong to.")
	labels := fs.String("labels", "self-hosted,linux,x64,sandbox", "Comma-separated runs-on labels of the jobs; the demo pool serves \"sandbox\".")
	count := fs.Int("count", 1, "How many jobs to queue.")
	duration := fs.Duration("duration", 20*time.Second, "How long each job runs once a runner takes it.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *count < 1 || *count > 1000 {
		return fmt.Errorf("--count must be between 1 and 1000, not %d", *count)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	for i := range *count {
		body, _ := json.Marshal(map[string]any{"repo": *repo, "labels": strings.Split(*labels, ","), "duration": duration.String()})
		res, err := hc.Post(strings.TrimRight(*sim, "/")+"/_sim/jobs", "application/json", bytes.NewReader(body))
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
	}
	_, _ = fmt.Fprintln(stdout, "watch them: kubectl get runnerpools,machineclaims -w")
	return nil
}

package githubsim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Control endpoints under /_sim/, for what GitHub's REST API does not cover:
// the runner application's own calls (made by the bootstrap agent's fake
// config.sh and run.sh, which cannot link this package) and driving the
// simulation from outside the process (`hyperfleet-dev`, curl). Bodies and
// answers are JSON; errors are {"message": "..."} with GitHub's status.
const (
	// SimRegister is config.sh: a RegisterRequest; answers 201 with the Runner.
	SimRegister = "POST /_sim/runners/register"
	// SimRun is run.sh: a RunRequest; answers 200 with the Runner (with
	// "wait": true, once its process exited).
	SimRun = "POST /_sim/runners/run"
	// SimStop powers a runner's machine off: {"id": N}; answers 204.
	SimStop = "POST /_sim/runners/stop"
	// SimRemove is config.sh remove: a RemoveRequest; answers 204.
	SimRemove = "POST /_sim/runners/remove"
	// SimListRunners answers every registered Runner.
	SimListRunners = "GET /_sim/runners"
	// SimListJobs answers every Job.
	SimListJobs = "GET /_sim/jobs"
	// SimQueueJob queues a job: {"repo", "labels", "duration": "30s",
	// "conclusion", "workflow", "name"}; answers 201 with the Job.
	SimQueueJob = "POST /_sim/jobs"
	// SimApproveJob approves a waiting job's environment; answers 204.
	SimApproveJob = "POST /_sim/jobs/{id}/approve"
	// SimListDeliveries answers every webhook Delivery.
	SimListDeliveries = "GET /_sim/deliveries"
	// SimRedeliver redelivers one: answers 202 with {"id": the new delivery's ID}.
	SimRedeliver = "POST /_sim/deliveries/{id}/redeliver"
	// SimStats answers Stats.
	SimStats = "GET /_sim/stats"
)

func (s *Server) simRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc(SimRegister, func(w http.ResponseWriter, r *http.Request) {
		var req RegisterRequest
		if !readJSON(w, r, &req) {
			return
		}
		runner, err := s.RegisterRunner(req)
		answer(w, http.StatusCreated, runner, err)
	})
	mux.HandleFunc(SimRun, func(w http.ResponseWriter, r *http.Request) {
		var req RunRequest
		if !readJSON(w, r, &req) {
			return
		}
		runner, err := s.RunRunner(r.Context(), req)
		answer(w, http.StatusOK, runner, err)
	})
	mux.HandleFunc(SimStop, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID int64 `json:"id"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		answer(w, http.StatusNoContent, nil, s.StopRunner(req.ID))
	})
	mux.HandleFunc(SimRemove, func(w http.ResponseWriter, r *http.Request) {
		var req RemoveRequest
		if !readJSON(w, r, &req) {
			return
		}
		answer(w, http.StatusNoContent, nil, s.RemoveRunner(req))
	})
	mux.HandleFunc(SimListRunners, func(w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusOK, nonNil(s.Runners()), nil)
	})
	mux.HandleFunc(SimListJobs, func(w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusOK, nonNil(s.Jobs()), nil)
	})
	mux.HandleFunc(SimQueueJob, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			JobSpec
			Duration string `json:"duration"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		spec := req.JobSpec
		if req.Duration != "" {
			d, err := time.ParseDuration(req.Duration)
			if err != nil {
				answer(w, 0, nil, errf(http.StatusBadRequest, "duration %q is not a Go duration such as 30s", req.Duration))
				return
			}
			spec.Duration = d
		}
		id, err := s.QueueJobSpec(spec)
		if err != nil {
			answer(w, 0, nil, errf(http.StatusNotFound, "%v", err))
			return
		}
		job, _ := s.Job(id)
		answer(w, http.StatusCreated, job, nil)
	})
	mux.HandleFunc(SimApproveJob, func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err == nil {
			err = s.ApproveJob(id)
		}
		if err != nil {
			answer(w, 0, nil, errf(http.StatusNotFound, "no waiting job %q", r.PathValue("id")))
			return
		}
		answer(w, http.StatusNoContent, nil, nil)
	})
	mux.HandleFunc(SimListDeliveries, func(w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusOK, nonNil(s.Deliveries()), nil)
	})
	mux.HandleFunc(SimRedeliver, func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil {
			answer(w, 0, nil, errf(http.StatusNotFound, "no delivery %q", r.PathValue("id")))
			return
		}
		newID, err := s.Redeliver(id)
		if err != nil {
			answer(w, 0, nil, errf(http.StatusNotFound, "%v", err))
			return
		}
		answer(w, http.StatusAccepted, map[string]int64{"id": newID}, nil)
	})
	mux.HandleFunc(SimStats, func(w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusOK, s.Stats(), nil)
	})
	return mux
}

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		answer(w, 0, nil, errf(http.StatusBadRequest, "Problems parsing JSON"))
		return false
	}
	return true
}

// answer writes v with status, or err as {"message"} with its status.
func answer(w http.ResponseWriter, status int, v any, err error) {
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = errf(http.StatusInternalServerError, "%v", err)
		}
		writeJSON(w, ae.status, map[string]string{"message": ae.message})
		return
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, v)
}

// Package githubsim is an in-memory GitHub for tests, the developer sandbox
// and benchmarks: the REST endpoints HyperFleet uses to manage self-hosted
// Actions runners, the runner application's side of registration, a job
// queue, and workflow_job webhooks.
//
// It speaks GitHub's wire format closely enough that the real client library
// (github.com/google/go-github/v60) drives it end to end, at the root (as
// api.github.com) and under /api/v3 (as an Enterprise Server):
//
//	POST   /app/installations/{installation_id}/access_tokens   App JWT (RS256, iss, iat, exp) → installation token
//	POST   /repos/{owner}/{repo}/actions/runners/registration-token
//	POST   /repos/{owner}/{repo}/actions/runners/remove-token
//	POST   /repos/{owner}/{repo}/actions/runners/generate-jitconfig
//	GET    /repos/{owner}/{repo}/actions/runners                  paginated (per_page, page, Link)
//	GET    /repos/{owner}/{repo}/actions/runners/{runner_id}
//	DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}      422 while the runner is busy
//	       /orgs/{org}/actions/runners/...                        the same for organizations
//	GET    /orgs/{org}/actions/runner-groups                      paginated
//
// Every call but the first is authenticated with an installation token or a
// personal access token, charged to that credential's budget and answered
// with X-RateLimit-Limit/-Remaining/-Used/-Reset/-Resource; a spent budget
// gives GitHub's 403 "API rate limit exceeded". Errors are GitHub's JSON
// ({"message", "documentation_url", "status"}) with GitHub's status codes.
//
// Runners live as on GitHub. config.sh (RegisterRunner, POST
// /_sim/runners/register) registers one with a registration token: it is
// offline. run.sh (RunRunner, POST /_sim/runners/run, by ID or with a JIT
// config) starts it: it comes online, takes the oldest queued job whose
// labels it has (busy), finishes after the job's duration and, if
// ephemeral, deregisters and exits. StopRunner is a machine powering off.
// QueueJob puts a job in the queue; each change of a job is a workflow_job
// delivery (queued, in_progress, completed) to the configured URL, signed
// with X-Hub-Signature-256, carrying X-GitHub-Event and X-GitHub-Delivery,
// and can be redelivered. The /_sim/ endpoints are listed with the Sim
// constants.
//
// Faults (InjectFault) reproduce what a client must survive: error statuses,
// 429 and 403 with Retry-After, secondary rate limits with or without
// Retry-After, slow and hung answers, and a runner taking a job between a
// client's look at it and its next call (FaultStartJob). Runners, Jobs, Deliveries, Stats and
// Requests let a test check what happened, e.g. that no runner is left
// registered.
//
// The runner scale-set API (scaleset.go, scaleset_api.go) is spoken well
// enough that GitHub's own client, github.com/actions/scaleset and its
// listener package, unmodified, drive it (scaleset_test.go):
//
//	POST   /actions/runner-registration            "RemoteAuth <registration token>" → the Actions service URL and an admin JWT
//	GET    /_actions/_apis/runtime/runnergroups/?groupName=
//	GET    /_actions/_apis/runtime/runnerscalesets?runnerGroupId=&name=
//	POST   /_actions/_apis/runtime/runnerscalesets  409 for a taken name in the group
//	GET, PATCH, DELETE /_actions/_apis/runtime/runnerscalesets/{id}
//	POST   .../runnerscalesets/{id}/sessions        one session per scale set: 409 RunnerScaleSetSessionConflictException
//	PATCH, DELETE .../runnerscalesets/{id}/sessions/{session}  400 RunnerScaleSetSessionExpiredException for a session that is gone
//	GET    .../runnerscalesets/{id}/messages?sessionId=   long poll: a batch of at most 50 job messages with the statistics, or 202; 401 once the queue token expired
//	DELETE .../runnerscalesets/{id}/messages/{id}?sessionId=   acknowledges; an unacknowledged message is delivered again
//	POST   .../runnerscalesets/{id}/acquirejobs     with the queue token
//	POST   .../runnerscalesets/{id}/generatejitconfig  a JIT runner of the scale set; 409 AgentExistsException for a taken name
//	GET, DELETE /_actions/_apis/distributedtask/pools/0/agents/{id}  a busy runner's removal is refused (JobStillRunningException)
//
// A queued job whose labels are all the scale set's is offered to it
// (JobAvailable), assigned once acquired (JobAssigned, counted in
// totalAssignedJobs), taken only by a runner of the scale set (JobStarted)
// and finished (JobCompleted, result "succeeded", "failed" or "canceled").
// The shapes are those the library decodes (field names and casing,
// "RunnerSetting" included); the error answers carry the exception names,
// namespaces and messages GitHub's service answered with in the logs of
// actions-runner-controller's issue reports (409 for a second session,
// 400 for a session that is gone, the queue under
// _apis/runtime/runnerscalesets/{id}/messages?sessionId=). No full
// response body recorded from GitHub was available beyond those.
//
// GitHub's known scale-set faults are acted out on demand
// (scaleset_faults.go): a JobCompleted while the job still runs
// (CompleteEarly), a cancelled job's runner left registered and offline
// (CancelLeavingGhost), job messages lost while the statistics stay true
// (DropScaleSetMessages); a lost session is InjectFault on the poll, or
// ExpireSessionTokens. Not modelled: job reassignment after a missed
// acquire, message ordering across sessions, and the broker's own error
// bodies beyond the exception names the library matches.
//
// A typical test:
//
//	sim := githubsim.New(githubsim.Options{WebhookURL: hook.URL, WebhookSecret: "s3cret"})
//	if err := sim.Start(); err != nil { ... }
//	defer sim.Close()
//	client, err := github.New(github.Config{BaseURL: sim.URL(), AppID: sim.AppID(),
//		InstallationID: sim.InstallationID(), PrivateKeyPEM: sim.AppPrivateKeyPEM()})
//
// Everything runs in one process; all state sits behind one mutex, and Close
// stops every timer and goroutine.
package githubsim

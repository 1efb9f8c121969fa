// Package scaleset is HyperFleet's side of GitHub's runner scale-set API:
// building a client of github.com/actions/scaleset from a pool's
// credentials, keeping a scale set in step with what a pool asks for
// (Ensure), opening its one message session with GitHub's session
// conflict handled (OpenSession), and holding that session through its
// failures (Listen).
//
// What the library does for us, and is not written again here: the
// registration-token → Actions service exchange and the admin token's
// renewal, every request's shape and error decoding (RunnerExistsError,
// RunnerNotFoundError, JobStillRunningError), the message session's queue
// token renewal on 401, and — in its listener package — the long poll, the
// acknowledgement of each message, acquiring offered jobs and handing the
// statistics' totalAssignedJobs to a Scaler. What this package adds is
// what the library leaves to its caller: which scale set is ours, and what
// to do when GitHub says another listener holds the session.
//
// Errors follow the providers contract where they are ours to classify: a
// refused credential is a providers.PermanentError; a session held by
// someone else past the conflict window is ErrSessionHeld.
package scaleset

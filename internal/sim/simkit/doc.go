// Package simkit is what the HTTP simulators (proxmoxsim, githubsim) share,
// so each of them keeps only what is specific to the API it imitates:
//
//   - Base: a simulator's lifetime. It serves the simulator's handler over
//     HTTP or TLS, runs timers for simulated work, holds injected delays and
//     hung requests, and on Close stops listening, releases every waiting
//     request, stops every timer and waits until no goroutine is left.
//   - Faults: the queue of injected faults. A fault matches on method, path
//     (a regular expression) and whatever the simulator adds (an operation,
//     an endpoint); the first match in injection order applies, for a given
//     number of requests or until cleared. What a fault does stays with the
//     simulator, since the answers are in the API's own shape.
//   - DropConnection, DefaultError and RandomUUID: small pieces of answers
//     both APIs give alike.
//
// All of it runs in one process with no clock of its own: timers and delays
// are real time, short in tests.
package simkit

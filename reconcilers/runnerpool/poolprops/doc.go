// Package poolprops checks RunnerPools as a state machine: gopter's
// commands generate sequences of workflow jobs (queued, taken, completed,
// cancelled, redelivered, their delivery lost), pool edits (bounds,
// labels) and operator restarts, run them against the real API server,
// the operator's RunnerPool reconciler as the manager wires it,
// kubevirtsim, githubsim and the simulated runner agents, and check after
// each sequence that the pool served its jobs, stayed within its bounds,
// never retired a busy runner, and came back to minReplicas leaving
// nothing behind. It has its own control plane and manager, so it runs
// beside the long runnerpool package rather than after it, and it
// restarts its manager itself.
package poolprops

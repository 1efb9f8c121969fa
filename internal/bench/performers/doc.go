// Package performers measures the Performer reconciler as the Hourglass
// comparison did: the real `hyperfleet run` binary as its own
// process, N Performers created at once on a real kube-apiserver with a
// whole test cluster (scheduler, controller-manager, kwok), and every
// request the operator sends counted on the API server's side, from its
// audit log. `make bench-performers` runs it; the figures are printed,
// never asserted.
package performers

// Package memory holds the benchmark of the manager's memory: the real
// hyperfleet binary, run as its own process against a real kube-apiserver
// that holds many MachineClaims (on proxmoxsim and kubevirtsim) and many
// more objects the operator has no business caching. Its figure is the
// process's resident set size, read from /proc; run it with `make bench`.
package memory

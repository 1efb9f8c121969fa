// Package bench holds HyperFleet's end-to-end benchmarks: the real manager
// against a real kube-apiserver and the Proxmox simulator with realistic
// latencies. The benchmarks live in the package's test files; run them with
// `make bench`. Follow is the one watch loop they share.
package bench

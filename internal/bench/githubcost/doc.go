// Package githubcost measures what RunnerPools cost GitHub's API:
// 10 pools on one credential serving 500 jobs, then idle, with the
// real manager on a real kube-apiserver, KubeVirt through kubevirtsim and
// GitHub through githubsim, which counts every request. `make bench-github`
// runs it; the figures are printed, never asserted.
package githubcost

// Package pacing tests that MachineClaims go at the hypervisor's own pace:
// task completion observed by one listing per node, clone slots handed to
// the longest-waiting claim the moment they free, in an order a new manager
// keeps. It has its own control plane because it starts and stops managers
// itself.
package pacing

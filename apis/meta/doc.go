// Package meta holds the API conventions every HyperFleet kind shares: the
// kstatus condition types and reasons, and small reference types.
//
// It imports nothing but Kubernetes API machinery, so each API group can use it
// without pulling in controller code.
//
// +kubebuilder:object:generate=true
package meta

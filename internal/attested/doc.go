// Package attested holds the end-to-end tests of SPIFFE attestation: a
// real SPIRE server and agents (hack/spire.sh), the operator's manager with
// its credential endpoint, KubeVirt (kubevirtsim) and Proxmox (proxmoxsim)
// machines, and the test playing each machine's inside — reading its user
// data where the guest would, attesting with a real spire-agent and
// fetching its credentials over mTLS with the SVID it was given.
package attested

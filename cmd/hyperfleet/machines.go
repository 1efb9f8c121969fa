//go:build !hourglass

package main

// machineCommands are the commands of the machines' side: a TPM's DevID on
// a hypervisor host, and finalizers released after the operator went
// (they know every kind, the machines' too).
func machineCommands() []command {
	return []command{
		{"tpm-provision", "On a hypervisor host: put a DevID for a claim into its machine's TPM (attestation.method tpm).", runTPMProvision},
		{"release-finalizers", "With the operator gone: remove its finalizers in a namespace, so it can be deleted (docs/uninstall.md).", runReleaseFinalizers},
	}
}

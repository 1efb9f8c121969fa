// Package crashsafety tests that MachineClaims survive the manager dying at
// any point — between choosing a VMID, the clone call and the status writes —
// with exactly one machine each. It has its own control plane because it
// starts and kills managers itself.
package crashsafety

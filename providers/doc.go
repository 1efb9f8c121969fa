// Package providers holds the adapters to outside systems — Proxmox VE,
// KubeVirt, GitHub, SPIRE — each a small interface and the real client. Their
// simulators, which speak the same wire protocols for tests and the sandbox,
// live in internal/sim, outside the product binary.
// A provider never touches a custom resource.
package providers

// Package providers holds the adapters to outside systems — Proxmox VE,
// KubeVirt, GitHub, SPIRE — each a small interface, the real client, and a
// simulator that speaks the same wire protocol for tests and `hyperfleet-dev`.
// A provider never touches a custom resource.
package providers

// Package installdoc follows docs/install.md as a test, block by marked
// block, on a whole test cluster: the Argo CD path with overlays/prod and
// the Helm chart, each ending with the operator running as the installed
// Deployment would and reconciling a MachineClaim on a Proxmox simulator.
// Its tests are all it holds.
package installdoc

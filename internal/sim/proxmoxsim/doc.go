// Package proxmoxsim is an in-memory Proxmox VE API server for tests, the
// developer sandbox and benchmarks.
//
// It speaks the JSON REST API under /api2/json closely enough that the real
// client library (github.com/luthermonson/go-proxmox) drives it end to end:
// API-token and ticket authentication, cluster and node listings, VM clone,
// configuration, disk resize, power operations, destruction, the QEMU guest
// agent's network report, storage listing and ISO upload, and asynchronous
// tasks with real UPIDs. Errors look like Proxmox's: the message travels in
// the HTTP status line (which is all go-proxmox reports) and in the JSON body.
//
// Beyond the happy path it reproduces what an operator must cope with: the
// per-storage lock that makes too many concurrent clones fail, VMs locked
// while a clone runs, racy /cluster/nextid, nodes going offline, guests
// powering themselves off, and injected faults (error statuses, slow or hung
// answers, dropped connections, failing tasks, lock errors).
//
// A typical test:
//
//	sim := proxmoxsim.New(proxmoxsim.Options{})
//	if err := sim.Start(); err != nil { ... }
//	defer sim.Close()
//	sim.AddTemplate("pve1", 9000, "ubuntu-24.04", nil)
//	pool := x509.NewCertPool()
//	pool.AppendCertsFromPEM(sim.CACertPEM())
//	id, secret := sim.APIToken()
//	client := proxmox.NewClient(sim.URL(),
//		proxmox.WithHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}),
//		proxmox.WithAPIToken(id, secret))
//
// Everything runs in one process; all state sits behind one mutex and every
// timer stops on Close.
package proxmoxsim

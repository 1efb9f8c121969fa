// Package standby benchmarks how fast a queued job starts with standby
// machines and without (make bench-standby), on Proxmox at the latencies
// its users report.
package standby

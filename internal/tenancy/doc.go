// Package tenancy holds the suites that attack the tenant boundary
// (docs/security.md) from outside: a tenant, through impersonation on a real
// API server, against the operator wired as it ships (internal/manager) and
// the simulators. It has no code of its own.
package tenancy

// Package upgrade holds the test of what an upgrade meets: objects stored
// under a looser schema, which the Go types cannot decode. One such object
// must never stop the operator (docs/architecture.md, "Objects the operator
// cannot decode"). It holds no code of its own; its test runs the real
// manager against a real API server.
package upgrade

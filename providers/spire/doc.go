// Package spire is HyperFleet's side of SPIFFE attestation: the small
// contract (Server) the reconcilers use to let a machine join a SPIRE server
// (a single-use join token bound to the machine's SPIFFE ID), register the
// workloads on it, list what this installation registered, and evict an
// agent when its machine is gone. Client implements it with the SPIRE
// server's admin gRPC API (github.com/spiffe/spire-api-sdk); its tests run a
// real spire-server built by hack/spire.sh (see spiretest).
package spire

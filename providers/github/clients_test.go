package github_test

import (
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// Pools with the same credentials share a Client; a rotated Secret gives its
// pool a new Client, and Clients nobody holds are dropped.
func TestClientsCache(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	cache := github.NewClients()
	cfg := appConfig(sim)
	a, err := cache.Get("ci/pool-a", cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cache.Get("ci/pool-b", cfg)
	if err != nil || a != b || cache.Len() != 1 {
		t.Fatalf("same credentials: %p %p, %d clients, %v", a, b, cache.Len(), err)
	}
	if again, _ := cache.Get("ci/pool-a", cfg); again != a {
		t.Fatal("an unchanged Secret must keep its Client")
	}

	newPEM, err := sim.RotateAppKey()
	if err != nil {
		t.Fatal(err)
	}
	rotated := cfg
	rotated.PrivateKeyPEM = newPEM
	a2, err := cache.Get("ci/pool-a", rotated)
	if err != nil || a2 == a || cache.Len() != 2 {
		t.Fatalf("after rotation: %v, %d clients", err, cache.Len())
	}
	if _, err := a2.ListRunners(ctxT(t), repoScope); err != nil {
		t.Fatalf("the rebuilt client: %v", err)
	}
	if _, err := cache.Get("ci/pool-b", rotated); err != nil || cache.Len() != 1 {
		t.Fatalf("the old client must be dropped once unused: %d clients, %v", cache.Len(), err)
	}
	cache.Forget("ci/pool-a")
	cache.Forget("ci/pool-b")
	cache.Forget("ci/unknown")
	if cache.Len() != 0 {
		t.Fatalf("%d clients left", cache.Len())
	}
	bad := cfg
	bad.PrivateKeyPEM = []byte("garbage")
	if _, err := cache.Get("ci/pool-c", bad); err == nil || cache.Len() != 0 {
		t.Fatal("a bad config must not be cached")
	}
}

package runnerstate

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
)

// GitHub connects a pool, and each runner of it, to GitHub with the pool's
// own credentials: one client per pool, shared by the pool's reconciler
// and its runners'.
type GitHub struct {
	// Secrets reads the pools' GitHub credentials (a GET, label-gated).
	Secrets *credentials.Reader
	// Clients keeps one client per pool.
	Clients *github.Clients
	// RateLimiter is the GitHub budget every pool shares.
	RateLimiter *github.RateLimiter
	// Timeout bounds one GitHub request.
	Timeout time.Duration
}

// Client returns the GitHub client and scope of a pool.
func (g *GitHub) Client(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool) (*github.Client, github.Scope, error) {
	spec := pool.Spec.GitHub
	scope := github.Scope{Owner: spec.Owner, Repository: spec.Repository, Organization: spec.Organization}
	if spec.Repository == "" {
		scope.Owner = ""
	}
	secret, err := g.Secrets.Secret(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: spec.CredentialsRef.Name}, "spec.github.credentialsRef")
	if err != nil {
		return nil, scope, err
	}
	cfg, err := github.ConfigFromSecret(secret.Data)
	if err != nil {
		return nil, scope, &CredentialsError{Secret: spec.CredentialsRef.Name, Err: err}
	}
	cfg.BaseURL, cfg.Timeout, cfg.RateLimiter = spec.APIURL, g.Timeout, g.RateLimiter
	gh, err := g.Clients.Get(client.ObjectKeyFromObject(pool).String(), cfg)
	if err != nil {
		return nil, scope, &CredentialsError{Secret: spec.CredentialsRef.Name, Err: err}
	}
	return gh, scope, nil
}

// Forget drops a pool's client once the pool is gone.
func (g *GitHub) Forget(pool types.NamespacedName) { g.Clients.Forget(pool.String()) }

// CredentialsError is a pool's credentials Secret that makes no client.
type CredentialsError struct {
	Secret string
	Err    error
}

func (e *CredentialsError) Error() string {
	return fmt.Sprintf("Secret %s (spec.github.credentialsRef): %v", e.Secret, e.Err)
}

func (e *CredentialsError) Unwrap() error { return e.Err }

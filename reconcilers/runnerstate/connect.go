package runnerstate

import (
	"context"
	"fmt"
	"time"

	ghscaleset "github.com/actions/scaleset"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/scaleset"
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
	// ScaleSets keeps one scale-set client per pool in scale-set mode.
	ScaleSets scaleset.Clients
	// Version is HyperFleet's, told to the scale-set service.
	Version string
}

// Client returns the GitHub client and scope of a pool.
func (g *GitHub) Client(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool) (*github.Client, github.Scope, error) {
	spec := pool.Spec.GitHub
	scope := github.Scope{Owner: spec.Owner, Repository: spec.Repository, Organization: spec.Organization}
	if spec.Repository == "" {
		scope.Owner = ""
	}
	cfg, err := g.config(ctx, pool)
	if err != nil {
		return nil, scope, err
	}
	gh, err := g.Clients.Get(client.ObjectKeyFromObject(pool).String(), cfg)
	if err != nil {
		return nil, scope, &CredentialsError{Secret: spec.CredentialsRef.Name, Err: err}
	}
	return gh, scope, nil
}

// ScaleSetClient returns the scale-set client of a pool with
// spec.github.scaleSet, from the same credentials as its REST client.
func (g *GitHub) ScaleSetClient(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool) (*ghscaleset.Client, error) {
	spec := pool.Spec.GitHub
	cfg, err := g.config(ctx, pool)
	if err != nil {
		return nil, err
	}
	c, err := g.ScaleSets.Get(client.ObjectKeyFromObject(pool).String(), scaleset.ClientConfig{
		Credentials: cfg, ConfigURL: scaleset.ConfigURL(spec.APIURL, spec.Owner, spec.Repository, spec.Organization),
		Version: g.Version, Timeout: g.Timeout,
	})
	if err != nil {
		return nil, &CredentialsError{Secret: spec.CredentialsRef.Name, Err: err}
	}
	return c, nil
}

// config reads the pool's credentials (a GET of a Secret in the pool's own
// namespace, label-gated).
func (g *GitHub) config(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool) (github.Config, error) {
	spec := pool.Spec.GitHub
	secret, err := g.Secrets.Secret(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: spec.CredentialsRef.Name}, "spec.github.credentialsRef")
	if err != nil {
		return github.Config{}, err
	}
	cfg, err := github.ConfigFromSecret(secret.Data)
	if err != nil {
		return github.Config{}, &CredentialsError{Secret: spec.CredentialsRef.Name, Err: err}
	}
	cfg.BaseURL, cfg.Timeout, cfg.RateLimiter = spec.APIURL, g.Timeout, g.RateLimiter
	return cfg, nil
}

// Forget drops a pool's clients once the pool is gone.
func (g *GitHub) Forget(pool types.NamespacedName) {
	g.Clients.Forget(pool.String())
	g.ScaleSets.Forget(pool.String())
}

// CredentialsError is a pool's credentials Secret that makes no client.
type CredentialsError struct {
	Secret string
	Err    error
}

func (e *CredentialsError) Error() string {
	return fmt.Sprintf("Secret %s (spec.github.credentialsRef): %v", e.Secret, e.Err)
}

func (e *CredentialsError) Unwrap() error { return e.Err }

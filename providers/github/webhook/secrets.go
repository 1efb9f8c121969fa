package webhook

import (
	"errors"
	"fmt"
)

// ErrNoSecret: no secret is configured for a delivery's scope, so nothing
// can verify it; it is refused (401), not retried.
var ErrNoSecret = errors.New("no webhook secret for this scope")

// ScopedSecret picks the secret that must verify a delivery of scope from
// the keys of one Secret, most specific first: "<key>.<owner>.<repository>"
// (a repository's own webhook), "<key>.<owner>" (an organization's or a
// user's webhooks), then "<key>" for scopes with no key of their own. Only
// the most specific key present is tried: a delivery that verifies with
// another scope's secret, or with the shared one while its scope has its
// own, is refused, so one organization's secret cannot forge another's
// jobs. Owners and repositories are matched in lower case. An installation
// serving several organizations leaves out "<key>" and gives each its own.
func ScopedSecret(data map[string][]byte, key string, scope Scope) ([]byte, error) {
	candidates := []string{}
	if scope.Owner != "" {
		if scope.Repository != "" {
			candidates = append(candidates, key+"."+scope.Owner+"."+scope.Repository)
		}
		candidates = append(candidates, key+"."+scope.Owner)
	}
	candidates = append(candidates, key)
	for _, k := range candidates {
		if v, ok := data[k]; ok {
			if len(v) == 0 {
				return nil, fmt.Errorf("%w: key %s is empty", ErrNoSecret, k)
			}
			return v, nil
		}
	}
	return nil, fmt.Errorf("%w: none of the keys %v", ErrNoSecret, candidates)
}

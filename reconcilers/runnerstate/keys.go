package runnerstate

import (
	"strings"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerlist"
)

// PoolLabel is on every MachineClaim and bootstrap Secret of a pool; its
// value is the pool's name.
const PoolLabel = "hyperfleet.io/runnerpool"

// CreatedAtAnnotation records when the pool made a runner's claim, by the
// reconciler's own clock. Registration timeout and maxLifetime are measured
// from it, so they agree with every other time compared (idle since, poll
// due), which come from the same clock. With the real clock it equals the
// claim's creationTimestamp.
const CreatedAtAnnotation = "hyperfleet.io/runner-created-at"

// UserDataKey is the bootstrap Secret's key a claim's userDataSecretRef
// names.
const UserDataKey = "user-data"

// BootstrapSecretName is the bootstrap Secret of the runner claim.
func BootstrapSecretName(claim string) string { return claim + "-bootstrap" }

// DefaultRunnerLabels are the labels every runner has besides the pool's:
// GitHub gives config.sh registrations self-hosted plus the OS and the
// architecture, and a JIT registration gets the same from the pool. Pools
// run Linux x64 runners.
var DefaultRunnerLabels = []string{"self-hosted", "linux", "x64"}

// RunnerLabels are the labels a pool's runners register with: the default
// ones and the pool's, each once (GitHub compares labels without case).
func RunnerLabels(pool *hypervisorv1alpha1.RunnerPool) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range append(append([]string(nil), DefaultRunnerLabels...), pool.Spec.Labels...) {
		k := strings.ToLower(l)
		if !seen[k] {
			seen[k] = true
			out = append(out, l)
		}
	}
	return out
}

// LabelsCover reports whether have holds every label of want, without case.
func LabelsCover(have, want []string) bool {
	set := make(map[string]bool, len(have))
	for _, h := range have {
		set[strings.ToLower(h)] = true
	}
	for _, w := range want {
		if !set[strings.ToLower(w)] {
			return false
		}
	}
	return true
}

// PoolRunnerLabel marks a pool's registrations, so the pool finds its
// runners (and their orphans) among everything else registered in the
// scope.
func PoolRunnerLabel(pool *hypervisorv1alpha1.RunnerPool) string {
	uid := strings.ReplaceAll(string(pool.UID), "-", "")
	if len(uid) > 12 {
		uid = uid[:12]
	}
	return PoolLabelPrefix + uid
}

// PoolLabelPrefix starts every pool's registration label.
const PoolLabelPrefix = "hyperfleet-pool-"

// Ours are the registrations carrying the pool's own label.
func Ours(pool *hypervisorv1alpha1.RunnerPool, runners []github.Runner) []github.Runner {
	return runnerlist.Labelled(runners, PoolRunnerLabel(pool))
}

// ScaleSetMode reports whether the pool serves a runner scale set. Its jobs
// are never recorded (GitHub's statistics count them), so a finished runner
// of it is never held for a record that would name it.
func ScaleSetMode(pool *hypervisorv1alpha1.RunnerPool) bool {
	return pool.Spec.GitHub.ScaleSet != nil
}

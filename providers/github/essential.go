package github

import "context"

type essentialKey struct{}

// ForDeregistration marks ctx's requests as part of removing runners, so
// they may spend the rate-limit reserve: the read that finds what to delete
// (ListRunners, GetRunner) as well as the DeleteRunner itself. Without it a
// budget spent down to the reserve would stop the read, and so the delete
// the reserve is kept for. Use it only on the paths that end in a
// deregistration; ordinary reads must leave the reserve alone.
func ForDeregistration(ctx context.Context) context.Context {
	return context.WithValue(ctx, essentialKey{}, true)
}

// IsForDeregistration reports whether ctx was marked by ForDeregistration.
func IsForDeregistration(ctx context.Context) bool {
	v, _ := ctx.Value(essentialKey{}).(bool)
	return v
}

package manager

import (
	"flag"

	ctrl "sigs.k8s.io/controller-runtime"
)

// CyberdeskOptions configure the Cyberdesk reconciler.
type CyberdeskOptions struct{}

func (o *CyberdeskOptions) bindFlags(_ *flag.FlagSet) {}

// setupCyberdesk registers the Cyberdesk reconciler (issue 4).
func setupCyberdesk(_ ctrl.Manager, _ Options) error { return nil }

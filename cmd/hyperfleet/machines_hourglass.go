//go:build hourglass

package main

// machineCommands: the Hourglass build has none; release-finalizers is the
// full build's (docs/uninstall.md).
func machineCommands() []command { return nil }

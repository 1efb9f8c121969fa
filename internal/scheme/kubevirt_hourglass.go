//go:build hourglass

package scheme

import "k8s.io/apimachinery/pkg/runtime"

// addKubeVirt: the Hourglass build reads and writes no VirtualMachine.
func addKubeVirt(*runtime.Scheme) {}

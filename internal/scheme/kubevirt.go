//go:build !hourglass

package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func addKubeVirt(s *runtime.Scheme) { utilruntime.Must(kubevirtv1.AddToScheme(s)) }

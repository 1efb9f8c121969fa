package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// thirdPartyCRDs are the third-party CRDs the overlays and GitOps manifests use, taken from the
// projects' own Go modules (the module cache keeps them after the first
// download), so the API server validates our objects against the real schemas.
var thirdPartyCRDs = []struct{ module, file string }{
	{"github.com/external-secrets/external-secrets@v1.3.2", "config/crds/bases/external-secrets.io_externalsecrets.yaml"},
	{"github.com/prometheus-operator/prometheus-operator@v0.85.0", "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"},
	{"github.com/prometheus-operator/prometheus-operator@v0.85.0", "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"},
	{"github.com/fluxcd/kustomize-controller@v1.9.6", "config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml"},
	{"github.com/fluxcd/source-controller@v1.9.6", "config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml"},
	{"github.com/argoproj/argo-cd/v3@v3.5.7", "manifests/crds/application-crd.yaml"},
}

// InstallThirdPartyCRDs installs the real ExternalSecret, prometheus-operator,
// Flux and Argo CD CRDs (thirdPartyCRDs) and waits for them to be
// Established: a suite whose tests apply the overlays or the GitOps objects
// calls it once its control plane is up.
func InstallThirdPartyCRDs() error {
	dirs, err := downloadModules()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := Client()
	var names []string
	for _, f := range thirdPartyCRDs {
		data, err := os.ReadFile(filepath.Join(dirs[f.module], filepath.FromSlash(f.file)))
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := dec.Decode(crd); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s: %w", f.file, err)
			}
			if crd.Name == "" {
				continue
			}
			if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("installing %s: %w", crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	// Established, so their kinds can be applied at once.
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
				return false, err
			}
			established := false
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
}

// downloadModules fetches the modules with `go mod download`, outside this
// module so go.mod is not touched, and returns their folders.
func downloadModules() (map[string]string, error) {
	args := []string{"mod", "download", "-json"}
	seen := map[string]bool{}
	for _, f := range thirdPartyCRDs {
		if !seen[f.module] {
			seen[f.module] = true
			args = append(args, f.module)
		}
	}
	tmp, err := os.MkdirTemp("", "hyperfleet-crds-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cmd := exec.Command("go", args...)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %v: %w\n%s%s", args, err, out, stderr.String())
	}
	dirs := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var mod struct{ Path, Version, Dir, Error string }
		if err := dec.Decode(&mod); err != nil {
			return nil, err
		}
		if mod.Error != "" || mod.Dir == "" {
			return nil, fmt.Errorf("go mod download %s@%s: %s", mod.Path, mod.Version, mod.Error)
		}
		dirs[mod.Path+"@"+mod.Version] = mod.Dir
	}
	for m := range seen {
		if dirs[m] == "" {
			return nil, fmt.Errorf("go mod download did not report %s", m)
		}
	}
	return dirs, nil
}

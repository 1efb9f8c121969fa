package sandbox

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/samples"
)

// The simulators' addresses as the samples write them: `hyperfleet-dev`'s
// default --proxmox-sim-address and --github-sim-address. The samples say
// these literally so a reader sees where they point; a sandbox whose
// simulators listen elsewhere (another flag, a test's free port) writes the
// real address in their place.
const (
	sampleProxmoxEndpoint = "https://127.0.0.1:8006/api2/json"
	sampleGitHubAPIURL    = "http://127.0.0.1:8090/"
	// sampleSPIREAddress is `hyperfleet-dev`'s default --spire-address.
	sampleSPIREAddress = "127.0.0.1:18081"
)

// sampleProxmoxTemplate is the sample template the demo claims use.
const sampleProxmoxTemplate = "ubuntu-sim"

// simulatorURLs are where the running simulators listen; empty for one not running.
type simulatorURLs struct {
	proxmox, github, spire string
}

// applySamples applies samples/ into namespace, pointed at the simulators,
// and returns how many objects it applied.
func applySamples(ctx context.Context, c client.Client, namespace string, urls simulatorURLs) (int, error) {
	files, names, err := samples.Files()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		objs, err := manifests.Decode(name, files[name])
		if err != nil {
			return n, err
		}
		for _, o := range objs {
			if err := pointAtSimulators(o, urls); err != nil {
				return n, fmt.Errorf("sample %s: %w", name, err)
			}
		}
		if err := manifests.Apply(ctx, c, namespace, fieldOwner, objs); err != nil {
			return n, fmt.Errorf("sample %s: %w", name, err)
		}
		n += len(objs)
	}
	return n, nil
}

// pointAtSimulators replaces a sample's simulator address with the one the
// simulator really listens on.
func pointAtSimulators(o *unstructured.Unstructured, urls simulatorURLs) error {
	var path []string
	var sample, actual string
	switch o.GetKind() {
	case "HypervisorCluster":
		path, sample, actual = []string{"spec", "endpoint"}, sampleProxmoxEndpoint, urls.proxmox
	case "RunnerPool":
		path, sample, actual = []string{"spec", "github", "apiURL"}, sampleGitHubAPIURL, urls.github
	case "HypervisorMachineTemplate":
		path, sample, actual = []string{"spec", "attestation", "spire", "serverAddress"}, sampleSPIREAddress, urls.spire
	default:
		return nil
	}
	got, _, err := unstructured.NestedString(o.Object, path...)
	if err != nil || got != sample || actual == "" {
		return err
	}
	return unstructured.SetNestedField(o.Object, actual, path...)
}

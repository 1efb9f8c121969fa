// Command pins fails when a manifest pins something that does not exist: an
// operator image digest or version tag that no release recorded in
// hack/releases.yaml, a Git revision (Argo CD targetRevision, Flux
// GitRepository ref) that is neither the main branch nor a tag of this
// repository, or a recorded release whose tag the repository does not have.
// An invented digest in an overlay installs nothing: the kubelet cannot pull
// it, and the first a platform engineer hears of it is ImagePullBackOff.
//
// The manifests are the YAML files under overlays/, kustomize/, argocd/
// (not its testdata), flux/ and charts/hyperfleet/. It prints each
// offending file:line.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

func main() {
	tags, err := gitTags(".")
	if err != nil {
		fmt.Fprintf(os.Stderr, "pins: %v\n", err)
		os.Exit(1)
	}
	problems, err := check(os.DirFS("."), tags)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pins: %v\n", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

// gitTags are the tags of the repository at dir. A shallow clone may have
// none: CI checks out with its tags (fetch-tags), so a pinned tag is judged
// against the repository's real ones.
func gitTags(dir string) (map[string]bool, error) {
	cmd := exec.Command("git", "tag", "--list")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the repository's tags: %w", err)
	}
	tags := map[string]bool{}
	for _, t := range strings.Fields(string(out)) {
		tags[t] = true
	}
	return tags, nil
}

package main

import (
	"strings"
	"testing"
	"testing/fstest"
)

const (
	recorded = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	invented = "sha256:3f5c9a1e7b2d4c6f8a0e1b3d5f7a9c2e4b6d8f0a1c3e5b7d9f2a4c6e8b0d1f3a"
)

// repo is a repository with one release, v1.2.3, recorded and tagged.
func repo(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{Releases: {Data: []byte("releases:\n  - tag: v1.2.3\n    digest: " + recorded + "\n    date: 2026-11-29\n")}}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data)}
	}
	return fsys
}

var testTags = map[string]bool{"v1.2.3": true}

func TestPins(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string // substrings of the problems, in order; none: clean
	}{
		{name: "recorded digest, release tag, main", files: map[string]string{
			"overlays/prod/kustomization.yaml":      "images:\n  - name: " + Image + "\n    digest: " + recorded + "\n",
			"overlays/staging/kustomization.yaml":   "images:\n  - name: " + Image + "\n    newTag: v1.2.3\n",
			"kustomize/manager/deployment.yaml":     "        - image: " + Image + ":main\n",
			"argocd/applications/prod.yaml":         "    targetRevision: v1.2.3\n",
			"argocd/applications/dev.yaml":          "    targetRevision: main\n",
			"flux/prod/source.yaml":                 "kind: GitRepository\nspec:\n  ref:\n    tag: v1.2.3\n  ignore: |\n    /*\n",
			"flux/dev/source.yaml":                  "kind: GitRepository\nspec:\n  ref:\n    branch: main\n",
			"charts/hyperfleet/Chart.yaml":          "version: 1.2.3\nappVersion: \"v1.2.3\"\n",
			"argocd/testdata/x/healthy.yaml":        "image: " + Image + ":v9.9.9\n",
			"overlays/prod/commented.yaml":          "# digest: " + invented + "\n",
			"overlays/other/kustomization.yaml":     "images:\n  - name: quay.io/other/thing\n    digest: " + invented + "\n",
			"overlays/other/second-image.yaml":      "images:\n  - name: " + Image + "\n    newTag: main\n  - name: quay.io/x\n    newTag: v0.0.1\n",
			"kustomize/manager/by-digest-ok.yaml":   "image: " + Image + "@" + recorded + "\n",
			"charts/hyperfleet/values.yaml":         "image:\n  digest: \"\"\n  tag: \"\"\n",
			"flux/prod/kustomization-nosource.yaml": "kind: Kustomization\nspec:\n  path: ./overlays/prod\n",
		}},
		{name: "invented digest in an overlay", files: map[string]string{
			"overlays/prod/kustomization.yaml": "images:\n  - name: " + Image + "\n    digest: " + invented + "\n",
		}, want: []string{"overlays/prod/kustomization.yaml:3: image digest " + invented}},
		{name: "invented digest inline", files: map[string]string{
			"kustomize/manager/deployment.yaml": "image: " + Image + "@" + invented + "\n",
		}, want: []string{"kustomize/manager/deployment.yaml:1: image digest"}},
		{name: "tag that was never released", files: map[string]string{
			"overlays/staging/kustomization.yaml": "images:\n  - name: " + Image + "\n    newTag: v0.1.0\n",
			"kustomize/manager/deployment.yaml":   "image: " + Image + ":latest\n",
		}, want: []string{"kustomize/manager/deployment.yaml:1: image tag latest", "overlays/staging/kustomization.yaml:3: image tag v0.1.0"}},
		{name: "revisions that do not exist", files: map[string]string{
			"argocd/applications/prod.yaml": "    targetRevision: v0.1.0\n",
			"flux/prod/source.yaml":         "kind: GitRepository\nspec:\n  ref:\n    tag: v0.1.0\n",
			"flux/dev/source.yaml":          "kind: GitRepository\nspec:\n  ref:\n    branch: develop\n",
			"charts/hyperfleet/Chart.yaml":  "appVersion: \"v0.1.0\"\n",
		}, want: []string{"argocd/applications/prod.yaml:1: targetRevision v0.1.0", "charts/hyperfleet/Chart.yaml:1: appVersion v0.1.0",
			"flux/dev/source.yaml:4: GitRepository ref branch develop", "flux/prod/source.yaml:4: GitRepository ref tag v0.1.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := check(repo(tc.files), testTags)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// A recorded release whose tag the repository lacks is refused: the record
// says something exists that does not.
func TestReleaseWithoutItsTag(t *testing.T) {
	got, err := check(repo(nil), map[string]bool{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.Contains(got[0], "the repository has no tag v1.2.3") {
		t.Fatalf("got %q, want the missing tag", got)
	}
}

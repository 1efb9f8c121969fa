package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Image is the operator's image; Releases the file that records each
// release's tag and image digest.
const (
	Image    = "ghcr.io/hyperfleet/hyperfleet"
	Releases = "hack/releases.yaml"
	// Edge is the image tag and branch the main branch publishes on every
	// commit (the release workflow's edge job): the one floating pin the
	// manifests may use before, or beside, a release.
	Edge = "main"
)

// manifestDirs hold what Argo CD, Flux, kubectl and Helm install.
var manifestDirs = []string{"overlays", "kustomize", "argocd", "flux", "charts/hyperfleet"}

var (
	imageRef       = regexp.MustCompile(regexp.QuoteMeta(Image) + `(?::([A-Za-z0-9_][A-Za-z0-9_.-]*))?(?:@(sha256:[0-9a-fA-F]+))?`)
	imagesName     = regexp.MustCompile(`^\s*-?\s*name:\s*"?` + regexp.QuoteMeta(Image) + `"?\s*$`)
	keyValue       = regexp.MustCompile(`^\s*-?\s*([A-Za-z]+):\s*"?([^"\s#]*)"?\s*(?:#.*)?$`)
	targetRevision = regexp.MustCompile(`^\s*targetRevision:\s*"?([^"\s#]+)`)
	digestValue    = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// release is one entry of hack/releases.yaml.
type release struct {
	Tag    string `json:"tag"`
	Digest string `json:"digest"`
	Date   string `json:"date"`
}

// check reads the releases and every manifest of root and returns what is
// wrong, one "file:line: what" per problem.
func check(root fs.FS, gitTags map[string]bool) ([]string, error) {
	var problems []string
	data, err := fs.ReadFile(root, Releases)
	if err != nil {
		return nil, err
	}
	var file struct {
		Releases []release `json:"releases"`
	}
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		return nil, fmt.Errorf("%s: %w", Releases, err)
	}
	tags, digests := map[string]bool{}, map[string]bool{}
	for _, r := range file.Releases {
		switch {
		case !gitTags[r.Tag]:
			problems = append(problems, fmt.Sprintf("%s: release %s: the repository has no tag %s", Releases, r.Tag, r.Tag))
		case !digestValue.MatchString(r.Digest):
			problems = append(problems, fmt.Sprintf("%s: release %s: digest %q is not sha256:<64 hex digits>", Releases, r.Tag, r.Digest))
		}
		tags[r.Tag], digests[r.Digest] = true, true
	}
	p := pins{tags: tags, digests: digests, gitTags: gitTags}
	for _, dir := range manifestDirs {
		err := fs.WalkDir(root, dir, func(name string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == "testdata":
				return fs.SkipDir
			case d.IsDir() || (path.Ext(name) != ".yaml" && path.Ext(name) != ".yml"):
				return nil
			}
			data, err := fs.ReadFile(root, name)
			if err != nil {
				return err
			}
			problems = append(problems, p.file(name, data)...)
			return nil
		})
		if err != nil && !strings.Contains(err.Error(), "file does not exist") {
			return nil, err
		}
	}
	slices.Sort(problems)
	return problems, nil
}

// pins judges one file's pins against the releases and the Git tags.
type pins struct {
	tags, digests, gitTags map[string]bool
}

func (p pins) file(name string, data []byte) []string {
	var out []string
	bad := func(line int, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s:%d: ", name, line)+fmt.Sprintf(format, args...))
	}
	flux := strings.HasPrefix(name, "flux/") && bytes.Contains(data, []byte("kind: GitRepository"))
	chart := path.Base(name) == "Chart.yaml"
	sc := bufio.NewScanner(bytes.NewReader(data))
	// inImages: the lines after a kustomize images entry naming our image,
	// until the next entry.
	inImages, inRef := false, false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, m := range imageRef.FindAllStringSubmatch(line, -1) {
			if m[1] != "" {
				out = append(out, p.tag(name, n, m[1])...)
			}
			if m[2] != "" {
				out = append(out, p.digest(name, n, m[2])...)
			}
		}
		if imagesName.MatchString(line) {
			inImages = true
			continue
		}
		kv := keyValue.FindStringSubmatch(line)
		if strings.HasPrefix(strings.TrimSpace(line), "- ") {
			inImages = false
		}
		if kv != nil && inImages {
			switch kv[1] {
			case "newTag":
				out = append(out, p.tag(name, n, kv[2])...)
			case "digest":
				out = append(out, p.digest(name, n, kv[2])...)
			case "newName":
				bad(n, "the operator's image is renamed to %s; pin a release of %s (or set newName in your own overlay)", kv[2], Image)
			}
		}
		if m := targetRevision.FindStringSubmatch(line); m != nil && m[1] != Edge && m[1] != "HEAD" && !p.isRelease(m[1]) {
			bad(n, "targetRevision %s is neither %s nor a release tag of this repository (%s)", m[1], Edge, Releases)
		}
		if flux && kv != nil {
			switch {
			case kv[1] == "ref" && kv[2] == "":
				inRef = true
			case inRef && kv[1] == "tag" && !p.isRelease(kv[2]):
				bad(n, "GitRepository ref tag %s is not a release tag of this repository (%s)", kv[2], Releases)
			case inRef && kv[1] == "branch" && kv[2] != Edge:
				bad(n, "GitRepository ref branch %s: only %s is published", kv[2], Edge)
			case inRef && (kv[1] == "commit" || kv[1] == "semver" || kv[1] == "name"):
				// A commit or a semver range names what exists by construction.
			default:
				inRef = inRef && strings.HasPrefix(line, "    ")
			}
		}
		if chart && kv != nil && kv[1] == "appVersion" && kv[2] != Edge && !p.isRelease(kv[2]) {
			bad(n, "appVersion %s is neither %s nor a release (%s)", kv[2], Edge, Releases)
		}
	}
	return out
}

func (p pins) isRelease(tag string) bool { return p.tags[tag] && p.gitTags[tag] }

func (p pins) tag(name string, line int, tag string) []string {
	if tag == Edge || p.isRelease(tag) {
		return nil
	}
	known := slices.Sorted(maps.Keys(p.tags))
	return []string{fmt.Sprintf("%s:%d: image tag %s of %s is neither %s (published from the main branch) nor a release in %s %v",
		name, line, tag, Image, Edge, Releases, known)}
}

func (p pins) digest(name string, line int, digest string) []string {
	if p.digests[digest] {
		return nil
	}
	return []string{fmt.Sprintf("%s:%d: image digest %s of %s is not a release's (%s): an invented or foreign digest installs nothing",
		name, line, digest, Image, Releases)}
}

#!/usr/bin/env bash
# Fails when generated code, the CRDs or go.mod/go.sum are stale against the
# sources in the working tree, or Go code is not gofmt-ed. It compares with
# the working tree, not HEAD, so uncommitted work is judged on its own terms.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

generated() {
  local dirs=() d
  for d in apis kustomize/crd/bases kustomize/rbac charts/hyperfleet argocd/argocd-cm-patch.yaml; do [ -e "$d" ] && dirs+=("$d"); done
  find "${dirs[@]}" -type f \( -name 'zz_generated.*.go' -o -name '*.yaml' -o -name '*.tpl' -o -name '.helmignore' -o -name '*.md' \) | sort | xargs -r sha256sum
}

before="$(generated)"
# chart after manifests: the Helm chart and Argo CD patch are built from kustomize/.
make --no-print-directory -s generate manifests chart
after="$(generated)"
if [ "$before" != "$after" ]; then
  echo "verify: generated files were stale; 'make generate manifests chart' has now rewritten them:" >&2
  diff <(echo "$before") <(echo "$after") | sed -n 's/^> [0-9a-f]*  /  /p' >&2
  exit 1
fi

if ! go mod tidy -diff >/dev/null 2>&1; then
  echo "verify: go.mod/go.sum are not tidy; run 'go mod tidy':" >&2
  go mod tidy -diff >&2 || true
  exit 1
fi
if ! (cd hack/tools && go mod tidy -diff >/dev/null 2>&1); then
  echo "verify: hack/tools/go.mod is not tidy; run 'cd hack/tools && go mod tidy'" >&2
  exit 1
fi

unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null; git ls-files --others --exclude-standard '*.go' 2>/dev/null) 2>/dev/null || true)"
if [ -n "$unformatted" ]; then
  echo "verify: not gofmt-ed (run 'gofmt -w'):" >&2
  echo "$unformatted" >&2
  exit 1
fi
# Imports point down only (docs/architecture.md): apis/ ← reconcilers/ →
# providers/, with internal/ and cmd/ on top. depguard (make lint) checks
# each file; this checks the whole dependency graph, test files aside.
upward="$(go list -deps ./apis/... ./reconcilers/... ./providers/... | grep -E '^github.com/hyperfleet/hyperfleet/(internal|cmd)(/|$)' || true)"
if [ -n "$upward" ]; then
  echo "verify: apis/, reconcilers/ or providers/ depend on packages above them:" >&2
  echo "$upward" >&2
  exit 1
fi

# The product binary holds the product: no simulator, fake or test harness
# reaches cmd/hyperfleet (the sandbox is cmd/hyperfleet-dev).
harness='^github.com/hyperfleet/hyperfleet/(internal/(sim|sandbox|testenv|testcluster|controlplane|runnersim|eventually|bench|chaos)(/|$)|.*(sim|simkit|fake|spirelocal|swtpmlocal|spiretest)$)'
lab="$(go list -deps ./cmd/hyperfleet | grep -E "$harness" || true)"
if [ -n "$lab" ]; then
  echo "verify: cmd/hyperfleet links simulators or test harnesses (move what needs them to cmd/hyperfleet-dev):" >&2
  echo "$lab" >&2
  exit 1
fi

# The Hourglass build (-tags hourglass) holds the Hourglass reconcilers
# alone: none of the machines', desktops' or runners' clients, whose code
# would be resident for nothing (docs/performance.md).
machines='^(github.com/luthermonson/go-proxmox|kubevirt.io/|github.com/google/go-github/|github.com/spiffe/|google.golang.org/grpc$|github.com/actions/scaleset|github.com/google/go-tpm/|github.com/hyperfleet/hyperfleet/(providers/(proxmox|kubevirt|github|spire)|reconcilers/(machineclaim|runner|runnerpool|cyberdesk|attestation))(/|$))'
held="$(go list -deps -tags hourglass ./cmd/hyperfleet | grep -E "$machines" || true)"
if [ -n "$held" ]; then
  echo "verify: the Hourglass build of cmd/hyperfleet links the machines' side (tag the file that imports it !hourglass):" >&2
  echo "$held" >&2
  exit 1
fi

# The README stays short and every relative link in it and docs/*.md reaches
# a file, and a #anchor a heading (hack/mdlinks prints each file:line).
if ! go run ./hack/mdlinks; then
  echo "verify: README.md is too long or a Markdown link does not resolve (above)" >&2
  exit 1
fi

# Nothing pinned that does not exist: an image digest or version tag no
# release recorded (hack/releases.yaml), a Git revision that is not main or
# a release tag of this repository (hack/pins prints each file:line).
if ! go run ./hack/pins; then
  echo "verify: a manifest pins an image or revision that does not exist (above; docs/install.md, \"Before the first release\")" >&2
  exit 1
fi

# Numbers of work sessions or issues outside this repository mean nothing to
# a reader: a figure keeps its date and command instead. Links to other
# projects' issues (…/issues/2707) do not match.
numbered="$(git grep --untracked -nIiE '\b(sessions?|issues?|stop) #?[0-9]+' -- . ':!go.sum' ':!**/testdata/**' | grep -vE 'stop [0-9]+s\b' || true)"
if [ -n "$numbered" ]; then
  echo "verify: session or issue numbers (say the date and command instead):" >&2
  echo "$numbered" >&2
  exit 1
fi
echo "verify: generated files, go.mod/go.sum, formatting and import direction are up to date; Markdown links resolve; every pin exists"

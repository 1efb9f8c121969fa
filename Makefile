# HyperFleet — build, generate, verify, test.
# Every tool is pinned: controller-gen is a `tool` in go.mod, the control plane
# is built from Go modules by hack/controlplane.sh, golangci-lint by hack/lint.sh.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
GO ?= go
CONTROLLER_GEN := $(GO) tool controller-gen
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/hyperfleet/hyperfleet/internal/version.Version=$(VERSION)
# Packages holding reconcilers run under the race detector.
TEST_FLAGS ?= -race -count=1
TEST_TIMEOUT ?= 30m

.PHONY: all
all: build

##@ Build
.PHONY: build
build: ## Build bin/hyperfleet and bin/hyperfleet-bootstrap.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/hyperfleet ./cmd/hyperfleet

.PHONY: controlplane
controlplane: ## Build (or reuse) kube-apiserver and etcd under bin/controlplane/.
	hack/controlplane.sh

##@ Generate
.PHONY: generate
generate: ## Generate deepcopy code for apis/.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./apis/...

.PHONY: manifests
manifests: ## Generate the CRDs into kustomize/crd/bases and the RBAC role into kustomize/rbac.
	$(CONTROLLER_GEN) crd:allowDangerousTypes=false paths=./apis/... output:crd:artifacts:config=kustomize/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=hyperfleet-manager paths=./reconcilers/... output:rbac:artifacts:config=kustomize/rbac

.PHONY: verify
verify: generate manifests ## Fail when generated files or go.mod/go.sum are stale, or code is not gofmt-ed.
	$(GO) mod tidy
	@if [ -n "$$(gofmt -l $$(git ls-files '*.go'))" ]; then echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; fi
	@git diff --exit-code -- apis kustomize go.mod go.sum || { echo "generated files or go.mod/go.sum are stale: run 'make generate manifests' and 'go mod tidy', then commit"; exit 1; }
	@untracked=$$(git ls-files --others --exclude-standard -- apis kustomize); if [ -n "$$untracked" ]; then echo "untracked generated files: $$untracked"; exit 1; fi

##@ Test
.PHONY: fmt-check
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

.PHONY: vet
vet: ## go vet.
	$(GO) vet ./...

.PHONY: test
test: controlplane fmt-check vet ## The whole suite against a real kube-apiserver and etcd.
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" $(GO) test $(TEST_FLAGS) -timeout $(TEST_TIMEOUT) ./...

.PHONY: lint
lint: ## golangci-lint with .golangci.yml (pinned; built by hack/lint.sh).
	hack/lint.sh

##@ Run
.PHONY: dev
dev: controlplane ## The embedded sandbox: control plane, CRDs, manager, samples.
	$(GO) run ./cmd/hyperfleet dev

.PHONY: run
run: ## Run the manager against the current kubeconfig.
	$(GO) run ./cmd/hyperfleet run

.PHONY: help
help: ## This help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-14s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

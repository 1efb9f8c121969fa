# HyperFleet — build, generate, verify, test.
# Every tool is pinned: controller-gen is a `tool` in go.mod, the control plane
# is built from Go modules by hack/controlplane.sh, golangci-lint by hack/lint.sh.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
GO ?= go
CONTROLLER_GEN := $(GO) tool controller-gen
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/hyperfleet/hyperfleet/internal/version.Version=$(VERSION)
# The whole suite runs under the race detector; reconcilers must be race-free.
TEST_FLAGS ?= -race -count=1
TEST_TIMEOUT ?= 30m

.PHONY: all
all: build

##@ Build
.PHONY: build
build: ## Build bin/hyperfleet, bin/hyperfleet-hourglass (the Hourglass reconcilers alone) and bin/hyperfleet-bootstrap (the agent for runner images).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/hyperfleet ./cmd/hyperfleet
	CGO_ENABLED=0 $(GO) build -trimpath -tags hourglass -ldflags '$(LDFLAGS)' -o bin/hyperfleet-hourglass ./cmd/hyperfleet
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/hyperfleet-bootstrap ./cmd/hyperfleet-bootstrap

.PHONY: controlplane
controlplane: ## Build (or reuse) kube-apiserver, etcd, kube-scheduler, kube-controller-manager and kwok under bin/controlplane/.
	hack/controlplane.sh --cluster

.PHONY: spire
spire: swtpm ## Build (or reuse) spire-server and spire-agent under bin/spire/, for providers/spire's tests.
	hack/spire.sh

.PHONY: swtpm
swtpm: ## Install Debian's swtpm and tpm2-tools (pinned), the software TPMs TPM attestation is tested and demonstrated on.
	hack/swtpm.sh

##@ Generate
.PHONY: generate
generate: ## Generate deepcopy code for apis/.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./apis/...

.PHONY: manifests
manifests: ## Generate the CRDs into kustomize/crd/bases and the RBAC role into kustomize/rbac.
	$(CONTROLLER_GEN) crd:allowDangerousTypes=false paths=./apis/... output:crd:artifacts:config=kustomize/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=hyperfleet-manager paths=./reconcilers/... output:rbac:artifacts:config=kustomize/rbac

.PHONY: verify
verify: ## Fail when generated files or go.mod/go.sum are stale, or code is not gofmt-ed.
	hack/verify.sh

##@ Test
# The packages the Hourglass build (-tags hourglass) changes: its command,
# its manager and its scheme.
HOURGLASS_PKGS := ./cmd/hyperfleet/ ./internal/manager/ ./internal/scheme/

.PHONY: vet
vet: ## go vet, of the full build and of the Hourglass build's packages.
	$(GO) vet ./...
	$(GO) vet -tags hourglass $(HOURGLASS_PKGS)

.PHONY: test
test: controlplane spire verify vet lint alerts ## Everything CI checks: verify, vet, lint, the alerts with promtool, then the suite against a real kube-apiserver and etcd.
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" HYPERFLEET_SPIRE_DIR="$$(hack/spire.sh --print-dir)" $(GO) test $(TEST_FLAGS) -timeout $(TEST_TIMEOUT) ./...
	$(GO) test $(TEST_FLAGS) -tags hourglass $(HOURGLASS_PKGS)

.PHONY: lint
lint: ## golangci-lint with .golangci.yml (pinned; built by hack/lint.sh).
	hack/lint.sh

##@ Run
.PHONY: dev
dev: controlplane spire ## The embedded sandbox: control plane, CRDs, manager, samples, a SPIRE server the demo runners attest to.
	HYPERFLEET_SPIRE_DIR="$$(hack/spire.sh --print-dir)" $(GO) run ./cmd/hyperfleet-dev

.PHONY: run
run: ## Run the manager against the current kubeconfig.
	$(GO) run ./cmd/hyperfleet run

.PHONY: help
help: ## This help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-14s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Benchmark
.PHONY: bench
bench: controlplane ## Every benchmark at a size that finishes in under 15 minutes on 2 cores: claims→Ready for 100 claims, memory at 2,000 claims, 200 Performers (idle 30s), 500 runner deliveries, jobs starting cold, on warm and on hot standby machines (bursts of 10 and 100), GitHub cost of 10 pools serving 200 jobs. One at a time, loopback only.
	$(MAKE) bench-claims BENCH_CLAIMS='/claims=100$$$$'
	$(MAKE) bench-memory MEMORY_CLAIMS=2000 MEMORY_NOISE=2000
	$(MAKE) bench-performers PERF_N=200 PERF_IDLE=30s
	$(MAKE) bench-runners
	$(MAKE) bench-scaleset
	$(MAKE) bench-standby
	$(MAKE) bench-github GHCOST_JOBS=200 GHCOST_IDLE=1m

.PHONY: bench-full
bench-full: controlplane ## The large sizes (an hour or more): claims→Ready for 100 and 1000 claims, memory at 10,000 claims beside 10,000 other objects, 1,000 Performers with a 2-minute idle window, GitHub cost of 10 pools serving 500 jobs.
	$(MAKE) bench-claims BENCH_CLAIMS=.
	$(MAKE) bench-memory MEMORY_CLAIMS=10000 MEMORY_NOISE=10000
	$(MAKE) bench-performers PERF_N=1000 PERF_IDLE=2m
	$(MAKE) bench-github GHCOST_JOBS=500 GHCOST_IDLE=2m

BENCH_CLAIMS ?= .
.PHONY: bench-claims
bench-claims: controlplane ## Claims→Ready: the real manager, kube-apiserver and the Proxmox simulator at realistic latencies; BENCH_CLAIMS selects the sizes ('/claims=100$$' or . for 100 and 1000).
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" $(GO) test -run '^$$' -bench '$(BENCH_CLAIMS)' -benchtime 1x -timeout 90m ./internal/bench/

PERF_N ?= 200
PERF_IDLE ?= 2m
PERF_BUILD ?= hourglass
.PHONY: bench-performers
bench-performers: controlplane ## Performer figures against the Hourglass original: PERF_N Performers (200) at once against `hyperfleet run` (PERF_BUILD: the hourglass build, or full) on a whole test cluster; time to served and Ready, writes per performer from the API server's audit log, writes in PERF_IDLE (2m) idle, peak RSS, CPU.
	PERF_N=$(PERF_N) PERF_IDLE=$(PERF_IDLE) PERF_BUILD=$(PERF_BUILD) KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" $(GO) test -run '^$$' -bench Performers -benchtime 1x -timeout 30m -v ./internal/bench/performers/

RUNNERS_N ?= 500
.PHONY: bench-runners
bench-runners: controlplane ## Runner latency: RUNNERS_N (500) queued deliveries at once to the real manager; delivery → provider Create call, → runner registered, → job taken (p50/p99), with maxReplicas fitting the burst and a fifth of it.
	RUNNERS_N=$(RUNNERS_N) KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" $(GO) test -run '^$$' -bench RunnerLatency -benchtime 1x -timeout 30m -v ./internal/bench/runners/

.PHONY: bench-scaleset
bench-scaleset: controlplane ## Scale-set pool beside webhook pool, in one run: bursts of 100 and RUNNERS_N (500) jobs; queued → provider Create call, → job taken (p50/p99), GitHub requests per job.
	RUNNERS_N=$(RUNNERS_N) KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" $(GO) test -run '^$$' -bench ScaleSetVsWebhook -benchtime 1x -timeout 60m -v ./internal/bench/runners/

STANDBY_N ?= 10,100
.PHONY: bench-standby
bench-standby: controlplane ## Queued job → started on Proxmox (linked clone 3 s, boot 25 s) for bursts of STANDBY_N (10,100) jobs: cold, and with warm or hot standby machines covering the burst (p50/p99), and their idle machine-minutes per job.
	STANDBY_N=$(STANDBY_N) KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" $(GO) test -run '^$$' -bench JobStart -benchtime 1x -timeout 30m -v ./internal/bench/standby/

GHCOST_POOLS ?= 10
GHCOST_JOBS ?= 500
GHCOST_IDLE ?= 2m
.PHONY: bench-github
bench-github: controlplane ## GitHub API cost: GHCOST_POOLS pools (10) on one credential serve GHCOST_JOBS jobs (500) through githubsim; requests per job served, and per idle pool-hour scaled from GHCOST_IDLE (2m) idle (about 5 minutes).
	GHCOST_POOLS=$(GHCOST_POOLS) GHCOST_JOBS=$(GHCOST_JOBS) GHCOST_IDLE=$(GHCOST_IDLE) KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" $(GO) test -run '^$$' -bench GitHubCost -benchtime 1x -timeout 40m -v ./internal/bench/githubcost/

.PHONY: bench-memory
bench-memory: controlplane ## The manager's RSS with 10,000 MachineClaims beside 10,000 unrelated Pods and ConfigMaps (MEMORY_CLAIMS, MEMORY_NOISE to change).
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" $(GO) test -run '^$$' -bench ManagerMemory -benchtime 1x -timeout 90m ./internal/bench/memory/

.PHONY: chaos
chaos: controlplane ## Failover figures: two `hyperfleet run` processes, the leader SIGKILLed 50 times mid-create, mid-delete and mid-ISO upload, with simulator faults; fails on twins, orphans or leaks (5–10 minutes; CHAOS_SEED, CHAOS_KILLS, CHAOS_FAULTS_PER_MINUTE).
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh --print-dir)" $(GO) test -run '^$$' -bench Chaos -benchtime 1x -timeout 60m ./internal/chaos/

##@ Delivery
.PHONY: chart
chart: ## Generate the Helm chart (charts/hyperfleet) and Argo CD's health checks (argocd/argocd-cm-patch.yaml) from kustomize/.
	$(GO) run ./hack/chartgen

IMAGE ?= ghcr.io/hyperfleet/hyperfleet:main
.PHONY: install-yaml
install-yaml: ## Render the one-file install (install.yaml: the base with the manager on IMAGE), as every release attaches it.
	$(GO) run ./hack/installyaml -image '$(IMAGE)' > install.yaml

.PHONY: alerts
alerts: ## promtool check and unit-test alerts/ (hack/promtool.sh installs Debian's prometheus package when promtool is missing).
	PROMTOOL="$$(hack/promtool.sh --path)" $(GO) test -count=1 ./alerts/

# machinist — build, generate, test and run.
#
# `make run` starts the all-in-one controller on the embedded default (a local control plane and
# the local provider); `make test` runs the whole suite. Both install or build what they need:
# Go tools are pinned in build/tools and built into bin/ (rebuilt only when a pin changes).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO        ?= go
BIN       := $(CURDIR)/bin
PROVIDERS := $(sort $(notdir $(patsubst %/register.go,%,$(wildcard providers/*/register.go))))
# VERSION names a build: `machinist version`, the image tags (machinist:VERSION,
# machinist-<provider>:VERSION) and their version label. Its default is the tag the overlays in
# kubernetes/deploy reference (kubernetes/deploy/deploy_test.go checks), so `make image` builds
# what `kubectl apply -k kubernetes/deploy/<overlay>` runs. A release sets it (make image
# VERSION=v1.2.0) and points its overlays at it (kustomize edit set image). The git commit is
# stamped separately (REVISION): `machinist version` and the image's revision label show it.
VERSION   ?= dev
REVISION  := $(shell git describe --always --dirty --abbrev=40 2>/dev/null || echo unknown)
LDFLAGS   := -X github.com/machinist-io/machinist/internal/version.Version=$(VERSION) \
	-X github.com/machinist-io/machinist/internal/version.Revision=$(REVISION)
# Tags of every binary the Makefile builds: grpcnotrace leaves out gRPC's golang.org/x/net/trace
# (grpc.EnableTracing, never set) and urfave_cli_no_docs the CLI's man page and markdown
# generators (never called), about 0.7 MB of each binary. build/docker/image.sh uses the same.
BUILD_TAGS := grpcnotrace urfave_cli_no_docs
comma := ,
tags   = $(subst $() ,$(comma),$(strip $(1) $(BUILD_TAGS)))
KUBE_VERSION := v1.36.3

export PATH := $(BIN):$(PATH)

## ---------------------------------------------------------------- tools (pinned, cached in bin/)
TOOLS_DEPS := build/tools/go.mod build/tools/go.sum

# The Kubernetes components are built from the pinned k8s.io/kubernetes module with its version
# stamped in, as its own release build does.
KUBE_LDFLAGS := \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION)

$(BIN)/kube-apiserver: $(TOOLS_DEPS)
	@echo ">> building kube-apiserver $(KUBE_VERSION) from build/tools (first build takes ~5 min)"
	cd build/tools && $(GO) build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver

# kube-scheduler and kube-controller-manager complete the local control plane (machinist dev,
# make run, tests that opt in). They share most of kube-apiserver's dependencies, so they come
# after it: about 3 more CPU-minutes on a cold cache (docs/history.md, "The test suite").
$(BIN)/kube-scheduler: $(TOOLS_DEPS) | $(BIN)/kube-apiserver
	@echo ">> building kube-scheduler $(KUBE_VERSION) from build/tools"
	cd build/tools && $(GO) build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-scheduler

$(BIN)/kube-controller-manager: $(TOOLS_DEPS) | $(BIN)/kube-apiserver
	@echo ">> building kube-controller-manager $(KUBE_VERSION) from build/tools"
	cd build/tools && $(GO) build -ldflags "$(KUBE_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-controller-manager

$(BIN)/etcd: $(TOOLS_DEPS) build/tools/cmd/etcd/main.go
	@echo ">> building etcd from build/tools"
	cd build/tools && $(GO) build -o $@ ./cmd/etcd

$(BIN)/controller-gen: $(TOOLS_DEPS)
	cd build/tools && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(BIN)/protoc-gen-go: $(TOOLS_DEPS)
	cd build/tools && $(GO) build -o $@ google.golang.org/protobuf/cmd/protoc-gen-go

$(BIN)/protoc-gen-go-grpc: $(TOOLS_DEPS)
	cd build/tools && $(GO) build -o $@ google.golang.org/grpc/cmd/protoc-gen-go-grpc

$(BIN)/buf: build/tools/buf/go.mod build/tools/buf/go.sum
	cd build/tools/buf && $(GO) build -o $@ github.com/bufbuild/buf/cmd/buf

$(BIN)/golangci-lint: build/tools/golangci-lint/go.mod build/tools/golangci-lint/go.sum
	cd build/tools/golangci-lint && $(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

CONTROL_PLANE := $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/kube-scheduler $(BIN)/kube-controller-manager
GEN_TOOLS     := $(BIN)/controller-gen $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/buf

# Debian packages, installed with apt-get when missing (build/system-deps.sh says what each is
# for). `make deps` installs every group the build and the whole suite need, and `make test`
# runs it first; `make run` installs only the build group (no compiler for -race, no podman).
# Without apt-get (another distribution), deps fails only for what the build and `go test -race`
# need, and says so; podman and runc are optional there: the image test skips without them.
.PHONY: deps deps-build system-deps
deps: ## install the Debian packages the build and every test need (git, make, ca-certificates, gcc, podman, runc) with apt-get
	@build/system-deps.sh build test --optional image

deps-build: ## install only what building and `make run` need (git, make, ca-certificates) with apt-get
	@build/system-deps.sh build

system-deps: deps ## the same as deps (kept for its old name)

.PHONY: tools
tools: $(CONTROL_PLANE) $(GEN_TOOLS) $(BIN)/golangci-lint ## build every pinned tool into bin/

## ---------------------------------------------------------------- generate
.PHONY: generate
generate: $(GEN_TOOLS) ## regenerate deepcopy, CRDs, providers/all and protobuf code; tidy the example modules
	$(BIN)/controller-gen object paths=./core/apis/...
	$(BIN)/controller-gen crd:generateEmbeddedObjectMeta=true paths=./core/apis/... output:crd:artifacts:config=kubernetes/crds
	$(GO) run ./build/genproviders -dir providers
	@if [ -f grpcbridge/proto/buf.gen.yaml ]; then cd grpcbridge/proto && $(BIN)/buf generate; fi
	@# The example modules replace this repository: a change of its dependencies changes theirs.
	@for m in $(EXAMPLES); do (cd $$m && $(GO) mod tidy) || exit 1; done

.PHONY: check-generated
GENERATED = core/apis kubernetes/crds providers/all grpcbridge/proto cmd/machinist/fakecloud_*.go $(EXAMPLES:%=%/go.mod) $(EXAMPLES:%=%/go.sum)
# Compares the generated paths before and after `make generate`, so uncommitted but up-to-date
# generated code passes and stale code fails, in a clean clone (CI) and in a working tree alike.
check-generated: $(GEN_TOOLS) ## fail when generated code differs from what `make generate` writes
	@snapshot() { git diff --no-ext-diff -- $(GENERATED); \
		git ls-files --others --exclude-standard -- $(GENERATED) | xargs -r sha256sum; }; \
	before=$$(snapshot); \
	$(MAKE) --no-print-directory generate >/dev/null; \
	if [ "$$before" != "$$(snapshot)" ]; then \
		echo "generated code was stale; 'make generate' rewrote it: review and commit:"; \
		git status --short -- $(GENERATED); exit 1; fi; \
	echo "generated code is up to date"

## ---------------------------------------------------------------- build
.PHONY: build
# bin/machinist has every subcommand and provider; its hard link bin/machine-controller-manager
# runs as MCM's core half (a program of that name runs `machinist machine-controller-manager`),
# as /machine-controller-manager does in the all-in-one image. Per provider,
# bin/machinist-<provider> is the slim provider binary: -tags slim (no controllers,
# controller-runtime or autoscaler server: serve, connect, driver, providers, version) and
# provider_<name>; bin/machine-controller-<provider> is MCM's provider half for that provider
# only (-tags slim,machinecontroller: the slim subcommands plus the controllers), the provider
# image's /machine-controller. Unstripped, for debugging; `make image` and `make check-slim`
# build the static, stripped release binaries.
build: ## build bin/machinist (everything) with bin/machine-controller-manager, and per provider a slim bin/machinist-<provider> and bin/machine-controller-<provider>
	$(GO) build -tags $(call tags) -ldflags "$(LDFLAGS)" -o $(BIN)/machinist ./cmd/machinist
	ln -f $(BIN)/machinist $(BIN)/machine-controller-manager
	@for p in $(PROVIDERS); do \
		echo "$(GO) build -tags $(call tags,slim provider_$$p) -o $(BIN)/machinist-$$p ./cmd/machinist"; \
		$(GO) build -tags $(call tags,slim provider_$$p) -ldflags "$(LDFLAGS)" -o $(BIN)/machinist-$$p ./cmd/machinist; \
		echo "$(GO) build -tags $(call tags,slim machinecontroller provider_$$p) -o $(BIN)/machine-controller-$$p ./cmd/machinist"; \
		$(GO) build -tags $(call tags,slim machinecontroller provider_$$p) -ldflags "$(LDFLAGS)" -o $(BIN)/machine-controller-$$p ./cmd/machinist; \
	done

.PHONY: check-slim slim-sizes
# Proves with `go list -deps` what each slim binary links (its provider) and does not
# (controllers, other providers, client-go and Prometheus unless its provider needs them), and
# what each provider-half binary (machine-controller-<provider>, the provider image's; not slim:
# it has the controllers) links (its provider, the controllers) and does not (other providers,
# the autoscaler server, the control plane, fake clouds). Then builds every binary as the images
# do (static, -trimpath, stripped) and fails when a slim binary is over SLIM_MAX_PERCENT of the
# all-in-one, or a provider half over HALF_MAX_PERCENT. The release builds have a build cache of
# their own (no -race, -trimpath); docs/performance.md records the output.
SLIM_MAX_PERCENT ?= 40
HALF_MAX_PERCENT ?= 90
check-slim: ## prove what each slim and provider-half binary links; slim at most SLIM_MAX_PERCENT (40), provider half HALF_MAX_PERCENT (90) of the all-in-one, stripped
	$(GO) run ./build/checkslim -tags "$(call tags)" -sizes -max-percent $(SLIM_MAX_PERCENT) -max-half-percent $(HALF_MAX_PERCENT) $(PROVIDERS)

slim-sizes: check-slim ## the same as check-slim (kept for its old name)

## ---------------------------------------------------------------- test
.PHONY: lint
# gofmt over every tracked Go file, then golangci-lint with the linters of .golangci.yml. Its
# govet runs go vet's analyzers (test files included), so a separate `go vet -race` would only
# repeat them: `go test -race` compiles what it needs by itself. golangci-lint sees the files of
# the all-in-one build; gofmt also covers those behind build tags (slim, provider_*) and the
# example modules (test-examples vets those).
lint: $(BIN)/golangci-lint ## gofmt and golangci-lint (go vet, staticcheck, errcheck, errorlint, … as .golangci.yml chooses)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^build/tools/')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(BIN)/golangci-lint run ./...

# One pass with -race over every package: the packages where concurrency matters (providers,
# grpcbridge, controllers, the conformance kit) pull in nearly every dependency anyway, so a
# second, race-free pass for the rest would compile everything twice for little gain.
TEST_FLAGS ?= -race -timeout 20m
# One rule with every prerequisite: the deploy tests run bin/kubectl, test-examples the example modules.
.PHONY: test
test: deps $(CONTROL_PLANE) lint check-generated check-slim test-examples $(BIN)/kubectl ## install deps, lint, check generated code and slim builds, run every test
	KUBEBUILDER_ASSETS=$(BIN) $(GO) test $(TEST_FLAGS) ./...

## ---------------------------------------------------------------- provider developer kit
.PHONY: new-provider
new-provider: ## scaffold providers/$(NAME) and regenerate providers/all: make new-provider NAME=foo
	@$(GO) run ./build/newprovider -name "$(NAME)" -go "$(GO)"

.PHONY: image
# Offline: the static binary is built here and copied into an image FROM scratch (nothing is
# pulled). Exit 2 without a working docker or podman.
image: ## build a container image with docker or podman: make image PROVIDER=openstack (/machine-controller: MCM's provider half), make image (all-in-one, /machine-controller-manager: MCM's core half)
	@GO="$(GO)" GO_TAGS="$(BUILD_TAGS)" REVISION="$(REVISION)" build/docker/image.sh "$(PROVIDER)" "$(VERSION)"

# Example modules: each has its own go.mod (so ./... of the root skips it) with a replace of this
# repository, and a complete go.sum, so they build offline from the module cache.
EXAMPLES := docs/examples/outoftree-provider
.PHONY: test-examples
test-examples: ## vet, build and test the example modules (the out-of-tree provider)
	@for m in $(EXAMPLES); do \
		echo ">> $$m"; \
		(cd $$m && $(GO) vet ./... && $(GO) build -o /dev/null . && $(GO) test $(TEST_FLAGS) ./...) || exit 1; \
	done

## ---------------------------------------------------------------- run, kubectl, scale benchmark
# `make run`: a throw-away control plane (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager), the controller manager with the local provider and
# kubernetes/samples/local (3 machines and a workload), with progress until the machines and the
# workload's pods are Running, and how to point a Cluster Autoscaler at it; Ctrl-C cleans up.
# RUN_FLAGS passes flags to `machinist dev`, e.g. RUN_FLAGS="--dir .cache/run" to keep state.
RUN_FLAGS ?=
.PHONY: run
run: deps-build $(CONTROL_PLANE) ## start a local control plane, the controllers, 3 sample machines and a workload (Ctrl-C stops and cleans up)
	$(GO) build -tags $(call tags) -ldflags "$(LDFLAGS)" -o $(BIN)/machinist ./cmd/machinist
	$(BIN)/machinist dev --bin-dir $(BIN) $(RUN_FLAGS)

# kubectl from its own pinned module (build/kubectl): for watching `make run` and for the deploy
# tests' `kubectl apply --dry-run=server -k`. It never enters machinist's go.mod.
$(BIN)/kubectl: build/kubectl/go.mod build/kubectl/go.sum build/kubectl/main.go
	@echo ">> building kubectl $(KUBE_VERSION) from build/kubectl (first build takes a few minutes)"
	cd build/kubectl && $(GO) build -ldflags "\
		-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
		-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 \
		-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION)" -o $@ .

.PHONY: kubectl
kubectl: $(BIN)/kubectl ## build the pinned kubectl into bin/

# One MachineDeployment of $(BENCH_MACHINES) local machines on the real API server: seconds until
# all are Running, the CPU time and peak RSS of the controller and of the local provider (the slim
# bin/machinist-local, a --driver-exec child of the controller, so the controller's figures are
# its own), API requests per machine, then the scale-down to 0 (until every Machine, Node and VM
# is gone). bench-scale-growth runs the sizes of $(BENCH_GROWTH) one after the other and adds a
# growth table; bench-scale-faults kills the provider twice and the controller once in each phase
# and checks that nothing is lost. BENCH_FLAGS passes more flags, e.g. BENCH_FLAGS="--profile-dir
# .cache/profiles" for CPU profiles of the controller (`go run ./build/benchscale --help`).
# Results are printed; docs/performance.md keeps the current figures, docs/history.md the runs.
BENCH_MACHINES ?= 1000
BENCH_GROWTH   ?= 1000,3000,5000
BENCH_FLAGS    ?=
BENCH_BUILD = $(GO) build -tags $(call tags) -ldflags "$(LDFLAGS)" -o $(BIN)/machinist ./cmd/machinist && \
	$(GO) build -tags $(call tags,slim provider_local) -ldflags "$(LDFLAGS)" -o $(BIN)/machinist-local ./cmd/machinist
.PHONY: bench-scale bench-scale-growth bench-scale-faults
bench-scale: $(CONTROL_PLANE) ## scale benchmark: one MachineDeployment of 1000 local machines, up and down to 0
	$(BENCH_BUILD)
	$(GO) run ./build/benchscale --machinist $(BIN)/machinist --bin-dir $(BIN) --machines $(BENCH_MACHINES) $(BENCH_FLAGS)

bench-scale-growth: $(CONTROL_PLANE) ## scale benchmark at 1000, 3000 and 5000 machines in one sequence, with a growth table
	$(BENCH_BUILD)
	$(GO) run ./build/benchscale --machinist $(BIN)/machinist --bin-dir $(BIN) --machines $(BENCH_GROWTH) --timeout 30m $(BENCH_FLAGS)

bench-scale-faults: $(CONTROL_PLANE) ## scale benchmark with the provider killed twice and the controller once in each phase
	$(BENCH_BUILD)
	$(GO) run ./build/benchscale --machinist $(BIN)/machinist --bin-dir $(BIN) --machines $(BENCH_MACHINES) --timeout 30m --faults $(BENCH_FLAGS)

.PHONY: help
help:
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "%-18s %s\n", $$1, $$2}'

## ---------------------------------------------------------------- autoscaler
.PHONY: bench-autoscaler
# The hot RPCs at 500 groups of 10 machines and 5 groups of 1000 (the index built in memory,
# the service called directly: server side only), then the heap the server holds for 500 groups
# and 5000 machines read from a real API server (harness/testenv, bin/ of `make tools`).
bench-autoscaler: ## Cluster Autoscaler server benchmarks: 500 groups / 5000 nodes, and 5 groups of 1000 (see docs/performance.md)
	$(GO) test -run '^$$' -bench 'Breadth(NodeGroups|NodeGroupForNode|NodeGroupTargetSize|NodeGroupTemplateNodeInfo|Refresh)$$|^BenchmarkNodeGroup' -benchtime 20000x ./grpcbridge/autoscaler/deployments/
	KUBEBUILDER_ASSETS=$(BIN) $(GO) test -run '^$$' -bench 'Breadth(Memory|ServerHeap)$$' -benchtime 1x ./grpcbridge/autoscaler/deployments/

## ---------------------------------------------------------------- azure provider
FUZZTIME ?= 60s
.PHONY: fuzz-azure
fuzz-azure: ## fuzz the Azure provider spec decoder for $(FUZZTIME) (seeds in providers/azure/testdata/fuzz)
	$(GO) test -run '^$$' -fuzz FuzzDecodeProviderSpec -fuzztime $(FUZZTIME) ./providers/azure/

## ---------------------------------------------------------------- grpc bridge
.PHONY: bench-grpcbridge fuzz-grpcbridge
bench-grpcbridge: ## gRPC bridge benchmarks: floor, uds, tcp, tcp-mtls, dial-in, separate process, go-plugin (see docs/performance.md)
	$(GO) test -run '^$$' -bench 'GetMachineStatus|Convert|ObjectEncoding' -benchtime 3000x -count 8 ./grpcbridge/

fuzz-grpcbridge: ## fuzz the bridge's object codecs for $(FUZZTIME) each (seeds in grpcbridge/testdata/fuzz)
	$(GO) test -run '^$$' -fuzz FuzzDecodeRequest -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./grpcbridge/
	$(GO) test -run '^$$' -fuzz FuzzObjectRoundTrip -fuzztime $(FUZZTIME) -fuzzminimizetime 100x ./grpcbridge/

## ---------------------------------------------------------------- openstack provider, real cloud
.PHONY: test-openstack-real
test-openstack-real: system-deps $(CONTROL_PLANE) ## OpenStack provider against a real OpenStack (Debian's Zed packages, installed with apt-get; needs root; docs/openstack-real.md)
	test/openstack-real/openstack.sh run -- $(GO) test -count=1 -v -parallel 8 -timeout 60m ./test/openstack-real/

## ---------------------------------------------------------------- Gardener's providers as the oracle
.PHONY: test-gardener-oracle
test-gardener-oracle: ## compare Gardener's own providers (executables you supply: ORACLE_AWS_DRIVER, …) with machinist's through the same scenarios on the fakes, request by request (by hand; docs/compatibility/aws.md; ORACLE_UPDATE=1 records the corpus)
	test/oracle/run.sh

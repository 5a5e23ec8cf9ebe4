# sparkllm — the two commands a newcomer runs: `make demo` and `make test`.
# Both do their own set-up: a pinned virtualenv (.venv) and the Kubernetes binaries
# built from the Go module proxy into ~/.cache/sparkllm (cached; a warm run skips them).
# Each runs on a dev cluster of its own (SPARKLLM_DEVCLUSTER=demo|test: name, ports,
# node addresses, state directory), so `make test` passes while the demo runs. The tests
# run in a random order (pytest-randomly; seed printed; PYTEST_ARGS="--randomly-seed=N"
# repeats one; WORKERS=0 for the exact order of the no-cluster tests), so that no test
# relies on another having run first.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
CLUSTER ?= demo

# Bytecode is written (an environment may say PYTHONDONTWRITEBYTECODE=1): the tests start
# many Python processes (the operator, simulators, gateways, the CLI) and pytest rewrites
# every test module's asserts; without the cache each does it again on every run (make unit's
# collection: about 12 s of CPU without it, 4 s with it, on the 2-core machine).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo control-plane demo-staging demo-down test lint unit bench setup binaries tools binaries-prefixed tools-prefixed image devcluster-up devcluster-down crds clean venv

# The same install script the Dockerfile's builder stage runs: the image cannot drift
# from what the tests ran against.
$(STAMP): pyproject.toml harness/pyproject.toml hack/install-python-deps.sh
	$(PYTHON) -m venv $(VENV)
	bash hack/install-python-deps.sh $(BIN)/python --editable --extras dev
	touch $(STAMP)

venv: $(STAMP)

binaries: $(STAMP)
	bash hack/build-binaries.sh
	PYTHON=$(BIN)/python bash hack/fetch-kube-schemas.sh

# promtool and prometheus (apt), the Prometheus Operator's CRDs (Go module proxy) and the
# aarch64 wheels of every runtime dependency (pip): what the tests read, fetched once.
tools: $(STAMP)
	PYTHON=$(BIN)/python bash hack/setup-test-tools.sh

# Both halves of the set-up side by side: the Go builds (CPU) and the tools (network and
# unpacking: the torch and Open WebUI venvs are most of it), so a cold set-up takes the
# longer of the two, not their sum; neither reads the other's output. Each line is
# prefixed with its half's name, and a failure names the half (and, within the tools,
# the step). A warm run: file checks only.
setup: $(STAMP)
	@$(MAKE) --no-print-directory -j2 binaries-prefixed tools-prefixed

binaries-prefixed tools-prefixed: $(STAMP)
	@set -o pipefail; $(MAKE) --no-print-directory $(@:-prefixed=) 2>&1 | sed -u 's/^/[$(@:-prefixed=)] /' \
	  || { echo "make setup: $(@:-prefixed=) failed (its lines above are prefixed [$(@:-prefixed=)])" >&2; exit 1; }

# The image, built for real without a Docker engine (mmdebstrap base, buildah), then run:
# the entry points as user 65532, its content and size. Not part of `make test` (minutes,
# root, network to PyPI from the build); tests/unit/test_image_build.py checks the cheap parts.
image:
	bash hack/build-image.sh

# The demo needs only the control plane's binaries; they build while the virtualenv
# installs (one is network, the other CPU), which is most of a cold demo's time.
demo:
	@$(MAKE) --no-print-directory -j2 $(STAMP) control-plane
	$(BIN)/sparkllm-dev --cluster demo demo

control-plane:
	bash hack/build-binaries.sh --control-plane

# The model staging journey on the running demo (docs/model-staging.md, "On the demo"): the
# S3 server and helm (make binaries' tools), then `sparkllm-dev model-source`.
demo-staging: $(STAMP)
	bash hack/build-binaries.sh
	$(BIN)/sparkllm-dev --cluster demo model-source

lint: $(STAMP)
	$(BIN)/ruff check operator harness tests conftest.py
	$(BIN)/ruff format --check operator harness tests conftest.py
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# The tiers (markers in pyproject.toml): `make unit` runs every test that needs neither the
# dev cluster (`cluster`) nor a program or file a set-up step provides (`needs_binary`), with
# Hypothesis's quick `dev` profile; `make test` runs every test, with the `ci` profile. Both
# print their 15 slowest tests and pytest's total; no test checks a duration.
UNIT_TESTS := -m "not cluster and not needs_binary"

# The tests that need no cluster run in $(WORKERS) processes (pytest-xdist): they wait on
# real processes and sockets more than they compute, so two workers on 2 cores halve the
# wall time (make unit: 178 s -> 74 s on one run each). The cluster tests then run on one
# worker per dev cluster of $(CLUSTERS) (SPARKLLM_DEVCLUSTERS: each worker its own control
# plane and six Sparks), a test module's tests together (--dist loadfile: its shared
# fixtures are made once). Both halves run even when the first fails; no test selected in
# a half (a -k in PYTEST_ARGS) is no failure.
WORKERS ?= 2
CLUSTERS ?= test test2
comma := ,
empty :=
space := $(empty) $(empty)

unit: $(STAMP)
	$(BIN)/pytest tests harness/tests $(UNIT_TESTS) -n $(WORKERS) --durations=15 $(PYTEST_ARGS)

test: $(STAMP) setup lint
	@status=0; started=$$SECONDS; \
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest tests harness/tests -m "not cluster" -n $(WORKERS) --durations=15 $(PYTEST_ARGS) \
	  || { rc=$$?; [ $$rc -eq 5 ] || status=$$rc; }; \
	SPARKLLM_DEVCLUSTERS=$(subst $(space),$(comma),$(strip $(CLUSTERS))) HYPOTHESIS_PROFILE=ci \
	  $(BIN)/pytest tests harness/tests -m cluster -n $(words $(CLUSTERS)) --dist loadfile --durations=15 $(PYTEST_ARGS) \
	  || { rc=$$?; [ $$rc -eq 5 ] || status=$$rc; }; \
	echo "make test: both halves in $$((SECONDS - started)) s (status $$status)"; \
	exit $$status

# The benchmarks start their own operator and engines: on the tests' cluster, never the demo's.
bench: $(STAMP) binaries
	SPARKLLM_DEVCLUSTER=test $(BIN)/python -m tests.bench $(BENCH_ARGS)

devcluster-up: $(STAMP) binaries
	$(BIN)/sparkllm-dev --cluster $(CLUSTER) up

devcluster-down: $(STAMP)
	$(BIN)/sparkllm-dev --cluster $(CLUSTER) down

demo-down: $(STAMP)
	$(BIN)/sparkllm-dev --cluster demo demo down

crds: $(STAMP)
	bash hack/gen-crd.sh
	bash hack/sync-chart-crds.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis

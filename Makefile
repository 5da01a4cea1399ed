# The front door: `make demo` and `make test`. Everything else is detail.
SHELL := /bin/bash
# The venv's Python: the newest 3.13 or 3.12 this machine has (tools/find_python.sh runs each
# candidate, on PATH and under pyenv), the default leg's controller_python in pyproject.toml.
# `make PY=/path/to/python3.12 venv` names one instead.
PY ?=
VENV_PYTHONS := 3.13 3.12
VENV := .venv
BIN := $(VENV)/bin
COLL_LINK := .collections/ansible_collections/gpusplit/k8s
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# The lab's Kubernetes release: K8S=1.36.3 (one of lab/versions.env KUBE_VERSIONS) builds and starts
# that release, and its kubectl (.lab/bin/<version>) comes first on PATH; unset, lab-up starts the
# default (KUBE_VERSION) and lab-build builds every release of KUBE_VERSIONS.
K8S ?=
KUBE_DEFAULT := $(shell sed -n 's/^KUBE_VERSION=//p' lab/versions.env)
NODE_OLDER_KUBELET := $(shell sed -n 's/^NODE_OLDER_KUBELET=//p' lab/versions.env)
ifneq ($(K8S),)
export GPUSPLIT_KUBE_VERSION := $(K8S)
endif
export PATH := $(if $(K8S),$(CURDIR)/.lab/bin/$(K8S):)$(CURDIR)/$(BIN):$(CURDIR)/.lab/bin:$(PATH)

.PHONY: venv legs-venv test-matrix demo test lint unit integration bench lab-build lab-build-default lab-build-test lab-up lab-down lab-status lab-reset clean dist changelog release multi-python bench-fleet

venv: $(VENV)/.done $(COLL_LINK)

$(VENV)/.done: pyproject.toml tools/install_kubectl_helm.py tools/find_python.sh
	@py='$(PY)'; [ -n "$$py" ] || py=$$(tools/find_python.sh $(VENV_PYTHONS)) || exit 1; \
	want=$$("$$py" -c 'import sys; print(sys.version)') || exit 1; \
	if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -c 'import sys; print(sys.version)')" != "$$want" ]; then \
		echo "make venv: $(VENV) is another Python's; building it anew"; rm -rf $(VENV); fi; \
	echo "make venv: $(VENV) with $$py (Python $${want%% *})"; \
	"$$py" -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/python -c "import tomllib;print('\n'.join(tomllib.load(open('pyproject.toml','rb'))['project']['dependencies']))" > $(VENV)/requirements.txt
	$(BIN)/pip install -q -r $(VENV)/requirements.txt
	$(BIN)/python tools/install_kubectl_helm.py $(BIN)
	touch $@

# the other legs of the support matrix (pyproject.toml [tool.gpusplit]): a cached venv each,
# .venv-<leg>, rebuilt only when its Python or pins change (tools/legs.py)
legs-venv: venv
	$(BIN)/python tools/legs.py venv

$(COLL_LINK):
	mkdir -p $(dir $(COLL_LINK))
	ln -sfn ../../.. $(COLL_LINK)

lab-build: venv
	K8S=$(K8S) lab/build.sh all

# what make test's main pytest, demo, integration and bench use: the default release only (K8S=<version>
# picks another); make test's Kubernetes legs build the control plane and kubectl of each other release of
# KUBE_VERSIONS (tools/legs.py), lab-build and make test-matrix every binary of every release
lab-build-default: venv
	K8S=$(or $(K8S),$(KUBE_DEFAULT)) lab/build.sh all

# make test's: the default release, and the older kubelet the real node's take-over test runs too
lab-build-test: lab-build-default
	K8S=$(NODE_OLDER_KUBELET) lab/build_node.sh kubelet

# builds (or finds cached) the binaries of the release it starts only
lab-up: venv
	K8S=$(or $(K8S),$(KUBE_DEFAULT)) lab/build.sh all
	$(BIN)/python -m lab.lab up

lab-down:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m lab.lab down; fi

lab-status: venv
	$(BIN)/python -m lab.lab status

# stop the lab and remove its cluster (etcd data, manifests), e.g. before starting another release
lab-reset:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m lab.lab reset; fi

demo: lab-up
	@echo "== 1/3 the split: discover, plan, apply (host and cluster side), verify =="
	$(BIN)/ansible-playbook -i inventory/lab playbooks/site.yml
	@echo "== 2/3 gang scheduling: GenericWorkload on the lab control plane, one component at a time =="
	$(BIN)/ansible-playbook -i inventory/lab playbooks/feature_gates.yml -e '{"gpusplit_feature_gates": {"GenericWorkload": true}}'
	@echo "== 3/3 any Pending GPU pods explained; fleet picture in out/fleet.svg =="
	$(BIN)/ansible-playbook -i inventory/lab playbooks/diagnose.yml

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check plugins tests lab tools
	$(BIN)/ansible-lint --profile production
	$(BIN)/antsibull-changelog lint
	cd $(COLL_LINK) && $(CURDIR)/$(BIN)/antsibull-docs lint-collection-docs --plugin-docs .
	$(BIN)/python tools/sanity.py

# The collection tarball (ansible-galaxy collection build on a clean copy); docs/awx.md
dist: venv
	$(BIN)/python tools/dist.py

# the next release's CHANGELOG.md, rendered from changelogs/fragments into out/ (the checkout is left alone)
changelog: venv
	$(BIN)/python tools/changelog.py out/CHANGELOG.md

# cut the release of galaxy.yml's version: antsibull-changelog release folds the fragments into
# changelogs/changelog.yaml and writes CHANGELOG.md (tools/changelog.py --release)
release: venv
	$(BIN)/antsibull-changelog lint
	$(BIN)/python tools/changelog.py --release

unit: venv
	$(BIN)/pytest -m "not integration" tests

integration: lab-build-default
	$(BIN)/pytest -m integration tests

# the lab's tests run in two pytest-xdist groups (lab-a, lab-b), each on a worker and a lab of its
# own, while the other tests fill the gaps (tests/conftest.py, lab/workers.py, docs/dev/lab.md). Three jobs
# run beside pytest: make lint; the managed-host modules' tests per ansible-core under the host Pythons it
# supports (tools/multi_python_tests.py); and the other legs of the support matrix (tools/legs.py
# test: on ansible-core 2.20 and 2.19 the unit tests and ansible-test sanity, each in its own venv,
# and on 2.19 the lab's split, verify and SSH host tests on a lab of its own; then per Kubernetes
# release of KUBE_VERSIONS other than the default its binaries (lab/build.sh, cached) and the tests
# tools/kubernetes_support.toml names for it, on a lab of that release of its own). Their output is
# printed after pytest's, and any of them failing fails the target.
# make test always runs the lab groups beside the other legs on one machine: the lab waits' bounds are stretched
# as in CI (lab/components.py wait_scale) unless GPUSPLIT_LAB_WAIT_SCALE says otherwise
test: export GPUSPLIT_LAB_WAIT_SCALE ?= 3
test: venv legs-venv lab-build-test
	@rm -f $(VENV)/lint.rc $(VENV)/multi-python.rc $(VENV)/legs.rc; \
	( make --no-print-directory lint > $(VENV)/lint.log 2>&1; echo $$? > $(VENV)/lint.rc ) & lint=$$!; \
	( $(BIN)/python tools/multi_python_tests.py --edges > $(VENV)/multi-python.log 2>&1; echo $$? > $(VENV)/multi-python.rc ) & mp=$$!; \
	( $(BIN)/python tools/legs.py test > $(VENV)/legs.log 2>&1; echo $$? > $(VENV)/legs.rc ) & legs=$$!; \
	trap 'kill $$lint $$mp $$legs 2>/dev/null' EXIT INT TERM; \
	echo "make lint (pid $$lint), tools/multi_python_tests.py (pid $$mp) and tools/legs.py test (pid $$legs) run beside pytest; their output follows pytest's"; \
	start=$$(date +%s); \
	$(BIN)/pytest --numprocesses auto --maxprocesses 4 --dist loadgroup --durations=20 tests; rc=$$?; \
	echo "the default leg's pytest ($$($(BIN)/python -c 'import sys, ansible.release as r; print("ansible-core", r.__version__, "on Python", sys.version.split()[0])')): exit status $$rc, $$(( $$(date +%s) - start )) s"; \
	wait $$lint $$mp $$legs; \
	lintrc=$$(cat $(VENV)/lint.rc 2>/dev/null || echo 1); \
	mprc=$$(cat $(VENV)/multi-python.rc 2>/dev/null || echo 1); legsrc=$$(cat $(VENV)/legs.rc 2>/dev/null || echo 1); \
	echo "== make lint (exit status $$lintrc) =="; cat $(VENV)/lint.log; \
	echo "== tools/multi_python_tests.py (exit status $$mprc) =="; cat $(VENV)/multi-python.log; \
	echo "== tools/legs.py test (exit status $$legsrc) =="; cat $(VENV)/legs.log; \
	echo "all done after $$(( $$(date +%s) - start )) s: pytest exit status $$rc, make lint $$lintrc, tools/multi_python_tests.py $$mprc, tools/legs.py test $$legsrc"; \
	[ $$rc -eq 0 ] && [ $$lintrc -eq 0 ] && [ $$mprc -eq 0 ] && [ $$legsrc -eq 0 ]

# every leg of the support matrix in full: the whole pytest suite and ansible-test sanity per
# ansible-core, each in its venv with a lab of its own, then every lab test on each other Kubernetes
# release on a lab of that release, one leg after the other; not part of make test
# the differential tests (TOML, HPACK, protobuf, h2) generate 2,000 cases per target in make test, ten times
# as many here (GPUSPLIT_DIFF_CASES; the seed stays fixed)
test-matrix: export GPUSPLIT_DIFF_CASES ?= 20000
test-matrix: venv legs-venv lab-build
	$(BIN)/python tools/legs.py matrix
	$(BIN)/python tools/multi_python_tests.py --all

# the managed-host modules' unit tests per ansible-core leg, under the host Pythons it supports
multi-python: venv
	$(BIN)/python tools/multi_python_tests.py

bench: venv lab-build-default
	GPUSPLIT_BENCH_APPLY=1 GPUSPLIT_BENCH_MEMORY=1 $(BIN)/pytest tests/bench --benchmark-enable -s

# fleet-scale cost of site.yml on the lab (docs/performance.md); not part of make test
bench-fleet: lab-up
	$(BIN)/python tools/bench_fleet.py $(if $(SIZES),--sizes $(SIZES))

clean: lab-down
	rm -rf .lab out .collections

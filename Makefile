# The front door: `make demo` and `make test`. Everything else is detail.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
COLL_LINK := .collections/ansible_collections/gpusplit/k8s
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(CURDIR)/.lab/bin:$(PATH)

.PHONY: venv demo test lint unit integration bench lab-build lab-up lab-down lab-status clean dist changelog multi-python bench-fleet

venv: $(VENV)/.done $(COLL_LINK)

$(VENV)/.done: pyproject.toml tools/install_kubectl_helm.py
	@command -v $(PY) >/dev/null || { echo "need $(PY) (Python 3.11)"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(PY) -c "import tomllib;print('\n'.join(tomllib.load(open('pyproject.toml','rb'))['project']['dependencies']))" > $(VENV)/requirements.txt
	$(BIN)/pip install -q -r $(VENV)/requirements.txt
	$(BIN)/python tools/install_kubectl_helm.py $(BIN)
	touch $@

$(COLL_LINK):
	mkdir -p $(dir $(COLL_LINK))
	ln -sfn ../../.. $(COLL_LINK)

lab-build: venv
	lab/build.sh all

lab-up: lab-build
	$(BIN)/python -m lab.lab up

lab-down:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m lab.lab down; fi

lab-status: venv
	$(BIN)/python -m lab.lab status

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
	$(BIN)/python tools/sanity.py

# The collection tarball (ansible-galaxy collection build on a clean copy); docs/awx.md
dist: venv
	$(BIN)/python tools/dist.py

# CHANGELOG.md rendered from changelogs/fragments
changelog: venv
	$(BIN)/python tools/changelog.py CHANGELOG.md

unit: venv
	$(BIN)/pytest -m "not integration" tests

integration: lab-build
	$(BIN)/pytest -m integration tests

# the lab's tests run in two pytest-xdist groups (lab-a, lab-b), each on a worker and a lab of its
# own, while the other tests fill the gaps (tests/conftest.py, lab/workers.py, docs/lab.md). The
# managed-host modules' tests under the other Pythons run beside pytest too (the lab tests wait on
# the lab more than they compute); their output is printed after pytest's, and either failing fails
# the target.
test: venv lab-build lint
	@$(BIN)/python tools/multi_python_tests.py > $(VENV)/multi-python.log 2>&1 & mp=$$!; \
	trap 'kill $$mp 2>/dev/null' EXIT INT TERM; \
	echo "tools/multi_python_tests.py runs beside pytest (pid $$mp); its output follows pytest's"; \
	$(BIN)/pytest --numprocesses auto --maxprocesses 4 --dist loadgroup --durations=20 tests; rc=$$?; \
	wait $$mp; mprc=$$?; \
	echo "== tools/multi_python_tests.py (exit status $$mprc) =="; cat $(VENV)/multi-python.log; \
	echo "pytest exit status $$rc, tools/multi_python_tests.py exit status $$mprc"; \
	[ $$rc -eq 0 ] && [ $$mprc -eq 0 ]

# the managed-host modules' unit tests under every Python 3.8-3.13 this machine has
multi-python: venv
	$(BIN)/python tools/multi_python_tests.py

bench: venv lab-build
	GPUSPLIT_BENCH_APPLY=1 GPUSPLIT_BENCH_MEMORY=1 $(BIN)/pytest tests/bench --benchmark-enable -s

# fleet-scale cost of site.yml on the lab (docs/performance.md); not part of make test
bench-fleet: lab-up
	$(BIN)/python tools/bench_fleet.py $(if $(SIZES),--sizes $(SIZES))

clean: lab-down
	rm -rf .lab out .collections

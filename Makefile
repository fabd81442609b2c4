# The README's two commands are `make demo` and `make test`; .ci/run calls `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
TORCH_CPU_VERSION ?= 2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The runtime only (tunefleet and what it needs to tune and verify): what `make demo` installs.
RUNTIME_STAMP := $(VENV)/.runtime
NODE_STATE := molecule/shared/files/node_state.py
COLLECTION_LINK := .cache/collections/ansible_collections/tunefleet/gpu_node
export CONTAINERS_CONF := $(CURDIR)/molecule/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)
SCENARIOS ?= $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))

.PHONY: demo test venv system-deps lint module-docs image pytest molecule collection clean fuzz

## demo: tune this machine in check mode (changes nothing), then verify it and write reports/
demo: $(RUNTIME_STAMP)
	@mkdir -p reports/demo
	@$(BIN)/python $(NODE_STATE) save reports/demo/state-before.json --host --files /etc >/dev/null
	@echo "== tunefleet demo: ansible-playbook playbooks/site.yml --check --diff (check mode: nothing on this machine changes)"
# Roles disabled or not applicable here would print ~80 `skipping:` lines: the recap counts them.
	ANSIBLE_DISPLAY_SKIPPED_HOSTS=false $(BIN)/ansible-playbook -i inventory/local playbooks/site.yml --check --diff
	@echo "== tunefleet demo: proving the check-mode run changed nothing (kernel values, interfaces, devices, /etc)"
	$(BIN)/python $(NODE_STATE) compare reports/demo/state-before.json
	@echo "== tunefleet demo: verifying this machine against the same desired state"
	$(BIN)/tunefleet verify --local --vars inventory/local/group_vars/all.yml --out reports/demo \
	  --history reports/demo/history.sqlite \
	  || { rc=$$?; [ $$rc = 1 ] || [ $$rc = 3 ]; }  # findings are the point; 2 (bad input) is not
	@echo "== nothing on this machine was changed (compared above). Reports: $(CURDIR)/reports/demo/ (open report.html)"

## test: everything CI runs
test: system-deps $(STAMP) lint pytest molecule

venv: $(STAMP)

$(RUNTIME_STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
# --no-compile: byte-compiling all of ansible's bundled collections costs a minute; Python
# compiles what a run imports, once.
	$(BIN)/python -m pip install -q --no-compile -e .
# The roles call their modules as tunefleet.gpu_node.*: this checkout is that collection.
	mkdir -p $(dir $(COLLECTION_LINK))
	ln -sfn $(CURDIR) $(COLLECTION_LINK)
	touch $@

# The test toolchain on top of the runtime.
$(STAMP): $(RUNTIME_STAMP)
	# torch pinned to the CPU build for the gloo tests; nodes bring their own CUDA build.
	$(BIN)/python -m pip install -q -e '.[test,torch]' 'torch==$(TORCH_CPU_VERSION)'
	touch $(STAMP)

system-deps:
	@missing=""; \
	for pkg in podman runc debootstrap fio chromium iproute2 iputils-ping ethtool slurmctld slurmd slurm-client munge prometheus-node-exporter prometheus; do \
	  dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing Debian packages:$$missing (install them as root)"; exit 1; fi; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check verify tests benchmarks plugins
# The layers of verify/ (pyproject.toml [tool.importlinter]; docs/architecture.md): an upward import fails here.
	$(BIN)/lint-imports --no-cache
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --offline
	$(MAKE) --no-print-directory module-docs

# ansible-lint prints [ERROR] for a module whose DOCUMENTATION does not parse and still passes: this fails.
module-docs: $(STAMP)
	@for module in plugins/modules/*.py; do \
	  name="tunefleet.gpu_node.$$(basename "$$module" .py)"; \
	  if ! errors="$$($(BIN)/ansible-doc "$$name" 2>&1 >/dev/null)" || grep -q 'ERROR' <<<"$$errors"; then \
	    echo "ansible-doc $$name failed: $$errors"; exit 1; \
	  fi; \
	done; echo "ansible-doc: every module's documentation parses"

# The molecule image before pytest: the container tests (the reboot one among them) need it, and
# `make test` on a fresh machine must skip nothing that can run here. Built once; later runs reuse it.
image: system-deps
	molecule/image/build.sh

# Under the host guard: tests that touch the CI machine (loop devices, containers) must hand it back.
pytest: $(STAMP) image
	PYTHON=$(BIN)/python molecule/host_guard.sh $(BIN)/pytest -q tests

## fuzz: the property tests (parsers, our own files' readers, every judge's bounds, engine payloads) with a
## random seed and many more examples (FUZZ_EXAMPLES, default 1500)
FUZZ_TESTS := tests/unit/test_parsers_fuzz.py tests/unit/test_readers_total.py tests/unit/test_bench_bounds.py \
  tests/unit/test_engine_payloads.py tests/unit/test_bench_gpu.py tests/unit/test_functions_total.py \
  tests/unit/test_fleet_functions_total.py tests/unit/test_scheduler_total.py
# The seed is printed first, so a clean run can be reported and a failing one repeated (make fuzz FUZZ_SEED=...).
ifndef FUZZ_SEED
FUZZ_SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
fuzz: $(STAMP)
	@echo "make fuzz: seed $(FUZZ_SEED), $${FUZZ_EXAMPLES:-1500} examples per property"
	TUNEFLEET_HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q -p no:cacheprovider --hypothesis-seed=$(FUZZ_SEED) $(FUZZ_TESTS) \
	  -k "total or garbage or bound or payload" \
	  2>&1 | grep -E '^(E  +(AssertionError|[A-Za-z.]*Hang)|FAILED)|passed|failed' | cut -c1-400

molecule: $(STAMP)
	PYTHON=$(BIN)/python molecule/run.sh $(SCENARIOS)

collection: $(STAMP)
	$(BIN)/ansible-galaxy collection build --force --output-path build .

clean:
	rm -rf $(VENV) .cache reports build

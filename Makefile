# Two commands: `make serve` and `make test`. Each sets up what it needs first.
# The container stack: `make stack`, `make stack-down`, `make test-stack` (docs/deployment.md).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

# An offline mirror of the pinned book beside the checkout (as on the development machines) is
# used when present; otherwise the service downloads and verifies the chapters on first use.
BOOK_MIRROR_DIR := $(wildcard ../shared/book/772889525cbeca175408a0547b1b5fab4760f26c)
ifneq ($(BOOK_MIRROR_DIR),)
export SCALING_GRADER_BOOK_MIRROR ?= $(abspath $(BOOK_MIRROR_DIR))
endif

# `make test` runs the tests in this many worker processes (pytest-xdist): most of them wait on
# children (servers, workers, sleeps), so more workers than this machine's 2 cores pay. Tests
# marked serial (the sandbox suites, whose wall and CPU limits other tests' load would break, and
# host-wide counts) run afterwards, apart from the rest, two at a time: their sandboxed children
# mostly wait (on an interpreter's start, a sleep, a wall limit), and each test's limits leave room
# for one such test beside it, though not for the load of the parallel part.
TEST_WORKERS ?= 4
SERIAL_WORKERS ?= 2

# Some machines set PYTHONDONTWRITEBYTECODE: then every pytest worker compiles and rewrites the
# assertions of every test module again (half its collection time) and every server, worker and
# command the tests start compiles the service again. The tests' runs keep their bytecode.
unexport PYTHONDONTWRITEBYTECODE
# worksteal: an idle worker takes tests queued on a busy one, so a few long tests (a fuzz run, a
# killed worker) do not leave the rest waiting at the end (faster here than `load`).
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist worksteal
SERIAL_PARALLEL := -n $(SERIAL_WORKERS) --dist worksteal

.PHONY: serve test test-in-parts test-fast typecheck lint bench bench-smoke bench-stack-soak sandbox-deps system-deps check-dashboards clean docker-engine images stack stack-down test-stack

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The service with the impl extra (numpy and CPU JAX for the sandboxed exercises).
$(VENV)/.serve: pyproject.toml scaling_book/pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[jax]'
	$(BIN)/pip install -q -e ./scaling_book
	touch $@

$(VENV)/.test: pyproject.toml scaling_book/pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q -e ./scaling_book
	touch $@

# Installs the Debian packages of the given command:package pairs whose command is missing, when
# running as root (with apt-get's extra options $(2)); otherwise says which are missing.
define install_missing
	@missing=""; \
	for pair in $(1); do command -v "$${pair%%:*}" >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) $$missing; \
	  else echo "missing system packages:$$missing (install them, or run as root)"; fi; \
	fi
endef

# The sandbox's isolated tiers: bubblewrap, and runsc (gVisor) for the gvisor tier.
sandbox-deps:
	$(call install_missing,bwrap:bubblewrap runsc:runsc)

# Redis (tests start their own servers) and chromium (the status page and API docs are tested in
# a headless browser), besides the sandbox's.
system-deps: sandbox-deps
	$(call install_missing,redis-server:redis-server chromium:chromium)
	$(call install_missing,promtool:prometheus,--no-install-recommends)

serve: sandbox-deps $(VENV)/.serve
	$(BIN)/scaling-grader serve --host $(HOST) --port $(PORT)

# $(call beside,SIDE,NAME,MAIN): runs MAIN with SIDE beside it, SIDE in a process group of its own
# that an interrupt takes down too and with its output kept in .build/NAME.log, printed when both
# are done; fails when either does.
define beside
	@mkdir -p .build; \
	setsid $(1) > .build/$(2).log 2>&1 & side=$$!; \
	trap 'kill -TERM -- -$$side 2>/dev/null; exit 130' INT TERM; \
	$(3); main=$$?; \
	wait $$side; beside=$$?; \
	echo "== $(2) (beside the tests above)"; cat .build/$(2).log; \
	[ $$main = 0 ] && [ $$beside = 0 ]
endef

# $(LOW) CMD runs CMD at a low CPU priority, nice 10: about a tenth of the CPU when the rest of the
# machine wants all of it (weight 110 against nice 0's 1024), all of what it leaves idle. Where
# the kernel groups each session for the scheduler (autogroup), a process's nice value weighs only
# against its own session's, and `beside` starts SIDE in a session of its own: so the session's
# group is lowered too. Not nice 19: at its weight of 15 a part beside a saturating one gets about
# 1%, and one start of the service (3.5 s of CPU) took over ten minutes of wall time, past any
# bound a test can set on it.
LOW := sh -c '{ echo 10 > /proc/self/autogroup; } 2>/dev/null; exec nice -n 10 "$$@"' low

# The tests marked low_priority run beside everything else, at a low CPU priority, so that they
# take mostly the CPU the rest leaves idle (the parallel part now and then, the serial part much
# of the time): heavy on CPU, but every process they start is their own, none in a session of its
# own (which would escape that priority) and none a sandbox (whose host-wide state serial tests
# count).
test: system-deps $(VENV)/.test
	$(BIN)/ruff check .
	$(call beside,$(LOW) $(BIN)/pytest -q -m low_priority $(SERIAL_PARALLEL),low-priority,$(MAKE) --no-print-directory test-in-parts)

# The rest of `make test`: the parallel part with the benchmarks' smoke runs (mostly waiting on
# the servers and sandboxes they start) and then mypy beside it; then the serial part.
test-in-parts: $(VENV)/.test
	$(call beside,$(MAKE) --no-print-directory -k bench-smoke typecheck,bench-smoke-and-mypy,$(BIN)/pytest -q -m "not serial and not low_priority" $(PYTEST_PARALLEL))
	$(BIN)/pytest -q -m serial $(SERIAL_PARALLEL)

# promtool (Debian's prometheus package without its recommends, about 100 MB and 10 s to install)
# validating deploy/prometheus*.yml and the Grafana dashboard's queries: `make test` installs it
# with the other system packages; this target runs just those checks.
check-dashboards: system-deps $(VENV)/.test
	$(BIN)/pytest -q tests/deploy/test_dashboards.py

# The quick loop while editing: everything but the tests marked slow (real workers, servers,
# sandboxes under attack); under a minute, in one process (the tests left are short, so starting
# pytest-xdist workers costs more than it saves).
test-fast: system-deps $(VENV)/.test
	$(BIN)/pytest -q -m "not slow"

# The trainers' own code (TRL, verl, OpenRLHF, pinned in tests/trainers/requirements.txt) in a
# CPU-torch venv under ~/.cache/scaling-grader, shared by checkouts; tests/trainers/ builds it on
# first use too.
.PHONY: trainers-venv
trainers-venv: $(VENV)/.test
	$(BIN)/python -m tests.trainers.venv

# mypy over app, worker and bench (strict on the grading core and the graders; see pyproject.toml),
# and strict over scaling_book, whose annotations trainers' own type checkers read (py.typed).
typecheck: $(VENV)/.test
	$(BIN)/mypy
	$(BIN)/mypy --strict -p scaling_book

lint: $(VENV)/.test
	$(BIN)/ruff check .

bench: $(VENV)/.test
	$(BIN)/python -m bench

bench-smoke: $(VENV)/.test
	$(BIN)/python -m bench --smoke

# Docker Engine and compose from Debian's packages when missing (as root), dockerd started in the
# background when not running; base images, host wheelhouse and the api and worker images.
docker-engine:
	deploy/stack.sh engine

images: docker-engine
	deploy/images.sh

# API on 127.0.0.1:$(PORT), Redis with AOF, two workers and a test tenant; prints the URL and key.
stack: docker-engine
	PORT=$(PORT) deploy/stack.sh up

stack-down:
	deploy/stack.sh down

# End-to-end tests against a running stack (with a fake judge on the compose network), on a port
# of its own so a development server on $(PORT) does not clash.
TEST_STACK_PORT ?= 18080
test-stack: $(VENV)/.test docker-engine
	PORT=$(TEST_STACK_PORT) PYTEST=$(BIN)/pytest deploy/stack.sh test

# The stack soak (bench/bench_stack_soak.py): its own stack under mixed load with faults, 60 minutes
# (STACK_SOAK_SECONDS overrides; SMOKE=1: 3 minutes); prints what piled up, start vs end.
bench-stack-soak: $(VENV)/.test docker-engine
	$(BIN)/python -m bench $(if $(SMOKE),--smoke) stack_soak

clean:
	rm -rf $(VENV) .pytest_cache

# Both entry points build their own virtual environment so a fresh machine needs
# nothing but python3 and git.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo bench lint typecheck clean venv clients sshd

venv: $(STAMP)

# constraints.txt pins every package to the version the suite last passed with, so a
# fresh machine tests what we tested (refresh: pip freeze --exclude-editable).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The real clients that tests/test_client_*.py drive (Claude Code), at the versions pinned
# in tests/clients/package-lock.json, installed from the npm registry into tests/clients.
CLIENTS := tests/clients
CLIENTS_STAMP := $(CLIENTS)/node_modules/.installed

clients: $(CLIENTS_STAMP)

# Without npm (outside CI) the client tests are skipped, and said so; CI must run them.
$(CLIENTS_STAMP): $(CLIENTS)/package.json $(CLIENTS)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  cd $(CLIENTS) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	elif [ -n "$$CI" ]; then \
	  echo "make: npm is missing, and CI must run the client tests (Node.js 20+)" >&2; exit 1; \
	else \
	  echo "make: npm not found: the Claude Code client tests will be skipped (install Node.js 20+ to run them)" >&2; \
	fi

# The SSH tests start OpenSSH's sshd themselves; without it (outside CI) they are skipped,
# and said so; CI must run them (.ci/run installs it).
sshd:
	@if [ ! -x /usr/sbin/sshd ]; then \
	  if [ -n "$$CI" ]; then \
	    echo "make: /usr/sbin/sshd is missing, and CI must run the SSH tests (apt-get install openssh-server)" >&2; exit 1; \
	  fi; \
	  echo "make: sshd not found: the SSH tests will be skipped (apt-get install openssh-server to run them)" >&2; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check jpfs tests bench
	$(BIN)/ruff format --check jpfs tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck clients sshd
	$(BIN)/pytest -q -n 2 --timeout=300

# The quick tier, for each change while you work (`make test` stays the whole suite and
# CI's command): ruff, then every test that needs no daemon or MCP server process, no
# git or SSH server and no npm (tests/tiers.py marks the others `slow`). Bytecode is
# cached (in .venv/pycache, as bench/common.py does) even where PYTHONDONTWRITEBYTECODE
# is set: else every run and every jpfs subprocess compiles jpfs and the tests again.
# Its temporary files (every test's repositories) go to a tmpfs where there is one
# (/dev/shm; FAST_TMP= to keep TMPDIR): on an ext4 without a journal, as here, each file
# created after many were deleted pays for the inodes freed lately, and the tier's
# kernel time was 43 s on disk against 19 s on tmpfs (`make test` keeps TMPDIR). A
# tmpfs is memory: a passed test's directory is removed as it ends (pytest keeps the
# last 3 sessions' by default, 160 MB each for this tier; a failed test's stays).
FAST_TMP ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm)
.PHONY: test-fast
test-fast: $(STAMP)
	$(BIN)/ruff check jpfs tests bench
	$(BIN)/ruff format --check jpfs tests bench
	env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache \
	  $(if $(FAST_TMP),TMPDIR=$(FAST_TMP)) $(BIN)/pytest -q -n 2 -m "not slow" --timeout=120 \
	  $(if $(FAST_TMP),-o tmp_path_retention_policy=failed)

# KEEP=1 keeps the demo's repository (under $TMPDIR) to look around in.
demo: $(STAMP)
	$(BIN)/python -m jpfs.demo $(if $(KEEP),--keep)

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis .import_linter_cache \
	  bench/out build dist *.egg-info $(CLIENTS)/node_modules
	find . -name __pycache__ -type d -not -path './.git/*' -prune -exec rm -rf {} +

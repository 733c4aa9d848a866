# Two entry points do all set-up on a fresh machine with Python >= 3.11:
#   make run    the main job
#   make test   lint, type checks and the test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SETUP_LOG := $(VENV)/setup.log

.PHONY: run test lint typecheck pytest bench clean image image-test

# $(call step,WHAT,COMMAND): one line saying WHAT; COMMAND's output goes to the set-up log,
# which is printed in full, with the step that failed, only if it fails.
step = @printf 'make: %s\n' '$(1)'; $(2) >>$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); \
	printf 'make: failed: %s (the output above is in %s)\n' '$(1)' '$(SETUP_LOG)'; exit 1; }

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "dms-gateway needs Python >= 3.11, found " + sys.version.split()[0])'
	@mkdir -p $(VENV) && : >$(SETUP_LOG)
	$(call step,creating the virtual environment $(VENV)/,$(PYTHON) -m venv $(VENV))
	$(call step,upgrading pip,$(BIN)/python -m pip install --upgrade pip)
	$(call step,installing dms-gateway and its dependencies,$(BIN)/python -m pip install -e '.[test]')
	@touch $(STAMP)
	@printf 'make: ready (set-up log: %s)\n' '$(SETUP_LOG)'

run: $(STAMP)
	$(BIN)/dmsgw serve --devnet

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Imports inside the package are relative, so mypy reads the checkout as the package it is,
# from its parent directory. A checkout whose directory name is not a Python name (a clone into
# dms-gateway/) is read through a link named like the package instead.
PKGDIR := $(notdir $(CURDIR))
typecheck: $(STAMP)
	@if echo '$(PKGDIR)' | grep -Eq '^[A-Za-z_][A-Za-z0-9_]*$$'; then \
		cd .. && '$(CURDIR)/$(BIN)/mypy' --config-file '$(CURDIR)/pyproject.toml' '$(PKGDIR)'; \
	else \
		mkdir -p $(VENV)/src && ln -sfn ../.. $(VENV)/src/dmsgw && \
		cd $(VENV)/src && '$(CURDIR)/$(BIN)/mypy' --config-file '$(CURDIR)/pyproject.toml' dmsgw; \
	fi

TOOLS_STAMP := $(VENV)/.tools-stamp
$(TOOLS_STAMP): deploy/install-test-tools.sh | $(STAMP)
	$(call step,installing the tools the deployment files are checked with,bash deploy/install-test-tools.sh)
	@touch $(TOOLS_STAMP)

pytest: $(STAMP) $(TOOLS_STAMP)
	$(BIN)/pytest

test: lint typecheck pytest

# Every bench against its floor, in one run; follow.py at its target's size (10,000 pods).
bench: $(STAMP)
	$(BIN)/python bench/crypto.py
	$(BIN)/python bench/devnet_start.py
	$(BIN)/python bench/invoke.py
	$(BIN)/python bench/creates.py
	$(BIN)/python bench/follow.py --pods 10000
	$(BIN)/python bench/pods.py
	$(BIN)/python bench/ping.py
	$(BIN)/python bench/cli.py
	$(BIN)/python bench/logs.py

# The OCI image (deploy/image/Containerfile), built with Podman from Debian's packages; and the
# test that runs `dmsgw serve` from it and drives a pod through its plugin API (minutes: not
# part of `make test`; CI runs it as a job of its own).
IMAGE ?= dmsgw:0.1.0
image: $(STAMP)
	bash deploy/image/build.sh $(IMAGE)

image-test: $(STAMP) image
	DMSGW_IMAGE=$(IMAGE) $(BIN)/pytest -m image tests/test_image.py tests/test_devnet_images.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Two entry points do all set-up on a fresh machine with Python >= 3.11:
#   make run    the main job
#   make test   lint, type checks and the test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "dms-gateway needs Python >= 3.11, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/dmsgw serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy cannot see through the editable install's import hook, so it reads the checkout
# through a link named like the package.
typecheck: $(STAMP)
	mkdir -p $(VENV)/src && ln -sfn ../.. $(VENV)/src/dmsgw
	MYPYPATH=$(VENV)/src $(BIN)/mypy -p dmsgw

pytest: $(STAMP)
	$(BIN)/pytest

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python bench/crypto.py
	$(BIN)/python bench/devnet_start.py
	$(BIN)/python bench/invoke.py
	$(BIN)/python bench/pods.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis

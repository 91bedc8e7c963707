# Two commands: `make run` installs and starts the app (offline default), `make test` installs
# the test tools and runs the suite. Everything goes into a local virtualenv, .venv/.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8501

.PHONY: run test test-quick test-slow test-browser lint bench bench-quick clean

$(VENV)/.runtime: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt pyproject.toml
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

run: $(VENV)/.runtime
	$(PY) -m streamlit run app.py --server.port $(PORT)

test: $(VENV)/.dev
	$(PY) -m pytest -m "not slow"

# no browser, no slow tests, SQLite only (no PostgreSQL server started): a few minutes
test-quick: $(VENV)/.dev
	MARGINALIA_TEST_BACKENDS=sqlite $(PY) -m pytest -q -m "not slow and not browser"

test-slow: $(VENV)/.dev
	$(PY) -m pytest -m slow

test-browser: $(VENV)/.dev
	$(PY) -m pytest -m browser

lint: $(VENV)/.dev
	$(PY) -m ruff check .
	$(PY) -m mypy marginalia_core

bench: $(VENV)/.dev
	$(PY) benchmarks/run_all.py

bench-quick: $(VENV)/.dev
	$(PY) benchmarks/run_all.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Two commands: `make demo` and `make test`. Both create .venv if missing and need no network
# beyond the package registry (and none at all once installed).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test install install-test bench bench-quick locomo clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# setup.py and the C source: a changed kernel is rebuilt (pip install -e builds it in place)
SOURCES := pyproject.toml setup.py $(wildcard ipy_memory/csrc/*)

$(STAMP): $(SOURCES) | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(SOURCES) | $(PY)
	$(PY) -m pip install --quiet -e ".[test,local]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@ $(STAMP)

install: $(STAMP)
install-test: $(VENV)/.installed-test

demo: $(STAMP)
	$(PY) -m ipy_memory demo

test: $(VENV)/.installed-test
	OPENBLAS_NUM_THREADS=1 $(PY) -m pytest $(PYTEST_ARGS)
	$(PY) -m pytest --nbval notebooks/ --nbval-sanitize-with notebooks/nbval_sanitize.cfg -p no:cacheprovider -q

bench-quick: $(VENV)/.installed-test
	$(PY) benchmarks/scale.py --quick

locomo: $(STAMP)
	$(PY) benchmarks/locomo.py ../shared/data/locomo/locomo_dev.json

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache ipy_memory/_speedups*.so

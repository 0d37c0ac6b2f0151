# Two commands: `make demo` and `make test`. Both create .venv if missing and need no network
# beyond the package registry (and none at all once installed).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# the notebooks, as every test target runs them
NBVAL_ARGS := --nbval notebooks/ --nbval-sanitize-with notebooks/nbval_sanitize.cfg -p no:cacheprovider -q

.PHONY: demo test test-pythons test-oldest install install-test bench bench-1m bench-quick locomo clean

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
	$(PY) -m pytest $(NBVAL_ARGS)

bench-quick: $(VENV)/.installed-test
	$(PY) benchmarks/scale.py --quick

# The scale benchmark against its peers (ChromaDB, sqlite-vec on sqlean.py's SQLite, numpy): the
# `bench` extra goes into a venv of its own, never the package's. Results go to bench-out/.
BENCH_VENV := .venv-bench
BENCH_PY   := $(BENCH_VENV)/bin/python

$(BENCH_VENV)/.installed: $(SOURCES)
	test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --upgrade pip
	$(BENCH_PY) -m pip install --quiet -e ".[bench,test]"
	touch $@

bench: $(BENCH_VENV)/.installed
	mkdir -p bench-out
	OPENBLAS_NUM_THREADS=1 $(BENCH_PY) benchmarks/scale.py --sizes 1000,10000,100000 --json bench-out/scale-100k.json
	OPENBLAS_NUM_THREADS=1 $(BENCH_PY) benchmarks/kernels.py > bench-out/kernels.md

bench-1m: $(BENCH_VENV)/.installed
	mkdir -p bench-out
	OPENBLAS_NUM_THREADS=1 $(BENCH_PY) benchmarks/scale.py --sizes 1000000 --systems ipy_memory,numpy --json bench-out/scale-1m.json

locomo: $(STAMP)
	$(PY) benchmarks/locomo.py ../shared/data/locomo/locomo_dev.json

# The tests and notebooks on the other supported Pythons (CI runs 3.11): each of PYTHONS that runs
# here gets a venv of its own, .venv-3.x; one that does not is skipped. Not part of `make test`.
PYTHONS ?= python3.10 python3.12 python3.13

test-pythons:
	@for p in $(PYTHONS); do \
	  v=$$($$p -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || { echo "$$p: not found, skipped"; continue; }; \
	  d=.venv-$$v; echo "== Python $$v ($$d)"; \
	  test -x $$d/bin/python || $$p -m venv $$d || exit 1; \
	  $$d/bin/python -m pip install --quiet -e ".[test]" || exit 1; \
	  $$d/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null || exit 1; \
	  OPENBLAS_NUM_THREADS=1 $$d/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) || exit 1; \
	  $$d/bin/python -m pytest $(NBVAL_ARGS) || exit 1; \
	done

# The tests and notebooks with each runtime dependency and the `local` extra's at its lowest declared
# version (pyproject's ">=", pinned by .ci/oldest_pins.py), on CI's Python, in .venv-oldest. Not
# part of `make test`.
OLDEST := .venv-oldest

test-oldest:
	test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python .ci/oldest_pins.py pyproject.toml local > $(OLDEST)/pins.txt
	$(OLDEST)/bin/python -m pip install --quiet -r $(OLDEST)/pins.txt
	$(OLDEST)/bin/python -m pip install --quiet -c $(OLDEST)/pins.txt -e ".[test,local]"
	$(OLDEST)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	OPENBLAS_NUM_THREADS=1 $(OLDEST)/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)
	$(OLDEST)/bin/python -m pytest $(NBVAL_ARGS)

clean:
	rm -rf $(VENV) $(BENCH_VENV) .venv-3.* $(OLDEST) build dist *.egg-info .pytest_cache ipy_memory/_speedups*.so

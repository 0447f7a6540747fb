# One-command entry points. Each creates .venv (if missing), installs
# torch 2.13.0 (CPU) and this package into it, then does its job.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: install install-test demo test bench clean

SOURCES := setup.py pyproject.toml $(wildcard csrc/*.c csrc/*.cpp csrc/*.h)

$(VENV)/.torch:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "setuptools>=64" wheel
	$(PY) -m pip install -q $(TORCH_INDEX) "$(TORCH)"
	touch $@

$(VENV)/.installed: $(VENV)/.torch $(SOURCES)
	$(PY) -m pip install -q --no-build-isolation -e .
	touch $@

# with the test extras: pytest, and transformers/diffusers for the real-model tests
$(VENV)/.installed-test: $(VENV)/.torch $(SOURCES)
	$(PY) -m pip install -q --no-build-isolation -e ".[test]"
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

demo: install
	$(VENV)/bin/sgl-shapeprof demo

test: install-test
	$(PY) -m pytest -q

bench: install
	$(PY) benchmarks/run.py --all

clean:
	rm -rf build *.egg-info sgl_shapeprof/*.so shapeprof-demo $(VENV)/.installed $(VENV)/.installed-test

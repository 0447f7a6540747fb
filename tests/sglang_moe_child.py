"""SGLang 0.5.23's own fused-MoE Triton kernel, through its own
invoke_fused_moe_kernel, and its moe_sum_reduce kernel, under Triton's
interpreter on the CPU (TRITON_INTERPRET=1, set by the caller), recorded in
one logged pass. Prints one JSON object: what was passed to each launch
(the oracle) and which config each ran, as SGLang's own lookup chose it.

The steps of SGLang's fused_experts (moe_runner/triton_utils/fused_moe.py)
that need sgl_kernel (moe_align_block_size, the activation) are done here
by hand in plain torch: the kernel launches are SGLang's. The device name
is set to a GPU's (SGLang reads None on a CPU), so that SGLang's config
lookup reads a tuned file the test wrote (SGLANG_MOE_CONFIG_DIR)."""
import json
import os
import sys
import types

import torch
import triton
import triton.language as tl
from sglang.kernels.ops.moe.fused_moe_triton_kernels import invoke_fused_moe_kernel, moe_sum_reduce_triton
from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as cfgmod

from sgl_shapeprof import ShapeProfiler

out_dir, device = sys.argv[1], sys.argv[2]
cfgmod.get_device_name = lambda: device.replace("_", " ")
# what a server publishes (runtime_context): deterministic inference off, SGLang's default
cfgmod.get_exec = lambda: types.SimpleNamespace(
    deterministic=types.SimpleNamespace(enable_deterministic_inference=False))
torch.manual_seed(0)
M, H, I, TOPK = 4, 32, 32, 2
TUNED = {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1},
         "4": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 16, "GROUP_SIZE_M": 1},
         "64": {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}}
dtype_str = cfgmod.get_config_dtype_str(torch.float32)
folder = os.path.join(os.environ["SGLANG_MOE_CONFIG_DIR"], "configs",
                      "triton_" + triton.__version__.replace(".", "_"))
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, cfgmod.get_config_file_name(4, I, dtype_str)), "w") as f:
    json.dump(TUNED, f)


def t(x):
    return {"shape": list(x.shape), "dtype": str(x.dtype)}


def align(topk_ids, e, bm):
    """moe_align_block_size: token slots grouped by expert, each group padded to bm."""
    flat = topk_ids.flatten()
    sorted_ids, expert_ids = [], []
    for x in range(e):
        idx = (flat == x).nonzero().flatten().tolist()
        if idx:
            pad = (-len(idx)) % bm
            sorted_ids += idx + [flat.numel()] * pad
            expert_ids += [x] * ((len(idx) + pad) // bm)
    return (torch.tensor(sorted_ids, dtype=torch.int32), torch.tensor(expert_ids, dtype=torch.int32),
            torch.tensor([len(sorted_ids)], dtype=torch.int32))


def launch(a, b, c, tw, ids, config, mul, top_k):
    s, ex, ntp = align(ids, b.shape[0], config["BLOCK_SIZE_M"])
    invoke_fused_moe_kernel(a, b, None, c, None, None, None, tw, ids, s, ex, ntp, mul, top_k, config,
                            tl.float32, False, False, False, False, False)
    return {"inputs": {"a_ptr": t(a), "b_ptr": t(b), "c_ptr": t(c), "topk_weights_ptr": t(tw),
                       "sorted_token_ids_ptr": t(s), "expert_ids_ptr": t(ex), "num_tokens_post_padded_ptr": t(ntp)},
            "args": {"N": b.shape[1], "K": b.shape[2], "EM": s.shape[0], "num_valid_tokens": ids.numel(),
                     "top_k": top_k, "MUL_ROUTED_WEIGHT": mul, "compute_type": "fp32", **config,
                     "grid": [triton.cdiv(s.shape[0], config["BLOCK_SIZE_M"])
                              * triton.cdiv(b.shape[1], config["BLOCK_SIZE_N"])]}}


def experts(x, e, config=None, topk=TOPK, weights_on_input=False):
    """One MoE layer as SGLang's fused_experts runs it: the config from
    SGLang's own lookup (or one given), the up and the down GEMMs; with
    weights_on_input (apply_router_weight_on_input, Llama-4's top-1
    routing) the routing weight is applied in the up GEMM instead."""
    w1, w2 = torch.randn(e, 2 * I, H) / 8, torch.randn(e, H, I) / 8
    ids = torch.randint(0, e, (M, topk), dtype=torch.int32)
    tw = torch.rand(M, topk)
    chosen = config or cfgmod.try_get_optimal_moe_config(w1.shape, w2.shape, topk, dtype_str, M)
    cache1, cache3 = torch.zeros(M, topk, 2 * I), torch.zeros(M, topk, H)
    up = launch(x, w1, cache1, tw, ids, chosen, weights_on_input, topk)
    act = torch.nn.functional.silu(cache1[..., :I]) * cache1[..., I:]
    down = launch(act.view(M * topk, I), w2, cache3, tw, ids, chosen, not weights_on_input, 1)
    out = torch.empty(M, H)
    moe_sum_reduce_triton(cache3, out, 1.0)
    return up, down, chosen, (w1, w2, ids, tw, out, weights_on_input), {"input": t(cache3), "output": t(out)}


def max_error(w1, w2, ids, tw, out, weights_on_input):
    """The same layer in plain torch (after the passes: not the model's work)."""
    ref = torch.zeros(M, H)
    for m in range(M):
        for j in range(ids.shape[1]):
            h = w1[ids[m, j]] @ x[m]
            if weights_on_input:
                ref[m] += w2[ids[m, j]] @ (torch.nn.functional.silu(tw[m, j] * h[:I]) * (tw[m, j] * h[I:]))
            else:
                ref[m] += tw[m, j] * (w2[ids[m, j]] @ (torch.nn.functional.silu(h[:I]) * h[I:]))
    return float((out - ref).abs().max())


x = torch.randn(M, H)
path = os.path.join(out_dir, "moe.jsonl")
layers = []
with ShapeProfiler(path, dedupe=True) as prof:
    for step in range(2):
        with prof.forward_pass("decode"):
            for e, given, topk, on_input in (
                    (4, None, TOPK, False), (8, None, TOPK, False),
                    (4, {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 16, "GROUP_SIZE_M": 1},
                     TOPK, False),
                    (4, None, 1, True)):  # top-1 routing, weights on the input (Llama-4)
                up, down, chosen, run, reduce = experts(x, e, given, topk, on_input)
                if step == 0:
                    source = "given" if given else ("file" if e == 4 else "default")
                    layers.append({"E": e, "up": up, "down": down, "config": chosen, "source": source,
                                   "top_k": topk, "run": run, "reduce": reduce})
for layer in layers:
    layer["max_error"] = max_error(*layer.pop("run"))
print(json.dumps({"path": path, "layers": layers, "N": I, "M": M, "tuned_m": 4,
                  "file": os.path.join(folder, cfgmod.get_config_file_name(4, I, dtype_str))}))

"""A real CachingAutotuner (torch.compile's launcher of the Triton kernels
Inductor generates) whose launchers are stood in, for the Inductor door's
test and benchmark: Inductor's Triton path needs a GPU. The autotuner is
torch's own (its run(), autotuning, grid expression); only the function it
finally calls to launch is ours, and it records what it was given."""
import types

import torch
from torch._inductor.runtime import triton_heuristics as heuristics  # noqa: F401 (the benchmark patches it)
from torch._inductor.runtime.hints import DeviceProperties, HeuristicType

try:
    import triton
    import triton.language as tl

    @triton.jit
    def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
        xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
        tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex, xindex < xnumel) + 1.0, xindex < xnumel)

    KERNEL = triton_poi_fused_add_0

    def config(block, warps):
        return triton.Config({"XBLOCK": block}, num_warps=warps, num_stages=1)
except ImportError:  # torch's CPU wheel: Inductor's runtime imports without Triton
    KERNEL = types.SimpleNamespace(__name__="triton_poi_fused_add_0",
                                   arg_names=["in_ptr0", "out_ptr0", "xnumel", "XBLOCK"], src="")

    def config(block, warps):
        return types.SimpleNamespace(kwargs={"XBLOCK": block}, num_warps=warps, num_stages=1, pre_hook=None)


def autotuner(configs):
    """A real CachingAutotuner for a pointwise kernel, as Inductor makes one,
    its launchers stood in; returns it and the list of what was launched."""
    launched = []
    at = heuristics.CachingAutotuner(
        KERNEL, triton_meta={"signature": {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32",
                                           "XBLOCK": "constexpr"},
                             "device": DeviceProperties(type="cuda", index=0, multi_processor_count=132, cc=90,
                                                        warp_size=32, max_threads_per_block=1024),
                             "constants": {}, "configs": []},
        configs=configs, save_cache_hook=None, mutated_arg_names=[], optimize_mem=True,
        heuristic_type=HeuristicType.POINTWISE, size_hints={"x": 1024},
        inductor_meta={"grid_type": "Grid1D", "kernel_name": "triton_poi_fused_add_0"}, filename=None)

    def stand_in(cfg):
        def launch(*args, stream):
            if args[2] < 0:
                raise ValueError(f"xnumel {args[2]} < 0")
            launched.append((cfg.kwargs["XBLOCK"], args, stream))
        launch.config, launch.cache_hash, launch.store_cubin = cfg, str(id(cfg)), False
        launch.n_regs = launch.n_spills = launch.shared = 0  # what the autotuner logs of the winner
        return launch
    at.launchers = [stand_in(c) for c in configs]

    def bench(launcher, *args, **kwargs):  # the autotuner's timing: not the model's work
        torch.ones(4).sum()
        return 1.0 if launcher.config.kwargs["XBLOCK"] == 128 else 2.0
    at.bench = bench
    return at, launched

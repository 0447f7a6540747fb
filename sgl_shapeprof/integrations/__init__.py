"""Integrations with inference servers.

The modules the SGLang and vLLM integrations patch are named here, where the
start-up hook and the vLLM plugin can read them without importing anything
else. Shared by both: passes.py (a worker's profiler and its forward methods
wrapped); a module patched where it is imported is ../on_import.py's, which
recording/triton.py uses too.
"""
SGLANG_LLM_WORKER = "sglang.srt.managers.tp_worker"
SGLANG_DIFFUSION_WORKER = "sglang.multimodal_gen.runtime.managers.gpu_worker"
# /start_profile's scheduler side (SHAPES requests)
SGLANG_PROFILER_MANAGER = "sglang.srt.managers.scheduler_components.profiler_manager"
# where /start_profile's answer is made: the HTTP server and the tokenizer
SGLANG_HTTP_SERVER = "sglang.srt.entrypoints.http_server"
SGLANG_TOKENIZER_CONTROL = "sglang.srt.managers.tokenizer_control_mixin"
# CUDA graphs: the backends that capture and replay SGLang's graphs (decode:
# full graphs; prefill: breakable graphs by default on CUDA, or full)
SGLANG_FULL_GRAPH_BACKEND = "sglang.srt.model_executor.runner_backend.full_cuda_graph_backend"
SGLANG_BREAKABLE_GRAPH_BACKEND = "sglang.srt.model_executor.runner_backend.breakable_cuda_graph_backend"
# register_custom_op, whose ops skip the dispatcher on CUDA unless a gate fires
SGLANG_CUSTOM_OP = "sglang.srt.utils.custom_op"
# block-quantized GEMMs (Triton kernels launched from Python), where they are imported by name
SGLANG_FP8_UTILS = "sglang.srt.layers.quantization.fp8_utils"
SGLANG_INT8_UTILS = "sglang.srt.layers.quantization.int8_utils"

# vLLM (0.32): the model runner whose execute_model is a step (V1; the CPU
# runner inherits it), Model Runner V2's, and the CUDA graph wrapper
VLLM_MODEL_RUNNER = "vllm.v1.worker.gpu_model_runner"
VLLM_MODEL_RUNNER_V2 = "vllm.v1.worker.gpu.model_runner"
VLLM_CUDA_GRAPH = "vllm.compilation.cuda_graph"
# /start_profile and /stop_profile: the worker that takes them, and the routes
VLLM_WORKER = "vllm.v1.worker.gpu_worker"
VLLM_PROFILE_ROUTER = "vllm.entrypoints.serve.profile.api_router"
# where a /start_profile reaches every worker at once (all or none)
VLLM_EXECUTOR = "vllm.v1.executor.abstract"
# where an EngineCore makes a dense model's DP replica a DP=1 engine
VLLM_PARALLEL_CONFIG = "vllm.config.parallel"

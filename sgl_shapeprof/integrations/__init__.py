"""Integrations with inference servers.

The worker modules the SGLang integration patches are named here, where the
start-up hook can read them without importing anything else.
"""
SGLANG_LLM_WORKER = "sglang.srt.managers.tp_worker"
SGLANG_DIFFUSION_WORKER = "sglang.multimodal_gen.runtime.managers.gpu_worker"

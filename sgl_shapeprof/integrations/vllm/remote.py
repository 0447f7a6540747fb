"""A running vLLM server, driven by `sgl-shapeprof run --url`: asked for
shapes through /start_profile as an armed vLLM server takes it
(SHAPEPROF=on_request, docs/vllm.md: delay_iterations, max_iterations, a
profile_prefix), sent the workload through its OpenAI completions API as
token ids, its window closed with /stop_profile. vLLM's reply is empty:
each worker writes <prefix>-shapes-rank<N>.jsonl (or -TP-..-PP-..) beside
the server's SHAPEPROF_FILE, which only the server knows."""
from __future__ import annotations

import glob
import os
from time import strftime
from typing import Callable, List, Optional, Tuple

from ..http_client import RemoteError, call, expect, reply_json, send_all
from .seam import SHAPES_TIME, START_PROFILE, STOP_PROFILE

__all__ = ["RemoteError", "generate", "start", "stop"]


def start(url: str, api_key: Optional[str], output_dir: str, start_step: Optional[int],
          stop_step: Optional[int], time: bool = False) -> Tuple[str, List[str]]:
    """Asks every worker for shapes over the window (start_step: steps
    skipped from now; time: each call timed); (what to tell, the file
    patterns in output_dir that are the workers' when output_dir is the
    server's folder)."""
    prefix = f"run-{strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    body: dict = {"profile_prefix": prefix}
    if time:
        body[SHAPES_TIME] = True
    if start_step:
        body["delay_iterations"] = start_step
    if stop_step is not None:
        body["max_iterations"] = stop_step - (start_step or 0)
    expect(*call(url, START_PROFILE, body, api_key, 120), url, START_PROFILE)
    return (f"shapes: every worker of {url} records into {prefix}-shapes-<worker>.jsonl beside the server's "
            f"SHAPEPROF_FILE (vLLM's reply does not say where: -o that folder analyzes them here)",
            [os.path.join(glob.escape(output_dir), f"{prefix}-shapes-*.jsonl")])


def stop(url: str, api_key: Optional[str]) -> None:
    call(url, STOP_PROFILE, {}, api_key, 120)  # a window already over: nothing to stop, fine


def generate(url: str, api_key: Optional[str], prompts: list, max_tokens: int, concurrency: int,
             done: Callable[[int], None]) -> List[List[int]]:
    """Sends every request to /v1/completions, at most `concurrency` in
    flight; [[prompt tokens, output tokens], ...] as the server counted them."""
    models = reply_json(expect(*call(url, "/v1/models", None, api_key, 60), url, "/v1/models"), url,
                        "/v1/models").get("data")
    if not isinstance(models, list) or not models or not isinstance(models[0], dict) or "id" not in models[0]:
        raise RemoteError(f"{url}/v1/models names no model")
    model = models[0]["id"]

    def one(prompt) -> List[int]:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        usage = reply_json(expect(*call(url, "/v1/completions", body, api_key, 3600), url, "/v1/completions"),
                           url, "/v1/completions").get("usage") or {}
        done(1)
        return [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    return send_all(prompts, concurrency, one)

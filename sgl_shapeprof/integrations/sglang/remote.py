"""A running SGLang server, driven by `sgl-shapeprof run --url`: asked for
SHAPES through its own /start_profile (the server must be armed:
SGLANG_PROFILE_SHAPES=on_request, docs/sglang.md), sent the workload
through its native /generate, and its window closed with /stop_profile.

The load is sent here, not by SGLang's bench_serving: bench_serving's
random dataset turns random token ids into text and the server tokenizes
it again, so a request's length is not exactly --isl unless the client
holds the model's tokenizer; here each request is its token ids
(`input_ids`), exactly --isl of them, and --concurrency requests are in
flight at once (a thread each), as bench_serving's --max-concurrency
keeps them."""
from __future__ import annotations

import glob
import os
import re
from typing import Callable, List, Optional, Tuple

from ..http_client import RemoteError, call, expect, reply_json, send_all
from .seam import SHAPES, SHAPES_TIME, START_PROFILE, STOP_PROFILE

__all__ = ["RemoteError", "generate", "start", "stop"]


def _files(reply: str, output_dir: str) -> List[str]:
    """The files the reply says the workers record into, in output_dir only
    (the folder asked for: a name the reply puts elsewhere is not read):
    'records ... into <output_dir>/NAME', and for the workers SGLang's
    reply leaves out (other PP stages, DP replicas) 'all files are
    PATTERN in that folder'."""
    folder = re.escape(os.path.join(output_dir, ""))
    names = re.findall(r"records .*? into " + folder + r"([^\s/]+\.jsonl)", reply)
    patterns = re.findall(r"all files are ([^\s/]+\.jsonl) in that folder", reply)
    return [os.path.join(output_dir, n) for n in names] + [os.path.join(glob.escape(output_dir), p) for p in patterns]


def start(url: str, api_key: Optional[str], output_dir: str, start_step: Optional[int],
          stop_step: Optional[int], time: bool = False) -> Tuple[str, List[str]]:
    """Asks for SHAPES over the window (time: each call timed); (the
    server's reply, the files (or patterns of them) it says its workers
    record into, in output_dir)."""
    body: dict = {"activities": [SHAPES, SHAPES_TIME] if time else [SHAPES], "output_dir": output_dir}
    if start_step:
        body["start_step"] = start_step  # SGLang's: the server's forward count, as bench_serving's
    if stop_step is not None:
        body["num_steps"] = stop_step - (start_step or 0)
    text = expect(*call(url, START_PROFILE, body, api_key, 120), url, START_PROFILE)
    return text.strip(), _files(text, output_dir)


def stop(url: str, api_key: Optional[str]) -> None:
    """Closes the window (a window already over: the server says so; nothing to do)."""
    call(url, STOP_PROFILE, {"activities": [SHAPES]}, api_key, 120)


def generate(url: str, api_key: Optional[str], prompts: list, max_tokens: int, concurrency: int,
             done: Callable[[int], None]) -> List[List[int]]:
    """Sends every request, at most `concurrency` in flight; [[prompt
    tokens, output tokens], ...] as the server counted them."""
    params = {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}

    def one(prompt) -> List[int]:
        body = {"input_ids": prompt} if isinstance(prompt, list) else {"text": prompt}
        text = expect(*call(url, "/generate", dict(body, sampling_params=params), api_key, 3600), url, "/generate")
        meta = reply_json(text, url, "/generate").get("meta_info") or {}
        done(1)
        return [meta.get("prompt_tokens"), meta.get("completion_tokens")]
    return send_all(prompts, concurrency, one)

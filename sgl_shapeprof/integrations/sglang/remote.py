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

import json
import re
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Tuple

# where the reply says each worker records ("SHAPES: rank 0 (TP-0) records 5 passes into PATH")
_INTO = re.compile(r"records .*? into (\S+\.jsonl)")


class RemoteError(Exception):
    """The server refused, or could not be reached: one line."""


def _post(url: str, path: str, body: dict, api_key: Optional[str], timeout: float) -> Tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(body).encode(), headers=headers,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        raise RemoteError(f"{url}{path}: cannot reach the server ({getattr(e, 'reason', e)})") from None


def _message(text: str) -> str:
    try:
        obj = json.loads(text)
        text = obj.get("message") or obj.get("detail") or text if isinstance(obj, dict) else text
    except ValueError:
        pass
    return str(text).strip().splitlines()[0][:300] if str(text).strip() else "(no message)"


def start(url: str, api_key: Optional[str], output_dir: str, start_step: Optional[int],
          stop_step: Optional[int]) -> Tuple[str, List[str]]:
    """Asks for SHAPES over the window; (the server's reply, the files it
    says its workers record into)."""
    body: dict = {"activities": ["SHAPES"], "output_dir": output_dir}
    if start_step:
        body["start_step"] = start_step  # SGLang's: the server's forward count, as bench_serving's
    if stop_step is not None:
        body["num_steps"] = stop_step - (start_step or 0)
    status, text = _post(url, "/start_profile", body, api_key, 120)
    if status != 200:
        raise RemoteError(f"{url}/start_profile answered {status}: {_message(text)}")
    return text.strip(), _INTO.findall(text)


def stop(url: str, api_key: Optional[str]) -> None:
    """Closes the window (a window already over: the server says so; nothing to do)."""
    _post(url, "/stop_profile", {"activities": ["SHAPES"]}, api_key, 120)


def generate(url: str, api_key: Optional[str], prompts: list, max_tokens: int, concurrency: int,
             done: Callable[[int], None]) -> List[List[int]]:
    """Sends every request, at most `concurrency` in flight; [[prompt
    tokens, output tokens], ...] as the server counted them."""
    params = {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}

    def one(prompt) -> List[int]:
        body = {"input_ids": prompt} if isinstance(prompt, list) else {"text": prompt}
        status, text = _post(url, "/generate", dict(body, sampling_params=params), api_key, 3600)
        if status != 200:
            raise RemoteError(f"{url}/generate answered {status}: {_message(text)}")
        meta = json.loads(text).get("meta_info", {})
        done(1)
        return [meta.get("prompt_tokens"), meta.get("completion_tokens")]
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(one, prompts))

"""A server's HTTP API as `sgl-shapeprof run --url` calls it (the servers'
remote.py): JSON in, text out, one-line errors. Standard library only."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Optional, Tuple


class RemoteError(Exception):
    """The server refused, or could not be reached: one line."""


def call(url: str, path: str, body: Optional[dict], api_key: Optional[str], timeout: float) -> Tuple[int, str]:
    """(status, text) of POST url+path with body as JSON (GET when body is
    None); RemoteError when the server cannot be reached."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + path, headers=headers,
                                 data=None if body is None else json.dumps(body).encode(),
                                 method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise RemoteError(f"{url}{path}: cannot reach the server ({getattr(e, 'reason', e)})") from None


def message(text: str) -> str:
    """The first line of a reply's message (its JSON's message or detail)."""
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            text = obj.get("message") or obj.get("detail") or (obj.get("error") or {}).get("message") or text
    except (ValueError, AttributeError):
        pass
    text = str(text).strip()
    return text.splitlines()[0][:300] if text else "(no message)"


def expect(status: int, text: str, url: str, path: str) -> str:
    """text when status is 200, else RemoteError saying what the server said."""
    if status != 200:
        raise RemoteError(f"{url}{path} answered {status}: {message(text)}")
    return text


def send_all(requests: list, concurrency: int, send) -> list:
    """send(request) for each, at most `concurrency` in flight (a thread
    each), as a load generator's max concurrency keeps them; their results
    in order."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(send, requests))

"""A server's HTTP API as `sgl-shapeprof run --url` calls it (the servers'
remote.py): JSON in, text out, one-line errors. Standard library only."""
from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from typing import Any, Optional, Tuple

from ..records import untrusted


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
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        raise RemoteError(f"{url}{path}: cannot reach the server ({getattr(e, 'reason', e)})") from None


def message(text: str) -> str:
    """The first line of a reply's message (its JSON's message or detail)."""
    try:
        obj = untrusted.loads(text)
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


def reply_json(text: str, url: str, path: str) -> dict:
    """A 200 reply's JSON object, else RemoteError (not this server's API:
    a proxy's page, another --server)."""
    try:
        obj: Any = untrusted.loads(text)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        raise RemoteError(f"{url}{path} answered something that is not its API's JSON: {message(text)}")
    return obj


def printable(text: str) -> str:
    """A server's reply, safe to print: control characters (a terminal's
    escapes) shown as '?'."""
    return "".join(c if c.isprintable() or c == "\n" else "?" for c in text)


def send_all(requests: list, concurrency: int, send) -> list:
    """send(request) for each, at most `concurrency` in flight, as a load
    generator's max concurrency keeps them; their results in order. The
    first error stops the sending and is raised; so is an interrupt. The
    threads are daemons: a request still waiting on the server does not
    keep the process from exiting."""
    results: list = [None] * len(requests)
    lock = threading.Lock()
    todo = iter(range(len(requests)))
    failed: list = []

    def worker() -> None:
        while True:
            with lock:
                if failed:
                    return
                i = next(todo, None)
            if i is None:
                return
            try:
                results[i] = send(requests[i])
            except BaseException as e:  # noqa: B902 -- handed to the caller's thread
                with lock:
                    failed.append(e)
                return
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(concurrency, len(requests))))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)  # a timeout: the main thread stays interruptible
    if failed:
        raise failed[0]
    return results

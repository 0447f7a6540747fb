"""The graph captures a profiler armed for requests keeps (issue 52).

A server captures its CUDA graphs at start-up, before any request; every
replay then repeats the captured calls without the dispatcher. So an armed
profiler records each capture as a from-start-up profiler would (every door,
with its graph key, family and phase), apart: into a records file of its own
in a private folder, read back into memory and removed once the capture
ends. The newest capture of a key replaces the one kept before it.

A request's first replay of a graph inside its logged passes writes that
graph's kept capture into the request's file through the native core
(`graph_adopt`): its records under the file's own call ids, its counts in
the file's summary (operators, phases, signature counts, the capture in
"graphs"), exactly as if the capture had been recorded into that file. A
graph not replayed in the window is not written.

Kept bytes are capped by the armed profiler's records cap (max_mb, else the
default 1 GiB): a capture past it, or one that failed or reached the cap
itself, is not kept, said once; the request's file then says its replays
had no capture.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import Dict, Optional

from .messages import say_once
from .profiler import ShapeProfiler, check_key, max_bytes

DEFAULT_KEPT_BYTES = 1 << 30  # the records file's default cap (sp_core.h SP_DEFAULT_MAX_BYTES)


@dataclass
class KeptCapture:
    key: int
    phase: Optional[str]
    recorder: ShapeProfiler  # closed: it recorded the capture, and holds its counts
    text: bytes      # its records file
    records: int


class KeptCaptures:
    """An armed profiler's graph captures, by key."""

    def __init__(self, dedupe: bool, args: bool, max_mb: Optional[float]):
        self.dedupe = dedupe
        self.args = args
        self.max_mb = max_mb
        cap = max_bytes(max_mb)  # the core's reading of it: 0 the default, -1 none
        self.cap = DEFAULT_KEPT_BYTES if cap == 0 else max(cap, 0)
        self._kept: Dict[int, KeptCapture] = {}
        self._open: Dict[int, tuple] = {}  # id(keeper) -> (key, phase): captures under way
        self._lock = threading.Lock()
        self._folder: Optional[str] = None
        self._closed = False
        self._seq = 0

    # -- captures (the model's thread) --------------------------------------
    def keeper(self, key: int, phase: Optional[str]) -> Optional[ShapeProfiler]:
        """A profiler to record this capture into (the caller opens the
        capture on it and ends it), or None when none can be made (said)."""
        if self._closed:
            return None
        try:
            key = check_key(key)
            with self._lock:
                if self._folder is None:
                    self._folder = tempfile.mkdtemp(prefix=f"sgl_shapeprof-captures-{os.getpid()}-")
                    atexit.register(self.close)
                self._seq += 1
                path = os.path.join(self._folder, f"graph-{self._seq}.jsonl")
            prof = ShapeProfiler(path, dedupe=self.dedupe, args=self.args, max_mb=self.max_mb,
                                 exclusive=True)
        except Exception as e:  # a full /tmp, say: the capture goes unkept
            say_once("kept-captures", f"cannot keep graph captures for requests ({e}); "
                                      f"requests will not hold the graphs' calls")
            return None
        self._open[id(prof)] = (key, phase)
        return prof

    def owns(self, prof: object) -> bool:
        return id(prof) in self._open

    def ended(self, prof: ShapeProfiler) -> None:
        """The capture recorded into prof ended: kept (newest of its key wins)."""
        key, phase = self._open.pop(id(prof))
        try:
            prof.close()
            with open(prof.path, "rb") as f:
                text = f.read()
            with open(prof.summary_path, "rb") as f:
                summary = json.loads(f.read())
            st = prof.stats()
        except Exception as e:
            self._refuse(key, f"cannot read its records back ({e})")
            return
        finally:
            _remove(prof)
        if summary.get("stopped_at_cap"):
            self._refuse(key, "it reached the records cap (SHAPEPROF_MAX_MB)")
            return
        if summary.get("profiler_failed") or st["records"] != text.count(b"\n"):
            self._refuse(key, "its recording failed")
            return
        with self._lock:
            old = self._kept.get(key)
            total = sum(len(k.text) for k in self._kept.values()) - (len(old.text) if old else 0)
            if self.cap and total + len(text) > self.cap:
                refused = True
            else:
                refused = False
                self._kept[key] = KeptCapture(key, phase, prof, text, st["records"])
        if refused:
            self._refuse(key, f"the kept captures would pass the records cap of "
                              f"{self.cap / 2 ** 20:.1f} MiB (SHAPEPROF_MAX_MB)")

    def discard(self, prof: ShapeProfiler) -> None:
        """A keeper whose capture did not start: its files go."""
        self._open.pop(id(prof), None)
        prof.close()
        _remove(prof)

    def _refuse(self, key: int, why: str) -> None:
        with self._lock:
            self._kept.pop(key, None)  # an older capture of it is not what runs now
        say_once(f"kept-capture-{why}", f"graph {key}'s capture is not kept for requests: {why}; "
                                        f"a request replaying it will not hold its calls")

    # -- requests -----------------------------------------------------------
    def get(self, key: int) -> Optional[KeptCapture]:
        """The newest kept capture of graph key."""
        return self._kept.get(key)

    def adopt(self, into: ShapeProfiler, kept: KeptCapture) -> bool:
        """Writes a kept capture into `into` (a request's profiler, inside a
        logged pass of this thread that replays its graph). True if written."""
        return into.adopt_capture(kept.recorder, kept.text)

    def list_in(self, into: ShapeProfiler) -> None:
        """Names every kept graph in a request's summary as it starts, so
        that one its window never replays is said to be unused (tune
        --cuda-graph-bs), as a from-start-up recording says it."""
        for kept in list(self._kept.values()):
            into.graph_known(kept.key, kept.phase)

    def stats(self) -> dict:
        with self._lock:
            return {"graphs": len(self._kept), "records": sum(k.records for k in self._kept.values()),
                    "bytes": sum(len(k.text) for k in self._kept.values())}

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._kept.clear()
            folder, self._folder = self._folder, None
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def _remove(prof: ShapeProfiler) -> None:
    """A keeper's records file and summary, in our private folder."""
    for path in (prof.path, prof.summary_path):
        try:
            os.unlink(path)
        except OSError:
            pass

"""The profiler's messages: one line on stderr, "sgl_shapeprof: ...", never
raising into the host program."""
from __future__ import annotations

import sys

_said: set = set()  # keys of the messages said once


def say(message: str) -> None:
    try:
        sys.stderr.write(f"sgl_shapeprof: {message}\n")
        sys.stderr.flush()
    except Exception:  # stderr closed: nothing more we can do
        pass


def say_once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        say(message)

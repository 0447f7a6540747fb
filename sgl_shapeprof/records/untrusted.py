"""JSON from a source we do not trust: a records file or its summary (they
travel with bug reports), a request file, a server's reply, a config file
given on the command line. One rule for all of them: what a reader cannot
take is a ValueError, never another exception, and nothing nested deeper
than MAX_DEPTH reaches the code that walks it.

Python's json raises RecursionError (a RuntimeError, not a ValueError) on a
text nested past the interpreter's recursion limit, and a text nested a
little less parses but then breaks whatever walks it recursively (a
signature's text, a replay's inputs). The profiler's own records nest 5
or 6 deep (a record, its inputs, a list argument, a tensor, its shape), so
a cap far above that costs no true record.
"""
from __future__ import annotations

import json
from typing import Any, Union

# Deeper than this, a JSON text is refused (docs/FORMAT.md, "Reading").
MAX_DEPTH = 32


def loads(text: Union[str, bytes, bytearray]) -> Any:
    """json.loads, for untrusted text: ValueError (json's own
    JSONDecodeError included) for what is not JSON or is nested deeper than
    MAX_DEPTH."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH}") from None
    # Only a text with more than MAX_DEPTH brackets can nest that deep: most
    # lines are never walked.
    if isinstance(value, (dict, list)) and _brackets(text) > MAX_DEPTH and depth(value) > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH}")
    return value


def _brackets(text: Union[str, bytes, bytearray]) -> int:
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def depth(value: Any) -> int:
    """How deep containers nest in a parsed value (a scalar: 0), without
    recursion, stopping early past MAX_DEPTH."""
    deepest = 0
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        v, d = stack.pop()
        if d > deepest:
            deepest = d
            if deepest > MAX_DEPTH:
                break
        for x in (v.values() if isinstance(v, dict) else v):
            if isinstance(x, (dict, list)):
                stack.append((x, d + 1))
    return deepest

"""Recorded values (a tensor as {"shape", "dtype"}, a list of them, a
scalar): their element counts and broadcast shapes, and how they read as
text, for every command's output."""
from __future__ import annotations

from typing import Optional, Tuple


def elements(value: object) -> int:
    """Elements in a tensor value as recorded (a list: the sum over its tensors)."""
    if isinstance(value, dict):
        n = 1
        for s in value.get("shape") or []:
            n *= int(s)
        return n
    if isinstance(value, list):
        return sum(elements(v) for v in value)
    return 0


def short_dtype(d: object) -> str:
    s = str(d)
    return s[6:] if s.startswith("torch.") else s


def format_value(v: object) -> str:
    """{"shape": [4, 8], "dtype": "torch.float32"} -> "[4, 8] float32"."""
    if v is None:
        return "None"
    if isinstance(v, dict):
        return f"{list(v.get('shape', []))} {short_dtype(v.get('dtype'))}"
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    return str(v)


def format_inputs(inputs: Optional[dict]) -> str:
    inputs = inputs or {}
    return ", ".join(f"{k}={format_value(v)}" for k, v in inputs.items()) or "(no tensor inputs)"


def broadcast_shape(a: Tuple[int, ...], b: Tuple[int, ...]) -> Tuple[int, ...]:
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b))


def human(n: float) -> str:
    """1234567 -> '1.23M'."""
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}" if isinstance(n, float) and not n.is_integer() else str(int(n))

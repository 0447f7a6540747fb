"""Recorded values (a tensor as {"shape", "dtype"}, a list of them, a
scalar): their element counts and broadcast shapes, and how they read as
text, for every command's output."""
from __future__ import annotations

from typing import Optional, Tuple


# A dimension as large as a tensor can have (torch's sizes are int64).
MAX_DIM = (1 << 63) - 1


def is_shape(v: object) -> bool:
    """A shape as the profiler writes one: a list of whole numbers >= 0
    (not bools), each at most int64's largest."""
    return isinstance(v, list) and all(type(d) is int and 0 <= d <= MAX_DIM for d in v)


def readable(value: object) -> object:
    """A recorded value whose tensors all have readable shapes: a tensor
    whose "shape" is not one (a records file is untrusted: [2, null], "8x8",
    -1) keeps its other fields and loses its shape, so that no reader takes
    it for a tensor ("shape" is what makes one). Everything else as it is."""
    if isinstance(value, dict):
        if "shape" in value and not is_shape(value["shape"]):
            return {k: v for k, v in value.items() if k != "shape"}
        return value
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return [readable(v) for v in value]
    return value


def elements(value: object) -> int:
    """Elements in a tensor value as recorded (a list: the sum over its tensors)."""
    if isinstance(value, dict):
        shape = value.get("shape")
        if not is_shape(shape):
            return 0
        n = 1
        for s in shape:
            n *= s
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

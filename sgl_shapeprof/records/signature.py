"""What a signature is (docs/FORMAT.md): what makes a call distinct to a
reader, the same thing the profiler deduplicates on, and the key a record
is counted under."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .values import elements, format_inputs, format_value, readable


@dataclass
class Signature:
    """A signature: what makes a call distinct to a reader (FORMAT.md), the
    same thing the profiler deduplicates on: its operation, inputs, outputs
    (or error), its pass's phase and graph, and, where arguments were
    recorded, the arguments other than float values (a float that changes
    every step does not make a new signature; `args` shows the first
    record's values)."""
    operation: str
    inputs: dict
    outputs: object
    error: Optional[dict]
    phase: Optional[str]
    incomplete: bool = False
    count: int = 0       # calls (true counts; a capture's: times its graph's replays)
    records: int = 0     # lines in the file
    first_call: int = 0  # call_id of its first record
    out_elements: int = 0
    args: Optional[dict] = None   # the other arguments, when recorded (FORMAT.md)
    graph: Optional[int] = None   # the graph a capture's record belongs to
    within: Optional[str] = None  # the operation whose call this one ran inside (FORMAT.md)
    # measured wall time (a timed recording, FORMAT.md "time_us"), in ns, of
    # `timed` of its calls (a graph capture's records are not: a replay's
    # time is not its capture's)
    time_ns: int = 0
    timed: int = 0
    time_min: Optional[int] = None
    time_max: Optional[int] = None

    # measured GPU kernel time (a kernels-timed recording, FORMAT.md "Kernels"),
    # in ns, of `kernel_calls` of its calls, each call's kernels summed (a
    # capture's record: its replays')
    kernel_ns: int = 0
    kernel_calls: int = 0
    kernel_min: Optional[int] = None
    kernel_max: Optional[int] = None

    def add_kernel_time(self, calls: int, total: int, low: int, high: int) -> None:
        """calls more of its calls ran total ns of kernels, the least low, the most high."""
        self.kernel_calls += calls
        self.kernel_ns += total
        self.kernel_min = low if self.kernel_min is None else min(self.kernel_min, low)
        self.kernel_max = high if self.kernel_max is None else max(self.kernel_max, high)

    def add_time(self, calls: int, total: int, low: int, high: int) -> None:
        """calls more of its calls took total ns, the least low, the most high."""
        self.timed += calls
        self.time_ns += total
        self.time_min = low if self.time_min is None else min(self.time_min, low)
        self.time_max = high if self.time_max is None else max(self.time_max, high)

    @property
    def text(self) -> str:
        """inputs -> outputs, for people."""
        return format_inputs(self.inputs) + " -> " + (
            format_value(self.outputs) if self.outputs is not None else "None") + (
            f"  (within {self.within})" if self.within else "")

    @property
    def key(self) -> Tuple[str, str, str]:
        """What makes two signatures the same across files (phase aside)."""
        return (self.operation, json.dumps(self.inputs, sort_keys=False) + (
                    json.dumps(mask_floats(self.args)) if self.args is not None else "") + (
                    " within " + self.within if self.within else ""),
                json.dumps(self.outputs) if self.error is None else "error")


_FLOAT_WORDS = ("inf", "-inf", "nan")  # floats JSON cannot hold (FORMAT.md)


def _is_float(v: object) -> bool:
    return (isinstance(v, float) or v in _FLOAT_WORDS or
            (isinstance(v, dict) and set(v) == {"real", "imag"}))


def mask_floats(args: Optional[dict]) -> Optional[dict]:
    """args without their float values (each float becomes null): what the
    signature keeps of them."""
    if not args:
        return args

    def one(v):
        if isinstance(v, list) and v and all(_is_float(x) or isinstance(x, int) for x in v) \
                and any(_is_float(x) for x in v):
            return [None] * len(v)
        return None if _is_float(v) else v
    return {k: one(v) for k, v in args.items()}


# A record's fields that are its call's own, not its signature's.
PER_CALL = ("call_id", "forward_pass", "start_us", "time_us")


def float_key(rec: dict) -> Optional[bytes]:
    """The key of a record whose args hold floats (they are masked), else
    None (its text after call_id and forward_pass is its key)."""
    args = rec.get("args")
    if not isinstance(args, dict) or not any(
            _is_float(v) or (isinstance(v, list) and any(_is_float(x) for x in v)) for v in args.values()):
        return None
    body = {k: (mask_floats(v) if k == "args" else v) for k, v in rec.items() if k not in PER_CALL}
    return json.dumps(body).encode()[1:]


def signature_of(rec: dict) -> Signature:
    """The signature of a parsed record, its tensors' shapes readable
    (values.readable: a record from an untrusted file)."""
    out = readable(rec.get("outputs"))
    inputs = rec.get("inputs")
    return Signature(
        operation=str(rec.get("operation", "?")),
        inputs={k: readable(v) for k, v in inputs.items()} if isinstance(inputs, dict) else {},
        outputs=out, error=rec.get("error"), phase=rec.get("phase"),
        incomplete=bool(rec.get("incomplete")), out_elements=elements(out),
        args=rec.get("args") if isinstance(rec.get("args"), dict) else None,
        graph=rec.get("graph") if isinstance(rec.get("graph"), int) else None,
        within=rec.get("within") if isinstance(rec.get("within"), str) else None)


def key_of(rec: dict) -> bytes:
    """The key a parsed record is counted under: its text after call_id and
    forward_pass, as the profiler writes it, with float arguments masked."""
    return float_key(rec) or json.dumps(
        {k: v for k, v in rec.items() if k not in PER_CALL}).encode()[1:]


def _details(s: Signature) -> Dict[str, str]:
    """What a signature holds beyond its text: strides, offsets, devices,
    arguments (float values masked, as the signature keeps them), graph,
    error, each under a name a person can read ("self offset")."""
    out: Dict[str, str] = {}

    def tensor(name: str, v: object) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k not in ("shape", "dtype"):
                    out[f"{name} {k}"] = json.dumps(x)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                tensor(f"{name}[{i}]", x)
    for name, v in (s.inputs or {}).items():
        tensor(name, v)
    tensor("output", s.outputs)
    for k, v in (mask_floats(s.args) or {}).items():
        out[k] = json.dumps(v)
    if s.graph is not None:
        out["graph"] = str(s.graph)
    if s.error is not None:
        out["error"] = str(s.error.get("error_type")) if isinstance(s.error, dict) else "?"
    if s.incomplete:
        out["incomplete"] = "true"
    return out


def tell_apart(sigs: Sequence[Signature], among: Optional[Sequence[Signature]] = None) -> List[str]:
    """For each of sigs, what tells it apart from the signatures of `among`
    (default: sigs) that print alike (operation, phase and text): the
    fields whose values differ among them ("self offset=64"), or its first
    call where none do; "" for one that prints like no other."""
    pool = list(among) if among is not None else list(sigs)
    groups: Dict[tuple, List[Signature]] = {}
    for s in pool:
        groups.setdefault((s.operation, s.phase, s.text), []).append(s)
    differing: Dict[tuple, List[str]] = {}  # a group's fields that differ, found once per group
    said = []
    for s in sigs:
        group = (s.operation, s.phase, s.text)
        alike = groups.get(group, [])
        if len(alike) < 2 and not (alike and alike[0] is not s):
            said.append("")
            continue
        if group not in differing:
            details = [_details(x) for x in alike]
            differing[group] = [k for k in sorted({k for d in details for k in d})
                                if len({d.get(k) for d in details}) > 1]
        mine = _details(s)
        parts = [f"{k}={mine[k]}" if k in mine else f"no {k}" for k in differing[group]]
        said.append(", ".join(parts) if parts else f"first call {s.first_call}")
    return said

"""Replay: each distinct recorded call run again and timed -- the calls.

A file recorded with arguments on (docs/FORMAT.md, "Arguments") says, per
call, the operator, each input tensor's shape, dtype, strides, storage offset
and device, and every other argument: enough to call the operator again
through torch.ops on tensors laid out the same way. Per-call time × how often
the file says the call ran is where the model's operator time goes on the
device the replay runs on.

Tensor values are not recorded. Floating-point inputs are drawn from N(0, 1);
inputs whose values the operator reads as positions, counts or order (indices,
masks, offsets) are made valid for the recorded shapes, per operator family
(_value_rules), and each says how it was made. A call that cannot be replayed
faithfully is listed with the reason, never run.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


from ..records.ledger import COLLECTIVE_NAMESPACES
from ..records.scan import Source
from ..records.values import format_value, short_dtype

WARMUP = 3
MIN_ITERATIONS = 10
MAX_ITERATIONS = 1000
TARGET_NS = 10_000_000    # timed iterations aim at 10 ms per call (between the two bounds)
MAX_COPIES = 32           # input sets a call's runs rotate among, at most
SMALL_INT_HIGH = 16       # integer inputs of calls without floating-point tensors: [0, 16)

# Operators whose results come from a random generator (dropout only while training).
RANDOM_OPS = {
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
    "bernoulli", "multinomial", "normal", "uniform", "exponential", "geometric", "cauchy",
    "log_normal", "random", "poisson", "binomial", "rrelu", "rrelu_with_noise",
    "_standard_gamma", "_sample_dirichlet", "_fused_dropout",
}
DROPOUT_OPS = {"dropout", "native_dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"}

# Families whose `index` input indexes `self` along `dim`.
ALONG_DIM_OPS = {"index_select", "gather", "scatter", "scatter_add", "scatter_reduce", "index_add",
                 "index_copy", "index_fill", "index_reduce", "take_along_dim"}
ADVANCED_INDEX_OPS = {"index", "unsafe_index", "index_put", "index_put_impl", "unsafe_index_put"}
LOSS_TARGET_OPS = {"nll_loss", "nll_loss_nd", "nll_loss2d", "nll_loss_forward", "cross_entropy_loss"}


class NotReplayable(Exception):
    """Why a call is not replayed (the message is the reason shown)."""


@dataclass
class Call:
    """A distinct call of the file (operation, inputs, arguments) and how often it ran."""
    operation: str
    inputs: dict
    args: Optional[dict]
    outputs: object
    error: Optional[dict]
    count: int
    incomplete: bool = False


@dataclass
class Replayed:
    """One call's replay: its times, or why it was not replayed."""
    call: Call
    median_us: Optional[float] = None
    p10_us: Optional[float] = None
    p90_us: Optional[float] = None
    iterations: int = 0
    copies: int = 0      # input sets its runs rotated among
    device: str = ""
    synthesised: Dict[str, str] = field(default_factory=dict)  # input -> how its values were made
    output_mismatch: Optional[str] = None  # replayed outputs differ from the recorded ones
    reason: Optional[str] = None           # not replayed: why
    threads: int = 0                       # the CPU threads its runs used (1 for a GPU's launches)
    others_runnable: Optional[int] = None  # other processes' runnable tasks at both ends of its runs
    timing_doubts: List[str] = field(default_factory=list)  # "busy", "spread": noise.py

    @property
    def total_us(self) -> Optional[float]:
        return None if self.median_us is None else self.median_us * self.call.count


@dataclass(frozen=True)
class Fill:
    """How an input's values are made."""
    kind: str      # one of tensors.FILLS: normal | randint | outside | bool | nonzero | sorted | offsets
    high: int = 0  # randint: values in [0, high); outside: in [high, 2 high); nonzero: how many;
                   # offsets: the largest
    why: str = ""

    @property
    def note(self) -> str:
        text = {"normal": "normal", "randint": f"randint[0,{self.high})",
                "outside": f"randint[{self.high},{2 * max(self.high, 1)})", "bool": "random bool",
                "nonzero": f"exactly {self.high} nonzero", "sorted": "sorted normal",
                "offsets": f"sorted offsets from 0 up to {self.high}"}[self.kind]
        return f"{text} ({self.why})" if self.why else text


# ---------------------------------------------------------------- the file's calls

def distinct_calls(srcs: List[Source]) -> List[Call]:
    """The files' distinct calls, most called first. Signatures that differ
    only in phase or graph are one call: the replay would be the same."""
    calls: Dict[Tuple[str, str, str, str], Call] = {}
    for src in srcs:
        for sig in src.signatures.values():
            key = (sig.operation, json.dumps(sig.inputs), json.dumps(sig.args), json.dumps(sig.error))
            c = calls.get(key)
            if c is None:
                calls[key] = Call(sig.operation, sig.inputs, sig.args, sig.outputs, sig.error,
                                  sig.count, sig.incomplete)
            else:
                c.count += sig.count
    return sorted(calls.values(), key=lambda c: -c.count)


def tensor_specs(value: object):
    """The recorded tensors in an input (a list's too)."""
    if isinstance(value, dict):
        yield value
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict):
                yield v


def _contiguous_strides(shape: List[int]) -> List[int]:
    out, n = [], 1
    for s in reversed(shape):
        out.append(n)
        n *= max(s, 1)
    return out[::-1]


def _is_contiguous(shape: List[int], stride: List[int]) -> bool:
    return all(st == c for sz, st, c in zip(shape, stride, _contiguous_strides(shape)) if sz != 1)


def _is_view(spec: dict) -> bool:
    """A tensor that does not own its storage densely from its start (offset,
    gaps or overlap): a view of something else."""
    if spec.get("offset"):
        return True
    if 0 in spec["shape"]:
        return False
    expected = 1
    for size, st in sorted(((n, s) for n, s in zip(spec["shape"], spec.get("stride") or []) if n != 1),
                           key=lambda p: p[1]):
        if st != expected:
            return True
        expected *= size
    return False


def tensor_text(spec: object) -> str:
    """[4, 8] float32, with strides when not contiguous and the offset when not 0."""
    if isinstance(spec, list):
        return "[" + ", ".join(tensor_text(s) for s in spec) + "]"
    if not isinstance(spec, dict):
        return format_value(spec)
    text = f"{list(spec.get('shape', []))} {short_dtype(spec.get('dtype'))}"
    stride = spec.get("stride")
    if stride is not None and not _is_contiguous(spec["shape"], stride):
        text += f" stride {stride}"
    if spec.get("offset"):
        text += f" offset {spec['offset']}"
    return text


def inputs_text(call: Call) -> str:
    return ", ".join(f"{k}={tensor_text(v)}" for k, v in call.inputs.items()) or "(no tensor inputs)"


def inputs_key(call: Call) -> str:
    """The recorded inputs as JSON without devices: the CSV's exact key, the
    same for replays of one file on two devices."""
    def strip(v: object) -> object:
        if isinstance(v, dict):
            return {k: x for k, x in v.items() if k != "device"}
        return [strip(x) for x in v] if isinstance(v, list) else v
    return json.dumps({k: strip(v) for k, v in call.inputs.items()})


def args_text(call: Call) -> str:
    return ", ".join(f"{k}={v}" for k, v in (call.args or {}).items())


def signature_text(call: Call) -> str:
    """operation  inputs  [args]: a call on one line (the table, --compare)."""
    a = args_text(call)
    return f"{call.operation}  {inputs_text(call)}" + (f"  [{a}]" if a else "")


# ---------------------------------------------------------------- can it be replayed?

def split_operation(operation: str) -> Tuple[str, str, str]:
    """(namespace, name, overload) of a dotted operator name, each an
    identifier, or NotReplayable."""
    parts = operation.split(".")
    if len(parts) != 3 or not all(p.isidentifier() for p in parts):
        raise NotReplayable(f"{operation!r} is not an operator overload name (namespace.name.overload)")
    return parts[0], parts[1], parts[2]


# A string argument by one of these names points outside memory (a file, a
# folder): a call that takes one is never run again from a record, which is
# untrusted data (aten.from_file with shared=True creates the file it names)
OUTSIDE_MEMORY = re.compile(r"file|path|dir", re.IGNORECASE)


def resolve(operation: str):
    """torch.ops' overload for "aten.mm.default", or NotReplayable (not
    loaded here, or it reaches outside memory)."""
    import torch
    ns, name, overload = split_operation(operation)
    try:
        op = getattr(getattr(getattr(torch.ops, ns), name), overload)
    except (AttributeError, RuntimeError):
        raise NotReplayable(f"operator not loaded in this process ({ns}.{name}: --import the module "
                            "that registers it)") from None
    for arg in op._schema.arguments:
        if str(arg.type) in ("str", "Optional[str]", "str?") and OUTSIDE_MEMORY.search(arg.name):
            raise NotReplayable(f"it reaches outside memory ({arg.name}): a record is data, and "
                                "no call it names that could touch a file is run again")
    return op


def first_line(text: str, limit: int = 160) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[:limit - 3] + "..."


def check(call: Call):
    """The operator to call, or NotReplayable with the reason."""
    if call.error is not None:
        e = call.error
        raise NotReplayable(f"raised when recorded ({e.get('error_type')}: "
                            f"{first_line(str(e.get('error_message', '')))}): `sgl-shapeprof repro` "
                            "writes a script that reproduces it")
    if call.incomplete:
        raise NotReplayable("cut by a crash while it ran (incomplete record): `sgl-shapeprof repro` "
                            "writes a script that runs it again")
    ns, name, _ = split_operation(call.operation)
    if ns in COLLECTIVE_NAMESPACES:
        raise NotReplayable("collective: needs the process group it ran in")
    specs = [s for v in call.inputs.values() for s in tensor_specs(v)]
    if call.args is None and not any("stride" in s for s in specs):  # files from before "args": {}
        raise NotReplayable("no recorded arguments (record with --args)")
    base = name.rstrip("_")
    if base in RANDOM_OPS or (base in DROPOUT_OPS and (call.args or {}).get("train") is not False):
        raise NotReplayable("random op: its work depends on a generator's state")
    for k, v in (call.args or {}).items():
        if isinstance(v, dict) and "unsupported" in v:
            raise NotReplayable(f"argument {k} is a {v['unsupported']}, which records do not hold")
    for k, v in call.inputs.items():
        if any("stride" not in s for s in tensor_specs(v)):
            raise NotReplayable(f"input {k} is not a strided tensor (its layout is not recorded)")
    op = resolve(call.operation)
    unknown = (set(call.inputs) | set(call.args or {})) - {a.name for a in op._schema.arguments}
    if unknown:
        raise NotReplayable(f"this torch's {call.operation} has no argument {', '.join(sorted(unknown))} "
                            "(recorded with another version?)")
    for arg in op._schema.arguments:
        if "Generator" in str(arg.type):
            raise NotReplayable("random op: its work depends on a generator's state")
        if arg.alias_info is not None and arg.alias_info.is_write:
            for spec in tensor_specs(call.inputs.get(arg.name)):
                if _is_view(spec):
                    raise NotReplayable(f"in-place on a view ({arg.name}): what else shares "
                                        "its memory is not recorded")
    return op


# ---------------------------------------------------------------- making the inputs

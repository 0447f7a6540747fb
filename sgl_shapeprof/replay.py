"""`sgl-shapeprof replay`: run each distinct recorded call again and time it.

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

import csv
import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from .scan import Source, format_value, short_dtype

WARMUP = 3
MIN_ITERATIONS = 10
MAX_ITERATIONS = 1000
TARGET_NS = 10_000_000    # timed iterations aim at 10 ms per call (between the two bounds)
MAX_COPIES = 32           # input sets a call's runs rotate among, at most
ALIGN_BYTES = 4096        # a storage offset is kept modulo this: the alignment is what a
                          # kernel sees, and a slice of a huge pool would need all of it
SMALL_INT_HIGH = 16       # integer inputs of calls without floating-point tensors: [0, 16)

# Operators whose results come from a random generator (dropout only while training).
RANDOM_OPS = {
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
    "bernoulli", "multinomial", "normal", "uniform", "exponential", "geometric", "cauchy",
    "log_normal", "random", "poisson", "binomial", "rrelu", "rrelu_with_noise",
    "_standard_gamma", "_sample_dirichlet", "_fused_dropout",
}
DROPOUT_OPS = {"dropout", "native_dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"}
COLLECTIVE_NAMESPACES = {"c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd"}

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

    @property
    def total_us(self) -> Optional[float]:
        return None if self.median_us is None else self.median_us * self.call.count


@dataclass(frozen=True)
class Fill:
    """How an input's values are made."""
    kind: str      # normal | randint | bool | nonzero | sorted | offsets
    high: int = 0  # randint: values in [0, high); nonzero: how many; offsets: the largest
    why: str = ""

    @property
    def note(self) -> str:
        text = {"normal": "normal", "randint": f"randint[0,{self.high})", "bool": "random bool",
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


def _tensor_specs(value: object):
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


# ---------------------------------------------------------------- can it be replayed?

def _split(operation: str) -> Tuple[str, str, str]:
    parts = operation.split(".")
    if len(parts) != 3:
        raise NotReplayable(f"{operation!r} is not an operator overload name (namespace.name.overload)")
    return parts[0], parts[1], parts[2]


def resolve(operation: str):
    """torch.ops' overload for "aten.mm.default", or NotReplayable."""
    import torch
    ns, name, overload = _split(operation)
    try:
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    except (AttributeError, RuntimeError):
        raise NotReplayable(f"operator not loaded in this process ({ns}.{name}: --import the module "
                            "that registers it)") from None


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[:limit - 3] + "..."


def check(call: Call):
    """The operator to call, or NotReplayable with the reason."""
    if call.error is not None:
        e = call.error
        raise NotReplayable(f"raised when recorded ({e.get('error_type')}: "
                            f"{_first_line(str(e.get('error_message', '')))})")
    if call.incomplete:
        raise NotReplayable("cut by a crash while it ran (incomplete record)")
    ns, name, _ = _split(call.operation)
    if ns in COLLECTIVE_NAMESPACES:
        raise NotReplayable("collective: needs the process group it ran in")
    specs = [s for v in call.inputs.values() for s in _tensor_specs(v)]
    if call.args is None and not any("stride" in s for s in specs):  # files from before "args": {}
        raise NotReplayable("no recorded arguments (record with --args)")
    base = name.rstrip("_")
    if base in RANDOM_OPS or (base in DROPOUT_OPS and (call.args or {}).get("train") is not False):
        raise NotReplayable("random op: its work depends on a generator's state")
    for k, v in (call.args or {}).items():
        if isinstance(v, dict) and "unsupported" in v:
            raise NotReplayable(f"argument {k} is a {v['unsupported']}, which records do not hold")
    for k, v in call.inputs.items():
        if any("stride" not in s for s in _tensor_specs(v)):
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
            for spec in _tensor_specs(call.inputs.get(arg.name)):
                if _is_view(spec):
                    raise NotReplayable(f"in-place on a view ({arg.name}): what else shares "
                                        "its memory is not recorded")
    return op


# ---------------------------------------------------------------- making the inputs

def _value_rules(name: str, call: Call) -> Dict[str, Fill]:
    """Inputs whose values the operator reads as positions, counts or order,
    by input name ("indices[1]" for a list's element): valid for the
    recorded shapes, so that no replay reads out of range."""
    ins, a = call.inputs, call.args or {}

    def shape(n: str) -> Optional[List[int]]:
        v = ins.get(n)
        return v["shape"] if isinstance(v, dict) else None

    def size(n: str, dim: Optional[int]) -> Optional[int]:
        """Input n's size along dim (all its elements when dim is None)."""
        s = shape(n)
        if s is None:
            return None
        if dim is None or not s:
            return math.prod(s)
        return s[dim] if isinstance(dim, int) and -len(s) <= dim < len(s) else None

    rules: Dict[str, Fill] = {}

    def below(n: str, high: Optional[int], why: str) -> None:
        if high is not None and n in ins:
            rules[n] = Fill("randint", max(high, 1), why)

    out = call.outputs.get("shape") if isinstance(call.outputs, dict) else None
    if name == "embedding":
        below("indices", size("weight", 0), "rows of weight")
    elif name == "embedding_bag":
        below("indices", size("weight", 0), "rows of weight")
        if "offsets" in ins and len(shape("indices") or []) == 1:
            rules["offsets"] = Fill("offsets", size("indices", None) or 0, "bags of indices")
    elif name in ALONG_DIM_OPS:
        dim = a.get("dim")
        for n in ("index", "indices"):
            below(n, size("self", dim), f"self's dim {dim}" if dim is not None else "elements of self")
    elif name == "take":
        below("index", size("self", None), "elements of self")
    elif name in ADVANCED_INDEX_OPS and shape("self") is not None:
        reads = name in ("index", "unsafe_index")  # else it writes values into self
        rules.update(_index_rules(shape("self"), ins.get("indices"), out if reads else None,
                                  None if reads else shape("values")))
    elif name in ("nonzero", "argwhere") and out:
        rules["self"] = Fill("nonzero", out[0], "as many as recorded")
    elif name in ("masked_select", "masked_scatter") and shape("mask") is not None:
        # every element of a mask shaped like the call: its true count is known
        full = math.prod(shape("mask")) >= max(size("self", None) or 0, 1)
        want = out and math.prod(out) if name == "masked_select" else size("source", None)
        if full and want is not None:
            rules["mask"] = Fill("nonzero", min(want, math.prod(shape("mask"))), "as many as recorded")
    elif name == "one_hot":
        n = a.get("num_classes")
        below("self", n if isinstance(n, int) and n > 0 else (out[-1] if out else None), "classes")
    elif name in LOSS_TARGET_OPS:
        s = shape("self") or []
        below("target", s[1] if len(s) >= 2 else (s[0] if s else None), "classes of self")
    elif name == "searchsorted":
        rules["sorted_sequence"] = Fill("sorted")
    elif name == "bucketize" and "boundaries" in ins:
        rules["boundaries"] = Fill("sorted")
    return rules


def _index_rules(self_shape: List[int], indices: object, out: Optional[List[int]],
                 values: Optional[List[int]]) -> Dict[str, Fill]:
    """self[indices]: an integer index in bounds of the dim it indexes; a
    mask, which covers as many dims as it has, with the recorded number of
    true elements when that can be told (one mask, no other index tensor)."""
    if not isinstance(indices, list):
        return {}
    entries = [e if isinstance(e, dict) else None for e in indices]
    masks = [i for i, e in enumerate(entries) if e and e["dtype"] in ("torch.bool", "torch.uint8")]
    lone = len(masks) == 1 and sum(e is not None for e in entries) == 1
    rules: Dict[str, Fill] = {}
    pos = 0
    for i, e in enumerate(entries):
        if e is None:
            pos += 1
        elif i in masks:
            m = len(e["shape"])
            count = None
            if lone and out is not None and pos < len(out):       # index: [..., nnz, rest]
                count = out[pos]
            elif lone and values and len(values) == 1 + len(self_shape) - pos - m:  # index_put
                count = values[0]
            rules[f"indices[{i}]"] = (Fill("nonzero", count, "as many as recorded") if count is not None
                                      else Fill("bool"))
            pos += m
        else:
            high = self_shape[pos] if pos < len(self_shape) else 1
            rules[f"indices[{i}]"] = Fill("randint", max(high, 1), f"self's dim {pos}")
            pos += 1
    return rules


def _dtype(name: str):
    import torch
    d = getattr(torch, name[6:], None) if name.startswith("torch.") else None
    if not isinstance(d, torch.dtype):
        raise NotReplayable(f"dtype {name} is not in this torch ({torch.__version__})")
    return d


def _default_fill(dtype, integers: Fill) -> Fill:
    import torch
    if dtype == torch.bool:
        return Fill("bool")
    if dtype.is_floating_point or dtype.is_complex:
        return Fill("normal")
    return integers


def _storage(spec: dict) -> Tuple[int, int]:
    """(storage elements, offset) a tensor of this layout needs."""
    shape, stride = spec["shape"], spec["stride"]
    offset = int(spec.get("offset") or 0) % max(1, ALIGN_BYTES // _dtype(spec["dtype"]).itemsize)
    if any(n == 0 for n in shape):
        return offset, offset
    return offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride)), offset


def _values(fill: Fill, n: int, dtype, device):
    """n values for a 1-D storage."""
    import torch
    if fill.kind in ("normal", "sorted"):
        draw = dtype if dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) or \
            dtype.is_complex else torch.float32  # float8 and others: no randn of their own
        return torch.randn(n, dtype=draw, device=device).to(dtype)
    if fill.kind == "bool":
        return (torch.rand(n, device=device) < 0.5).to(dtype)
    if fill.kind == "randint":
        high = fill.high
        if not dtype.is_floating_point and dtype != torch.bool:
            high = min(high, torch.iinfo(dtype).max + 1)
        return torch.randint(0, high, (n,), device=device).to(dtype)
    return torch.zeros(n, dtype=dtype, device=device)  # nonzero, offsets: set on the view


def _make_tensor(spec: dict, fill: Fill, device: str):
    import torch
    dtype = _dtype(spec["dtype"])
    n, offset = _storage(spec)
    t = _values(fill, n, dtype, device).as_strided(spec["shape"], spec["stride"], offset)
    if fill.kind == "nonzero":
        flat = torch.zeros(t.numel(), dtype=dtype, device=device)
        flat[torch.randperm(t.numel(), device=device)[:fill.high]] = 1
        t.copy_(flat.view(t.shape))
    elif fill.kind == "sorted" and t.dim():
        t.copy_(t.sort(-1).values)
    elif fill.kind == "offsets":
        t.copy_(torch.randint(0, fill.high + 1, t.shape, device=device).sort().values)
        t[:1] = 0
    return t


def _device_of(recorded: str, target: Optional[str]) -> str:
    import torch
    dev = torch.device(target or recorded)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise NotReplayable(f"recorded on {recorded}; this process has no CUDA "
                                "(--device cpu replays it here)")
        if (dev.index or 0) >= torch.cuda.device_count():
            raise NotReplayable(f"no device {dev} here (--device cuda:0 replays it there)")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return str(dev)


def _arg_value(value: object, typ: str, name: str, target: Optional[str]):
    """A recorded argument as the operator takes it (FORMAT.md spells them)."""
    import torch
    if isinstance(value, dict) and set(value) == {"real", "imag"}:
        return complex(float(value["real"]), float(value["imag"]))
    if isinstance(value, list):
        return [_arg_value(v, typ, name, target) for v in value]
    if isinstance(value, str):
        if value in ("inf", "-inf", "nan") and any(t in typ for t in ("float", "number", "Scalar")):
            return float(value)
        if any(t in typ for t in ("ScalarType", "Layout", "MemoryFormat")):
            v = getattr(torch, value[6:], None) if value.startswith("torch.") else None
            if v is None:
                raise NotReplayable(f"argument {name}={value} is not in this torch ({torch.__version__})")
            return v
        if "Device" in typ:
            return torch.device(_device_of(value, target))
    return value


@dataclass
class Built:
    """A call's arguments, ready: op(*args, **kwargs)."""
    args: list
    kwargs: dict
    synthesised: Dict[str, str]
    mutated: List[tuple]   # (tensor the op writes, its first values), put back before each run
    cuda: Optional[str]    # the CUDA device it runs on, if any
    nbytes: int            # its input tensors' storage


def build(op, call: Call, target: Optional[str] = None, max_bytes: Optional[int] = None) -> Built:
    """Tensors and arguments for one replay of call (on target, else where recorded)."""
    import torch
    name = call.operation.split(".")[1].strip("_")  # _embedding_bag, index_put_: their families
    rules = _value_rules(name, call)
    specs = [s for v in call.inputs.values() for s in _tensor_specs(v)]
    need = sum(_storage(s)[0] * _dtype(s["dtype"]).itemsize for s in specs)
    # a GPU says when its memory runs out; the host may meet the OOM killer instead
    on_cpu = sum(_storage(s)[0] * _dtype(s["dtype"]).itemsize for s in specs
                 if _device_of(s.get("device", "cpu"), target) == "cpu")
    if max_bytes is not None and on_cpu > max_bytes:
        raise NotReplayable(f"its inputs need {on_cpu / 2**30:.1f} GiB (--max-memory "
                            f"{max_bytes / 2**30:.1f})")
    # other integer inputs: valid indices into any dim of the floating-point inputs
    float_dims = [n for s in specs if _dtype(s["dtype"]).is_floating_point for n in s["shape"] if n > 0]
    integers = (Fill("randint", min(float_dims), "smallest dim of the float inputs") if float_dims
                else Fill("randint", SMALL_INT_HIGH, "no float inputs"))
    b = Built([], {}, {}, [], None, need)

    def tensor(spec: dict, where: str):
        fill = rules.get(where) or _default_fill(_dtype(spec["dtype"]), integers)
        if fill.kind != "normal":
            b.synthesised[where] = fill.note
        t = _make_tensor(spec, fill, _device_of(spec.get("device", "cpu"), target))
        if t.is_cuda:
            b.cuda = str(t.device)
        return t

    skipped = False  # after an argument left to its default, the rest go by name
    for arg in op._schema.arguments:
        typ = str(getattr(arg, "real_type", arg.type))
        if arg.name in call.inputs:
            v = call.inputs[arg.name]
            value = ([tensor(s, f"{arg.name}[{i}]") if isinstance(s, dict) else None for i, s in enumerate(v)]
                     if isinstance(v, list) else tensor(v, arg.name))
            if arg.alias_info is not None and arg.alias_info.is_write and not arg.is_out:
                b.mutated += [(t, t.clone()) for t in (value if isinstance(value, list) else [value])
                              if isinstance(t, torch.Tensor)]
        elif call.args is not None and arg.name in call.args:
            value = _arg_value(call.args[arg.name], typ, arg.name, target)
            if isinstance(value, torch.device) and value.type == "cuda":
                b.cuda = str(value)
        elif arg.has_default_value():
            skipped = True
            continue
        else:
            value = None  # an optional tensor not given
        if arg.kwarg_only or skipped:
            b.kwargs[arg.name] = value
        else:
            b.args.append(value)
    return b


# ---------------------------------------------------------------- timing

@functools.lru_cache(maxsize=None)
def rotation_bytes(device: str) -> int:
    """How many bytes of inputs a call's runs rotate among, so that each run
    finds its inputs out of the cache the last runs filled, as a model's
    operators find their weights: twice the L2 cache (a GPU's; on CPU a
    core's, at least 4 MiB; 256 MiB for a GPU that does not say)."""
    import torch
    if device.startswith("cuda"):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        return 2 * l2 if l2 else 256 << 20
    l2 = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in os.listdir(base):
            with open(f"{base}/{index}/level") as f, open(f"{base}/{index}/size") as g:
                if f.read().strip() == "2":
                    size = g.read().strip().upper()
                    l2 = int(size.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(size[-1:], 0)
    except (OSError, ValueError):
        pass
    return max(2 * l2, 4 << 20)


def measure(run: Callable[[int], object], prepare: Callable[[int], None], cuda: Optional[str],
            warmup: int = WARMUP, iterations: Optional[int] = None) -> Tuple[List[float], object]:
    """Per-call times of run(i) in microseconds, and the last call's result.
    prepare(i) runs before each, untimed. Warm-up runs first (the last one,
    synchronised, sizes the timed block); CUDA calls are timed with events,
    synchronised only after the timed block."""
    import torch
    sync = (lambda: torch.cuda.synchronize(cuda)) if cuda else (lambda: None)
    out = None
    est = 1
    for i in range(max(warmup, 1)):
        prepare(i)
        sync()
        t0 = time.perf_counter_ns()
        out = run(i)
        sync()
        est = max(time.perf_counter_ns() - t0, 1)
    n = iterations or min(max(math.ceil(TARGET_NS / est), MIN_ITERATIONS), MAX_ITERATIONS)
    if cuda:
        with torch.cuda.device(cuda):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            for i, (s, e) in enumerate(zip(starts, ends)):
                prepare(i)
                s.record()
                out = run(i)
                e.record()
            sync()
            return sorted(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)), out
    samples = []
    for i in range(n):
        prepare(i)
        t0 = time.perf_counter_ns()
        out = run(i)
        samples.append((time.perf_counter_ns() - t0) / 1000.0)
    return sorted(samples), out


def _described(value: object) -> object:
    """A result as records spell outputs: shape and dtype per tensor."""
    import torch
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, (list, tuple)):
        return [_described(v) for v in value]
    return None


def _shape_dtype(value: object) -> object:
    if isinstance(value, dict):
        return {"shape": list(value.get("shape", [])), "dtype": value.get("dtype")}
    if isinstance(value, list):
        return [_shape_dtype(v) for v in value]
    return None


def _has_tensor(value: object) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and any(map(_has_tensor, value)))


def output_mismatch(recorded: object, result: object) -> Optional[str]:
    """None when the replay's outputs have the recorded shapes and dtypes."""
    got = _described(result)
    got = got if _has_tensor(got) else None
    want = _shape_dtype(recorded)
    return None if got == want else f"replayed {format_value(got)}, recorded {format_value(want)}"


def _quantile(s: List[float], q: float) -> float:
    return s[round(q * (len(s) - 1))]


def replay_call(call: Call, target: Optional[str] = None, warmup: int = WARMUP,
                iterations: Optional[int] = None, max_bytes: Optional[int] = None,
                warm_cache: bool = False) -> Replayed:
    """One call, replayed and timed, or the reason it was not; never raises.
    Its runs rotate among copies of its inputs (rotation_bytes) unless
    warm_cache: then one set stays cached from run to run."""
    import torch
    r = Replayed(call)
    try:
        op = check(call)
        torch.manual_seed(0)
        with torch.inference_mode():
            b = build(op, call, target, max_bytes)
            r.synthesised = b.synthesised
            dev = b.cuda or "cpu"
            n = 1 if warm_cache or not b.nbytes else min(MAX_COPIES, -(-rotation_bytes(dev) // b.nbytes))
            copies = [b] + [build(op, call, target) for _ in range(n - 1)]
            runs = [functools.partial(op, *c.args, **c.kwargs) for c in copies]

            def prepare(i: int) -> None:
                for t, first in copies[i % n].mutated:  # in-place ops start from the same values
                    t.copy_(first)
            samples, out = measure(lambda i: runs[i % n](), prepare, b.cuda, warmup, iterations)
            r.copies = n
        r.output_mismatch = output_mismatch(call.outputs, out)
        r.median_us = _quantile(samples, 0.5)
        r.p10_us, r.p90_us = _quantile(samples, 0.1), _quantile(samples, 0.9)
        r.iterations = len(samples)
        r.device = dev
    except NotReplayable as e:
        r.reason = str(e)
    except Exception as e:  # the op's own failure on these inputs: said, and the others go on
        r.reason = f"replay raised {type(e).__name__}: {_first_line(str(e))}"
    return r


def replay(calls: List[Call], target: Optional[str] = None, warmup: int = WARMUP,
           iterations: Optional[int] = None, max_bytes: Optional[int] = None, warm_cache: bool = False,
           progress: Optional[Callable[[int, int, str], None]] = None) -> List[Replayed]:
    """Every call replayed (or its reason); the slowest in total first, then the others."""
    out = []
    for i, call in enumerate(calls):
        if progress is not None:
            progress(i, len(calls), call.operation)
        out.append(replay_call(call, target, warmup, iterations, max_bytes, warm_cache))
    if progress is not None:
        progress(len(calls), len(calls), "")
    return sorted(out, key=lambda r: (r.median_us is None, -(r.total_us or 0), -r.call.count))


# ---------------------------------------------------------------- output

FIELDS = ["operation", "inputs", "args", "count", "median_us", "p10_us", "p90_us", "total_us",
          "iterations", "device", "output_check", "synthesised", "reason"]


def _notes(r: Replayed) -> str:
    notes = [f"{k}: {v}" for k, v in r.synthesised.items()]
    if r.output_mismatch:
        notes.append("OUTPUT MISMATCH: " + r.output_mismatch)
    return "; ".join(notes)


def as_json(r: Replayed) -> dict:
    d = {"operation": r.call.operation, "inputs": r.call.inputs, "args": r.call.args,
         "count": r.call.count, "median_us": r.median_us, "p10_us": r.p10_us, "p90_us": r.p90_us,
         "total_us": r.total_us, "iterations": r.iterations, "input_copies": r.copies,
         "device": r.device or None,
         "outputs_match": None if r.reason else r.output_mismatch is None,
         "output_mismatch": r.output_mismatch, "synthesised": r.synthesised}
    if r.reason is not None:
        d["reason"] = r.reason
    return d


def _us(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.3f}"


def write_csv(results: List[Replayed], f) -> None:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(FIELDS)
    for r in results:
        check_text = ("" if r.reason else
                      "ok" if r.output_mismatch is None else "mismatch: " + r.output_mismatch)
        w.writerow([r.call.operation, inputs_key(r.call),
                    json.dumps(r.call.args) if r.call.args is not None else "", r.call.count,
                    _us(r.median_us), _us(r.p10_us), _us(r.p90_us), _us(r.total_us), r.iterations,
                    r.device, check_text, "; ".join(f"{k}: {v}" for k, v in r.synthesised.items()),
                    r.reason or ""])


def _signature_text(call: Call) -> str:
    a = args_text(call)
    return f"{call.operation}  {inputs_text(call)}" + (f"  [{a}]" if a else "")


def header(paths: List[str], results: List[Replayed], warmup: int, iterations: Optional[int],
           warm_cache: bool = False) -> str:
    import torch
    done = [r for r in results if r.reason is None]
    devices = sorted({r.device for r in done})
    its = (f"{iterations} timed iterations" if iterations else
           f"{MIN_ITERATIONS}-{MAX_ITERATIONS} timed iterations (~{TARGET_NS / 1e6:g} ms) per call")
    caches = ("one set of inputs per call, cached from run to run (--warm-cache)" if warm_cache else
              "each call's runs rotate among copies of its inputs, together 2x L2 (" + ", ".join(
                  f"{rotation_bytes(d) >> 20} MiB on {d}" for d in devices)
              + f") or {MAX_COPIES} copies")
    n_calls = sum(r.call.count for r in results)
    total = sum(r.total_us or 0 for r in done)
    threads = torch.get_num_threads()
    how = (f"on {', '.join(devices)}: torch {torch.__version__}, {threads} thread{'s' if threads != 1 else ''}, "
           f"{warmup} warm-up then {its}; {caches}; floats ~ N(0,1)" if done else
           f"(torch {torch.__version__}): nothing could be replayed")
    return (f"replay of {', '.join(paths)} {how}\n"
            f"{len(results)} distinct calls standing for {n_calls:,} calls: {len(done)} replayed "
            f"({sum(r.call.count for r in done):,} calls), {len(results) - len(done)} not\n"
            f"operator time of the replayed calls: {total / 1000:.3f} ms (median per call x count)\n")


def print_table(paths: List[str], results: List[Replayed], out, warmup: int = WARMUP,
                iterations: Optional[int] = None, warm_cache: bool = False) -> None:
    w = out.write
    w(header(paths, results, warmup, iterations, warm_cache))
    done = [r for r in results if r.reason is None]
    total = sum(r.total_us or 0 for r in done) or 1.0
    if done:
        w(f"\n{'total ms':>10} {'share':>6} {'count':>9} {'median us':>10} {'p10-p90 us':>19}  "
          "operation  inputs  [args]  -- how inputs were made\n")
        for r in done:
            notes = _notes(r)
            spread = f"{r.p10_us:.2f}-{r.p90_us:.2f}"
            w(f"{r.total_us / 1000:>10.3f} {100 * r.total_us / total:>5.1f}% {r.call.count:>9,} "
              f"{r.median_us:>10.2f} {spread:>19}  {_signature_text(r.call)}"
              + (f"  -- {notes}" if notes else "") + "\n")
    missing = [r for r in results if r.reason is not None]
    if missing:
        w(f"\nNot replayed ({len(missing)} distinct calls, {sum(r.call.count for r in missing):,} calls):\n")
        for r in missing:
            w(f"{r.call.count:>9,}  {_signature_text(r.call)}  -- {r.reason}\n")
    mism = sum(r.output_mismatch is not None for r in done)
    if mism:
        w(f"\n{mism} replayed calls gave outputs of other shapes or dtypes than recorded "
          "(OUTPUT MISMATCH above): their work differs from the recorded calls'\n")


# ---------------------------------------------------------------- --compare

def read_csv(path: str) -> Dict[Tuple[str, str, str], dict]:
    """A replay CSV's rows by (operation, inputs, args); ValueError when it is not one."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise ValueError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    if not rows or not {"operation", "inputs", "args", "median_us", "count"} <= set(rows[0]):
        raise ValueError(f"{path} is not a replay CSV (sgl-shapeprof replay FILE --csv {path})")
    try:
        for r in rows:
            json.loads(r["inputs"])
            json.loads(r["args"] or "null")
    except ValueError:
        raise ValueError(f"{path} is not a replay CSV: its inputs/args are not JSON") from None
    return {(r["operation"], r["inputs"], r["args"]): r for r in rows}


def compare(a_path: str, b_path: str, out, top: Optional[int] = None) -> None:
    """Per-signature speed-up of B over A (A's median / B's), A's costliest first."""
    a, b = read_csv(a_path), read_csv(b_path)
    w = out.write

    def dev(rows: Dict) -> str:
        return ", ".join(sorted({r["device"] for r in rows.values() if r.get("device")})) or "-"
    w(f"A: {a_path} ({dev(a)})\nB: {b_path} ({dev(b)})\n")
    both = [(k, ra, b[k]) for k, ra in a.items() if k in b and ra["median_us"] and b[k]["median_us"]]
    both.sort(key=lambda x: -float(x[1]["total_us"] or 0))
    ta = sum(float(ra["total_us"]) for _, ra, _ in both)
    tb = sum(float(rb["median_us"]) * int(ra["count"]) for _, ra, rb in both)
    if both:
        w(f"\n{'A us':>10} {'B us':>10} {'speed-up':>9} {'count':>9} {'A total ms':>11} {'B total ms':>11}"
          "  operation  inputs  [args]\n")
        for (op, inputs, args), ra, rb in both[:top or None]:
            ma, mb, n = float(ra["median_us"]), float(rb["median_us"]), int(ra["count"])
            call = Call(op, json.loads(inputs), json.loads(args) if args else None, None, None, n)
            w(f"{ma:>10.2f} {mb:>10.2f} {ma / mb:>8.2f}x {n:>9,} {ma * n / 1000:>11.3f} "
              f"{mb * n / 1000:>11.3f}  {_signature_text(call)}\n")
        if top and len(both) > top:
            w(f"... {len(both) - top} more (--top)\n")
    w(f"\n{len(both)} calls replayed in both: A {ta / 1000:.3f} ms, B {tb / 1000:.3f} ms"
      + (f", speed-up {ta / tb:.2f}x\n" if tb else "\n"))
    only_a, only_b = sum(k not in b for k in a), sum(k not in a for k in b)
    unreplayed = sum(k in b and not (a[k]["median_us"] and b[k]["median_us"]) for k in a)
    if only_a or only_b or unreplayed:
        w(f"only in A: {only_a}, only in B: {only_b}, not replayed in A or B: {unreplayed}\n")


# ---------------------------------------------------------------- the command

def default_max_bytes() -> Optional[int]:
    """Half of this machine's memory: more would risk the OOM killer."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return None


def replay_command(srcs: List[Source], args, progress=None) -> int:
    import torch
    calls = distinct_calls(srcs)
    if args.top:
        calls = calls[:args.top]
    if not calls:
        print("no calls to replay in " + ", ".join(s.path for s in srcs)
              + (" (check the filters)" if any(s.filtered for s in srcs) else ""), file=sys.stderr)
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    max_bytes = int(args.max_memory * 2**30) if args.max_memory else default_max_bytes()
    outputs = [(path, kind) for path, kind in ((args.csv, "csv"), (args.json, "json")) if path]
    for path, _ in outputs:  # said before the replay runs, not after
        if path != "-" and os.path.exists(path) and not args.force:
            return _fail(f"{path} exists; not overwritten (--force to replace it)")
        if path != "-" and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            return _fail(f"cannot write {path}: its directory does not exist")
    if [p for p, _ in outputs].count("-") > 1:
        return _fail("--csv and --json cannot both go to stdout: give one a FILE")
    results = replay(calls, args.device, args.warmup, args.iterations, max_bytes, args.warm_cache,
                     progress)
    for path, kind in outputs:
        try:
            f = sys.stdout if path == "-" else open(path, "w", newline="", encoding="utf-8")
        except OSError as e:
            return _fail(f"cannot write {path}: {e.strerror}")
        if kind == "csv":
            write_csv(results, f)
        else:
            json.dump([as_json(r) for r in results], f, indent=1)
            f.write("\n")
        if f is not sys.stdout:
            f.close()
    if "-" not in (p for p, _ in outputs):
        print_table([s.path for s in srcs], results, sys.stdout, args.warmup, args.iterations,
                    args.warm_cache)
    return 0


def _fail(message: str) -> int:
    print(f"sgl-shapeprof replay: {message}", file=sys.stderr)
    return 2

"""FLOPs, bytes moved and a roofline time for every recorded signature.

FLOPs come from torch.utils.flop_counter's own formulas (the ones
FlopCounterMode uses), called with the recorded shapes; composite operators
that reach the dispatcher before decomposing (aten.linear, aten.conv2d,
aten.matmul, aten.scaled_dot_product_attention under inference_mode) are
mapped onto the formula of what they decompose to. Bytes moved are the
inputs' and outputs' sizes: a lower bound on memory traffic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..records.ledger import is_launch
from ..records.signature import Signature
from ..records.values import broadcast_shape
from .gemm import CUSTOM_GEMMS, catalogued_gemm, launch_gemm, library_gemms
from .kernel_calls import ExpertWeights, expert_weights


@dataclass(frozen=True)
class Device:
    name: str
    tflops: Dict[str, float]  # dense peak TFLOP/s by dtype class
    bandwidth: float          # TB/s

    def peak(self, dtype_class: str) -> float:
        return self.tflops.get(dtype_class) or self.tflops["fp32"]


# Dense (no sparsity) peaks from the vendors' data sheets (SXM/OAM parts);
# fp32 is the non-tensor-core rate, what a float32 matmul gets by default.
GPUS: Dict[str, Device] = {g.name.lower(): g for g in (
    Device("H100", {"fp8": 1979, "bf16": 989, "fp16": 989, "int8": 1979, "fp32": 67, "fp64": 67}, 3.35),
    Device("H200", {"fp8": 1979, "bf16": 989, "fp16": 989, "int8": 1979, "fp32": 67, "fp64": 67}, 4.8),
    Device("B200", {"fp8": 4500, "bf16": 2250, "fp16": 2250, "int8": 4500, "fp32": 80, "fp64": 40}, 8.0),
    Device("A100", {"bf16": 312, "fp16": 312, "int8": 624, "fp32": 19.5, "fp64": 19.5}, 2.039),
    Device("MI300X", {"fp8": 2615, "bf16": 1307, "fp16": 1307, "int8": 2615, "fp32": 163.4,
                      "fp64": 81.7}, 5.3),
)}


def device_for(gpu: Optional[str], peak_tflops: Optional[float], bandwidth: Optional[float]) -> Optional[Device]:
    """--gpu NAME, or --peak-tflops with --bandwidth; ValueError says what is wrong."""
    if peak_tflops is not None or bandwidth is not None:
        if gpu:
            raise ValueError("give --gpu or --peak-tflops/--bandwidth, not both")
        if peak_tflops is None or bandwidth is None or peak_tflops <= 0 or bandwidth <= 0:
            raise ValueError("--peak-tflops and --bandwidth go together, both > 0")
        return Device("custom", {"fp32": peak_tflops}, bandwidth)
    if not gpu:
        return None
    d = GPUS.get(gpu.lower())
    if d is None:
        raise ValueError(f"unknown --gpu {gpu!r}: one of {', '.join(g.name for g in GPUS.values())}, "
                         "or --peak-tflops T --bandwidth TB/s")
    return d


_ITEMSIZE: Dict[str, int] = {}


def itemsize(dtype: str) -> int:
    n = _ITEMSIZE.get(dtype)
    if n is None:
        import torch
        t = getattr(torch, dtype[6:] if dtype.startswith("torch.") else dtype, None)
        n = t.itemsize if isinstance(t, torch.dtype) else 0
        _ITEMSIZE[dtype] = n
    return n


def _tensors(v: object):
    if isinstance(v, dict) and "shape" in v:
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from _tensors(x)


def nbytes(v: object) -> int:
    return sum(math.prod(t["shape"]) * itemsize(str(t.get("dtype"))) for t in _tensors(v))


def dtype_class(sig: Signature) -> str:
    """The dtype that decides the compute peak: the widest floating input."""
    names = [str(t.get("dtype")) for v in sig.inputs.values() for t in _tensors(v)]
    for cls, keys in (("fp64", ("float64",)), ("fp32", ("float32",)), ("bf16", ("bfloat16",)),
                      ("fp16", ("float16",)), ("fp8", ("float8",)), ("int8", ("int8", "uint8"))):
        if any(any(k in n for k in keys) for n in names):
            return cls
    return "fp32"


def _shape(v: object) -> Optional[Tuple[int, ...]]:
    return tuple(v["shape"]) if isinstance(v, dict) and "shape" in v else None


def _mm(m: int, n: int, k: int) -> int:
    from torch.utils.flop_counter import mm_flop
    return int(mm_flop((m, k), (k, n)))


def _composite(op: str, ins: dict, out: object) -> Optional[int]:
    """Composite operators mapped onto the formulas of what they become."""
    from torch.utils import flop_counter as fc
    name = op.split(".")[1] if op.count(".") >= 2 else op
    if name == "linear":
        x, w = _shape(ins.get("input")), _shape(ins.get("weight"))
        if x and w and len(w) == 2:
            return _mm(math.prod(x[:-1]), w[0], w[1])
    if name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
        x, w, o = _shape(ins.get("input")), _shape(ins.get("weight")), _shape(out)
        if x and w and o:
            return int(fc.conv_flop_count(list(x), list(w), list(o), transposed=name.startswith("conv_t")))
    if name == "matmul":
        a, b = _shape(ins.get("self")), _shape(ins.get("other"))
        if a and b:
            if len(a) == 1:
                a = (1,) + a
            if len(b) == 1:
                b = b + (1,)
            batch = math.prod(broadcast_shape(a[:-2], b[:-2]))
            return batch * _mm(a[-2], b[-1], a[-1])
    if name == "scaled_dot_product_attention":
        q, k, v = (_shape(ins.get(n)) for n in ("query", "key", "value"))
        if q and k and v and len(q) == 4:
            return int(fc.sdpa_flop_count(q, k, v))
    return None


_OVERLOADS: Dict[str, object] = {}


def _overload(op: str):
    """torch.ops overload for 'aten.mm.default', or None."""
    if op in _OVERLOADS:
        return _OVERLOADS[op]
    import torch
    found = None
    parts = op.split(".")
    if len(parts) >= 3:
        try:
            found = getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), ".".join(parts[2:]))
        except (AttributeError, RuntimeError):
            found = None
    _OVERLOADS[op] = found
    return found


def flops(sig: Signature) -> Optional[int]:
    """FLOPs of one call with this signature; None where torch has no formula
    (then the operator is taken to be memory-bound: elementwise, copies...)."""
    if sig.error is not None or sig.incomplete:
        return None
    if is_launch(sig.operation):  # a kernel launch: a known GEMM, else memory-bound
        g = launch_gemm(sig)
        return g.flops if g is not None else None
    if ":" in sig.operation:  # a kernel library's call: its GEMMs (a fused MoE's two), else memory-bound
        gs = library_gemms(sig)
        return sum(g.flops for g in gs) if gs else None
    g = catalogued_gemm(sig)  # a kernel library's custom op that is a GEMM
    if g is not None:
        return g.flops
    comp = _composite(sig.operation, sig.inputs, sig.outputs)
    if comp is not None:
        return comp
    from torch.utils.flop_counter import flop_registry
    ov = _overload(sig.operation)
    if ov is None:
        return None
    f = flop_registry.get(ov.overloadpacket) or flop_registry.get(ov)
    if f is None:
        return None
    args = []
    for a in ov._schema.arguments:
        if a.kwarg_only:
            break
        v = sig.inputs.get(a.name)
        if isinstance(v, dict):
            if "shape" not in v:  # a tensor whose shape could not be read (values.readable): no count
                return None
            args.append(tuple(v["shape"]))
        elif isinstance(v, list):
            args.append([tuple(t["shape"]) if isinstance(t, dict) and "shape" in t else None for t in v])
        else:
            args.append(a.default_value if a.default_value is not None else _default(a))
    out = sig.outputs
    if isinstance(out, dict) and "shape" not in out:
        return None
    # the registered formulas take tensors or shapes alike (shape_wrapper)
    out_shape = (tuple(out["shape"]) if isinstance(out, dict)
                 else [tuple(t["shape"]) if isinstance(t, dict) and "shape" in t else None for t in out]
                 if isinstance(out, list) else None)
    try:
        return int(f(*args, out_val=out_shape))
    except Exception:  # a formula wanting an argument we do not record
        return None


def bytes_moved(sig: Signature) -> int:
    """The bytes one call reads and writes, as its tensors say: every input
    and output once; of a fused MoE's per-expert weights, only the experts
    its rows can reach (kernel_calls.ExpertWeights: min(E, tokens x top-k)
    of E), not all of them."""
    moe = expert_weights(sig)
    g = catalogued_gemm(sig) if moe is None else None
    if g is not None and g.groups:
        # a catalogued grouped GEMM (DeepGEMM's contiguous layout): B and its
        # scales are per group, M rows reach at most min(G, M) of them
        b_name = CUSTOM_GEMMS[sig.operation.rsplit(".", 1)[0]][1]
        moe = ExpertWeights((b_name,), g.groups, g.m)
    if moe is None:
        return nbytes(list(sig.inputs.values())) + nbytes(sig.outputs)
    return int(sum(nbytes(v) * moe.share(name, v) for name, v in sig.inputs.items())) + nbytes(sig.outputs)


def _default(arg) -> object:
    t = str(arg.type)
    return False if t == "bool" else None


@dataclass
class Cost:
    sig: Signature
    flops: Optional[int]   # per call
    bytes: int             # per call
    seconds: Optional[float] = None  # roofline, per call
    bound: str = ""

    @property
    def counted(self) -> bool:
        """Whether it adds to totals (costs(): a call's work is counted once)."""
        return self.bound not in NOT_COUNTED

    @property
    def total_seconds(self) -> float:
        """What it adds to a total: nothing where another record holds its work."""
        return (self.seconds or 0.0) * self.sig.count if self.counted else 0.0

    @property
    def total_flops(self) -> int:
        return (self.flops or 0) * self.sig.count if self.counted else 0


def is_view(op: str) -> bool:
    """The operator returns an alias of an input (a view): it moves no data."""
    ov = _overload(op)
    if ov is None:
        return False
    rets = ov._schema.returns
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


WITHIN = "within"  # a Cost's bound: a call made inside another recorded call (FORMAT.md, "within")
OUTER = "outer"    # a Cost's bound: a call whose calls within it stand for its work
NOT_COUNTED = (WITHIN, OUTER)


def stood_for(signatures: List[Signature], fls: List[Optional[int]]) -> set:
    """The operators whose calls within them stand for their work in totals:
    those with no FLOP formula of their own (a custom op: only its bytes are
    known) whose calls within have one (the GEMMs its kernel launched)."""
    with_formula = {s.operation for s, fl in zip(signatures, fls) if fl is not None}
    return {s.within for s, fl in zip(signatures, fls) if s.within and fl is not None} - with_formula


def costs(signatures: List[Signature], dev: Optional[Device]) -> List[Cost]:
    """Each signature's cost, each call's work counted once in the totals
    (FORMAT.md, "within"). A call made inside another recorded call (a
    custom op's kernel launching Triton GEMMs) is costed as itself for its
    row; which of the two the totals count: the outer call, by its own
    estimate, where it has a FLOP formula or nothing within it has one
    (then the inner row is bound WITHIN); else the calls within it, whose
    GEMMs its own record cannot tell (then the outer row is bound OUTER).
    The rows left out are shown, not added."""
    out = []
    fls = [flops(s) for s in signatures]
    stand = stood_for(signatures, fls)
    for s, fl in zip(signatures, fls):
        by = 0 if is_view(s.operation) else bytes_moved(s)
        c = Cost(s, fl, by)
        if dev is not None:
            t_compute = (fl or 0) / (dev.peak(dtype_class(s)) * 1e12)
            t_memory = by / (dev.bandwidth * 1e12)
            c.seconds = max(t_compute, t_memory)
            c.bound = "compute" if t_compute > t_memory else "memory"
        if s.within and s.within not in stand:
            c.bound = WITHIN
        elif s.operation in stand:
            c.bound = OUTER
        out.append(c)
    return out


def peaks_text(dev: Device) -> str:
    keys = [k for k in ("bf16", "fp8", "fp32") if k in dev.tflops]
    return ", ".join(f"{k} {dev.tflops[k]:g}" for k in keys) + " TFLOP/s"


def format_time(sec: Optional[float]) -> str:
    if sec is None:
        return "-"
    if sec >= 1:
        return f"{sec:.3g} s"
    if sec >= 1e-3:
        return f"{sec * 1e3:.3g} ms"
    if sec >= 1e-6:
        return f"{sec * 1e6:.3g} us"
    return f"{sec * 1e9:.3g} ns"


def by_op(cs: List[Cost]) -> list:
    agg: Dict[str, list] = {}
    for c in cs:
        r = agg.setdefault(c.sig.operation, [c.sig.operation, 0, 0, 0, 0.0, {}, None])
        r[1] += c.sig.count
        r[2] += (c.flops or 0) * c.sig.count
        r[3] += c.bytes * c.sig.count
        r[4] += (c.seconds or 0.0) * c.sig.count
        if c.bound:
            r[5][c.bound] = r[5].get(c.bound, 0.0) + (c.seconds or 0.0) * c.sig.count
    rows = []
    for op, n, fl, by, sec, bounds, _ in agg.values():
        bound = max(bounds, key=bounds.get) if bounds else ""
        # per-call averages so that rows read like the per-signature ones
        rows.append((op, n, fl // max(n, 1), by // max(n, 1), sec / max(n, 1) if bounds else None,
                     bound, None))
    return rows


def ranked_rows(cs: List[Cost], dev: Optional[Device], per_op: bool = False) -> list:
    """The rows `cost` shows, (operation, count, FLOPs/call, bytes/call,
    seconds/call, bound, signature): one per signature, or per operator
    (by_op: no signature), costliest first -- by estimated time on a
    device, else by FLOPs then bytes."""
    if per_op:
        rows = by_op(cs)
    else:
        rows = [(c.sig.operation, c.sig.count, c.flops, c.bytes, c.seconds, c.bound, c.sig) for c in cs]
    key = (lambda r: -(r[4] or 0) * r[1]) if dev else (lambda r: (-(r[2] or 0) * r[1], -r[3] * r[1]))
    rows.sort(key=key)
    return rows

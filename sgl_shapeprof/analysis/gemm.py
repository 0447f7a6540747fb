"""`sgl-shapeprof gemm`: every matrix multiply as M, N, K, batch, dtypes,
count and FLOPs -- the table a GEMM tuner starts from."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ..records.ledger import is_launch
from ..records.signature import Signature
from ..records.values import broadcast_shape, short_dtype
from ..integrations.registry import gemm_ops
from .kernel_calls import FLASHINFER, MASKED, expert_weights, gemms_of, positive_dims, weight_scaling

# operation name (no namespace, no overload) -> names of its (A, B) inputs
GEMM_OPS: Dict[str, Tuple[str, str]] = {
    "mm": ("self", "mat2"), "addmm": ("mat1", "mat2"), "bmm": ("self", "mat2"),
    "baddbmm": ("batch1", "batch2"), "linear": ("input", "weight"), "matmul": ("self", "other"),
    "_scaled_mm": ("self", "mat2"), "_int_mm": ("self", "mat2"),
}

# Servers' and kernel libraries' custom ops that are GEMMs, by "namespace.name":
# their A and B inputs (B as [N, K] or [K, N], told from K) and the input the
# result is written into (None: returned). Each integration's seam says its
# own, with the source it read them from (Seam.gemm_ops).
CUSTOM_GEMMS: Dict[str, Tuple[str, str, Optional[str]]] = gemm_ops()


@dataclass
class Gemm:
    operation: str
    m: int
    n: int
    k: int
    batch: int
    a_dtype: str
    b_dtype: str
    out_dtype: str
    count: int
    # per call: 2*M*N*K*batch, torch.utils.flop_counter's mm/bmm formula
    # (tests hold the two equal); not imported: torch costs this command 3 s
    flops: int
    a_shape: List[int]
    b_shape: List[int]
    b_layout: str       # "KN" (as mm's mat2) or "NK" (as linear's weight)
    phase: Optional[str]
    bias: bool = False  # a bias input (linear, addmm: 1-D; baddbmm: any)
    # the two inputs' strides, when recorded with arguments (FORMAT.md); else None
    a_stride: Optional[List[int]] = None
    b_stride: Optional[List[int]] = None
    # a grouped GEMM's weight groups (experts), its M rows split among them
    groups: Optional[int] = None
    # a fused MoE's experts (its weights') and each token's top-k: M = tokens x top-k
    experts: Optional[int] = None
    top_k: Optional[int] = None
    # how B (the weight) is scaled, from its scale tensor's shape (FP8, INT8):
    # "per-tensor", "per-channel", "block [bn, bk]"; None: no scale read
    b_scaling: Optional[str] = None
    # a timed recording's measure (FORMAT.md "time_us"): `timed` of its calls took time_ns
    time_ns: int = 0
    timed: int = 0
    # a kernels-timed recording's (FORMAT.md "Kernels"): `kernel_calls` of its calls ran kernel_ns of kernels
    kernel_ns: int = 0
    kernel_calls: int = 0
    roofline_us: Optional[float] = None  # cost's roofline for this shape, per call (with a GPU given)

    @property
    def measured(self) -> Optional[Tuple[int, int]]:
        """(ns, calls) of its best measure: its kernels' device time where
        recorded (what the GEMM cost), else its calls' wall time."""
        if self.kernel_calls:
            return self.kernel_ns, self.kernel_calls
        return (self.time_ns, self.timed) if self.timed else None

    @property
    def total_flops(self) -> int:
        return self.flops * self.count

    @property
    def us_per_call(self) -> Optional[float]:
        """Measured time per call, or None when its calls were not timed."""
        m = self.measured
        return m[0] / m[1] / 1000 if m else None

    @property
    def tflops(self) -> Optional[float]:
        """Achieved TFLOP/s over its timed calls (FLOPs per ns / 1000)."""
        m = self.measured
        return self.flops * m[1] / m[0] / 1000 if m and m[0] else None


def _t(v: object) -> Optional[dict]:
    return v if isinstance(v, dict) and "shape" in v else None


def _short(op: str) -> str:
    parts = op.split(".")
    return parts[1] if len(parts) >= 3 else op


def custom_ops(spec: List[str]) -> Dict[str, Optional[Tuple[str, str]]]:
    """--op NAME[:A,B] -> {NAME: (A, B) or None}."""
    out: Dict[str, Optional[Tuple[str, str]]] = {}
    for s in spec:
        name, _, args = s.partition(":")
        names = tuple(x.strip() for x in args.split(",")) if args else None
        if names is not None and len(names) != 2:
            raise ValueError(f"--op {s}: give NAME or NAME:A,B (the two matrix inputs' names)")
        out[name.strip()] = names  # type: ignore[assignment]
    return out


# Triton GEMM kernels whose launch records say M, N and K (FORMAT.md, "Kernel
# launches"): by the kernel's function name, its two matrix inputs and the
# arguments that hold M, N, K. SGLang's fused MoE is a grouped GEMM over its
# experts: M is the token x top-k rows it computes (padding aside), B the
# (E, N, K) weights; its block-quantized GEMMs take A (M, K) and B (N, K).
LAUNCH_GEMMS = {
    "fused_moe_kernel": ("a_ptr", "b_ptr", "num_valid_tokens", "N", "K", "c_ptr"),
    "_w8a8_block_fp8_matmul": ("A", "B", "M", "N", "K", "C"),
    "_w8a8_block_fp8_matmul_hopper": ("A", "B", "M", "N", "K", "C"),
    "_w8a8_block_fp8_matmul_unrolledx4": ("A", "B", "M", "N", "K", "C"),
    "_w8a8_block_int8_matmul": ("A", "B", "M", "N", "K", "C"),
}


def launch_gemm(sig: Signature) -> Optional[Gemm]:
    """The GEMM a kernel launch record (Triton's) is, or None."""
    spec = LAUNCH_GEMMS.get(sig.operation.rsplit(".", 1)[-1])
    if spec is None or not is_launch(sig.operation) or not sig.args:
        return None
    a, b, c = (_t(sig.inputs.get(name)) for name in (spec[0], spec[1], spec[5]))
    m, n, k = (sig.args.get(name) for name in spec[2:5])
    if a is None or b is None or not all(isinstance(v, int) and v > 0 for v in (m, n, k)):
        return None
    sb = list(b["shape"])
    layout = "NK" if sb[-2:] == [n, k] else "KN"
    moe = expert_weights(sig)  # a fused MoE launch: B holds its experts' weights
    top_k = _launch_top_k(a, c, m, sig.args.get("top_k")) if moe else None
    return Gemm(sig.operation, m, n, k, 1, short_dtype(a.get("dtype")), short_dtype(b.get("dtype")),  # type: ignore[arg-type]
                short_dtype(c.get("dtype")) if c else "", sig.count, 2 * m * n * k,  # type: ignore[operator]
                list(a["shape"]), sb, layout, sig.phase, a_stride=_stride(a), b_stride=_stride(b),
                experts=moe.experts if moe else None, top_k=top_k,
                b_scaling=weight_scaling(sig.inputs, spec[1], n, k, layout))  # type: ignore[arg-type]


def _launch_top_k(a: dict, c: Optional[dict], m: int, arg: object) -> Optional[int]:
    """The experts each token goes to, of a fused MoE launch computing m
    rows: its output's [tokens, top_k, N] (SGLang's caches, both GEMMs),
    else its top_k argument when a's rows times it are m (the down GEMM's
    argument is 1: its rows are one per token and expert already)."""
    cs, sa = positive_dims(c.get("shape")) if c else None, positive_dims(a.get("shape"))
    if cs is not None and len(cs) == 3 and cs[0] * cs[1] == m:
        return cs[1]
    rows = math.prod(sa[:-1]) if sa else 0
    return arg if isinstance(arg, int) and not isinstance(arg, bool) and arg > 0 and rows * arg == m else None


def library_gemms(sig: Signature) -> List[Gemm]:
    """The GEMMs a kernel library's API call computes (kernel_calls.py): a
    fused MoE's two, "<operation> [up]" and "[down]"."""
    out = []
    for g in gemms_of(sig):
        a, b = _t(sig.inputs.get(g.a)), _t(sig.inputs.get(g.b))
        o = sig.outputs if isinstance(sig.outputs, dict) else None
        out.append(Gemm(sig.operation + (f" [{g.part}]" if g.part else ""), g.m, g.n, g.k, g.batch,
                        short_dtype(a.get("dtype")) if a else "", short_dtype(b.get("dtype")) if b else "",
                        short_dtype(o.get("dtype")) if o else "", sig.count, 2 * g.m * g.n * g.k * g.batch,
                        list(a["shape"]) if a else [], list(b["shape"]) if b else [], "", sig.phase,
                        groups=g.groups, experts=g.experts, top_k=g.top_k,
                        b_scaling=weight_scaling(sig.inputs, g.b, g.n, g.k)))
    return out


def catalogued_gemm(sig: Signature) -> Optional[Gemm]:
    """The GEMM a catalogued custom op's call is (CUSTOM_GEMMS), or None."""
    if sig.operation.rsplit(".", 1)[0] not in CUSTOM_GEMMS:
        return None
    return gemm_of(sig, {})


def _n_told_from_k(b: list, k: int) -> Optional[Tuple[int, str]]:
    """B's two matrix dimensions, [N, K] or [K, N]: (N, its layout) by which one is K."""
    if b[1] == k:
        return b[0], "NK"
    if b[0] == k:
        return b[1], "KN"
    return None


def gemm_of(sig: Signature, custom: Dict[str, Optional[Tuple[str, str]]]) -> Optional[Gemm]:
    """The GEMM a signature is, or None (not a GEMM, or shapes that do not fit)."""
    if sig.error is not None or sig.incomplete:
        return None
    if is_launch(sig.operation) and sig.operation not in custom:
        return launch_gemm(sig)
    name = _short(sig.operation)
    names: Optional[Tuple[str, str]]
    qual = sig.operation.rsplit(".", 1)[0]  # namespace.name
    written_into = None  # the input the result goes to, for a catalogued op that returns nothing
    if sig.operation in custom or qual in custom or (name in custom and name not in GEMM_OPS):
        names = custom.get(sig.operation, custom.get(qual, custom.get(name)))
        if names is None:
            ts = [k for k, v in sig.inputs.items() if _t(v) and len(v["shape"]) >= 2]
            if len(ts) < 2:
                return None
            names = (ts[0], ts[1])
        kind = "custom"
    elif qual in CUSTOM_GEMMS:
        spec = CUSTOM_GEMMS[qual]
        a_name, b_name, written_into = spec[:3]
        layout_kind = spec[3] if len(spec) == 4 else "gemm"  # registry.GEMM_KINDS
        names, kind = (a_name, b_name), ("custom" if layout_kind == "gemm" else layout_kind)
    elif name in GEMM_OPS:
        names, kind = GEMM_OPS[name], name
    else:
        return None
    a, b = _t(sig.inputs.get(names[0])), _t(sig.inputs.get(names[1]))
    if a is None or b is None:
        return None
    sa, sb = list(a["shape"]), list(b["shape"])
    if not sa or not sb:
        return None
    batch, groups = 1, None
    if kind == "a_out":
        # N from the result: returned, or written into an input
        res = sig.inputs.get(written_into) if written_into else sig.outputs
        res = res[0] if isinstance(res, list) and res else res
        rs = res.get("shape") if isinstance(res, dict) else None
        if not isinstance(rs, list) or not rs:
            return None
        m, k, n, layout = math.prod(sa[:-1]), sa[-1], rs[-1], "NK"
        sb = [n, k]
    elif kind in ("grouped", "masked"):
        # grouped: A [M, K], B [G, N, K] or [G, K, N]; masked: A [G, M_max, K] too
        if len(sb) != 3 or len(sa) != (2 if kind == "grouped" else 3) or (kind == "masked" and sa[0] != sb[0]):
            return None
        k = sa[-1]
        told = _n_told_from_k(sb[1:], k)
        if told is None:
            return None
        n, layout = told
        if kind == "grouped":
            m, groups = sa[0], sb[0]
        else:
            batch, m = sa[0], sa[1]
    elif kind == "a_t":
        # A transposed: [K, M]; B [N, K] or [K, N], told from K
        if len(sa) != 2 or len(sb) != 2:
            return None
        k, m = sa
        told = _n_told_from_k(sb, k)
        if told is None:
            return None
        n, layout = told
    elif kind in ("linear",):
        if len(sb) != 2:
            return None
        m, k, n, layout = math.prod(sa[:-1]), sa[-1], sb[0], "NK"
    elif kind == "custom":
        k = sa[-1]
        m = math.prod(sa[:-1])
        if len(sb) == 2 and sb[0] == k:
            n, layout = sb[1], "KN"
        elif len(sb) == 2 and sb[1] == k:
            n, layout = sb[0], "NK"
        else:
            return None
    elif kind in ("bmm", "baddbmm"):
        if len(sa) != 3 or len(sb) != 3:
            return None
        batch, m, k, n, layout = sa[0], sa[1], sa[2], sb[2], "KN"
    elif kind == "matmul":
        if len(sa) == 1:
            sa = [1] + sa
        if len(sb) == 1:
            sb = sb + [1]
        batch = math.prod(broadcast_shape(tuple(sa[:-2]), tuple(sb[:-2])))
        m, k, n, layout = sa[-2], sa[-1], sb[-1], "KN"
    else:  # mm, addmm, _scaled_mm, _int_mm
        if len(sa) != 2 or len(sb) != 2:
            return None
        m, k, n, layout = sa[0], sa[1], sb[1], "KN"
    out = sig.inputs.get(written_into) if written_into else sig.outputs
    out_dtype = out.get("dtype") if isinstance(out, dict) else (
        out[0].get("dtype") if isinstance(out, list) and out and isinstance(out[0], dict) else "")
    return Gemm(sig.operation + (f" [{MASKED}]" if kind == "masked" else ""), m, n, k, batch,
                short_dtype(a.get("dtype")), short_dtype(b.get("dtype")),
                short_dtype(out_dtype), sig.count, 2 * batch * m * n * k, sa, sb, layout, sig.phase,
                bias=_t(sig.inputs.get("bias" if kind == "linear" else "self")) is not None
                and kind in ("linear", "addmm", "baddbmm"),
                a_stride=_stride(a), b_stride=_stride(b), groups=groups,
                b_scaling=weight_scaling(sig.inputs, names[1], n, k, layout))


def _stride(t: dict) -> Optional[List[int]]:
    s = t.get("stride")
    return list(s) if isinstance(s, list) and len(s) == len(t["shape"]) else None


def gemms(signatures: List[Signature], custom: Optional[Dict] = None,
          roofline: Optional[Callable[[Signature], Optional[float]]] = None) -> List[Gemm]:
    """GEMMs merged by (operation, M, N, K, batch, dtypes, layout), most FLOPs
    first. A GEMM launched inside another recorded call (a custom op's
    Triton kernel: FORMAT.md, "within") is listed: it is the shape that ran.
    A call's measured time goes to its GEMM when it is its only one;
    roofline(signature): cost's seconds per call for its shape."""
    merged: Dict[tuple, Gemm] = {}
    for s in signatures:
        found = library_gemms(s) if s.operation.startswith(FLASHINFER) else [gemm_of(s, custom or {})]
        found = [g for g in found if g is not None]
        if len(found) == 1:
            found[0].time_ns, found[0].timed = s.time_ns, s.timed
            found[0].kernel_ns, found[0].kernel_calls = s.kernel_ns, s.kernel_calls
            seconds = roofline(s) if roofline is not None else None
            found[0].roofline_us = seconds * 1e6 if seconds is not None else None
        for g in found:
            _merge(merged, g)
    return sorted(merged.values(), key=lambda g: (-g.total_flops, g.operation))


def _merge(merged: Dict[tuple, Gemm], g: Gemm) -> None:
    key = (g.operation, g.m, g.n, g.k, g.batch, g.a_dtype, g.b_dtype, g.out_dtype, g.b_layout, g.bias,
           str(g.a_stride), str(g.b_stride), g.experts, g.top_k, g.b_scaling)
    if key in merged:
        m = merged[key]
        m.count += g.count
        m.time_ns += g.time_ns
        m.timed += g.timed
        m.kernel_ns += g.kernel_ns
        m.kernel_calls += g.kernel_calls
        if m.roofline_us is None:
            m.roofline_us = g.roofline_us
    else:
        merged[key] = g


FIELDS = ["operation", "m", "n", "k", "batch", "a_dtype", "b_dtype", "out_dtype", "count",
          "flops", "total_flops", "b_layout", "groups", "experts", "top_k", "b_scaling"]

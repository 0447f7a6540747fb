"""Fused-MoE config keys: what names the kernel config one fused-MoE call
needs, and the M values the run's calls asked it for (`sgl-shapeprof tune`).

SGLang picks a fused-MoE kernel config per call: from the weights it takes
a key (E, N from w2's shape `(E, K, N)`, the quantization as a dtype string,
the block shape, per-channel quantization), looks up one JSON file named
after that key and the GPU's name (configs.py), and in that file uses the
batch size nearest to M (`hidden_states.shape[0]`; under a CUDA graph, the
captured, padded batch size). No file: its default config.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from ...records.phases import EXTEND, PREFILL
from ...records.signature import Signature
from ..kernel_calls import MoeReading, block_from_scale

# SGLang's MoE custom ops (register_custom_op in moe_runner/triton_utils/fused_moe.py)
MOE_OPS = ("sglang.inplace_fused_experts", "sglang.outplace_fused_experts")
# the dtype strings SGLang's config names use (get_config_dtype_str's results)
DTYPE_FLAGS = {"fp8_w8a8": "use_fp8_w8a8", "int8_w8a8": "use_int8_w8a8",
               "int4_w4a16": "use_int4_w4a16", "int8_w8a16": "use_int8_w8a16"}
TUNER = "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py"
NO_PHASE = "(no phase)"


def phase_group(phase: Optional[str]) -> str:
    """`extend` and `prefill` are one phase (SGLang's prefill is `extend`)."""
    if phase in (EXTEND, PREFILL):
        return PREFILL
    return phase or NO_PHASE


@dataclass(frozen=True)
class MoeKey:
    """What names one fused-MoE config file (the device aside)."""
    e: int
    n: int
    dtype: Optional[str]                       # fp8_w8a8, int8_w8a8, ..., float32, None
    block_shape: Optional[Tuple[int, int]] = None
    per_channel_quant: bool = False

    @property
    def text(self) -> str:
        s = f"E={self.e},N={self.n},dtype={self.dtype or 'none'}"
        if self.block_shape:
            s += f",block_shape=[{self.block_shape[0]}, {self.block_shape[1]}]"
        return s + (",per_channel_quant" if self.per_channel_quant else "")


@dataclass
class Lookup:
    """Where a key's file was found, if anywhere."""
    name: Optional[str]               # the file name SGLang looks for (None: SGLang not importable)
    path: Optional[str] = None        # the file found
    version: Optional[str] = None     # the Triton version of its folder (None: a flat folder)
    other_version: bool = False       # found only under another Triton version's folder
    tuned: List[int] = field(default_factory=list)  # its M keys, in file order
    searched: List[str] = field(default_factory=list)  # folders looked in, in order


@dataclass
class MoeUse:
    """One config key as the run used it."""
    key: MoeKey
    hidden: int                                  # K: hidden_states.shape[-1]
    operations: List[str] = field(default_factory=list)
    calls: Dict[str, Dict[int, int]] = field(default_factory=dict)  # phase -> M -> calls
    eager: Dict[str, Dict[int, int]] = field(default_factory=dict)  # the same, outside CUDA graphs
    assumed: List[str] = field(default_factory=list)  # what the records could not say
    lookup: Optional[Lookup] = None
    down: Optional[Lookup] = None     # the `_down` file (fused-MoE keys only)
    time_ns: int = 0                  # measured time of `timed` of its calls (a timed recording)
    kernel_ns: int = 0                # GPU kernel time of `kernel_calls` of its calls (time="kernels")
    kernel_calls: int = 0
    timed: int = 0

    @property
    def total(self) -> int:
        return sum(sum(ms.values()) for ms in self.calls.values())

    def ms(self) -> List[Tuple[int, int]]:
        """(M, calls) over all phases, most called first."""
        all_: Dict[int, int] = {}
        for ms in self.calls.values():
            for m, c in ms.items():
                all_[m] = all_.get(m, 0) + c
        return sorted(all_.items(), key=lambda x: (-x[1], x[0]))

    @property
    def tuned(self) -> bool:
        return self.lookup is not None and self.lookup.path is not None

    def nearest(self, m: int) -> Optional[int]:
        """The tuned M a call with this M uses: the nearest, the first in file
        order on a tie (SGLang: min(keys, key=|x - M|)); None: no file."""
        if not self.tuned or not self.lookup or not self.lookup.tuned:
            return None
        return min(self.lookup.tuned, key=lambda x: abs(x - m))


# -- from records to keys ------------------------------------------------------

DtypeStr = Callable[[str, Dict[str, bool]], Optional[str]]


def plain_dtype_str(hidden_dtype: str, flags: Dict[str, bool]) -> Optional[str]:
    """The dtype part of a config name without SGLang: its flags' names as
    SGLang spells them in file names (the first one set), float32 for float32
    activations, else none. With SGLang importable its own function is used
    (sglang_dtype_str); the tests hold the two equal."""
    d = next((d for d, flag in DTYPE_FLAGS.items() if flags.get(flag)), None)
    return d or ("float32" if hidden_dtype == "float32" else None)


def as_tensor(v: object) -> Optional[dict]:
    """A recorded value that is a tensor's description, else None."""
    return v if isinstance(v, dict) and "shape" in v else None


def _dt(v: Optional[dict]) -> str:
    return str((v or {}).get("dtype", "")).replace("torch.", "")


def moe_key_of(sig: Signature, dtype_str: DtypeStr = plain_dtype_str
               ) -> Optional[Tuple[MoeKey, int, int, List[str]]]:
    """(key, M, K, what was assumed) for a record of SGLang's fused-MoE ops,
    else None. With arguments recorded (--args) the quantization flags and
    the block shape are read; without, they are inferred from the weights'
    dtypes and the scales' shapes, and said to be."""
    if sig.operation.rsplit(".", 1)[0] not in MOE_OPS:
        return None
    x, w1, w2 = (as_tensor(sig.inputs.get(k)) for k in ("hidden_states", "w1", "w2"))
    if x is None or w1 is None or w2 is None or len(w2["shape"]) != 3 or len(x["shape"]) < 1:
        return None
    e, _, n = w2["shape"]
    m, k = x["shape"][0], x["shape"][-1]
    args = sig.args
    assumed: List[str] = []
    flags: Dict[str, bool] = {}
    if args is not None:
        flags = {flag: bool(args.get(flag)) for flag in DTYPE_FLAGS.values()}
        per_channel = bool(args.get("per_channel_quant"))
        bs = args.get("block_shape")
        block = (int(bs[0]), int(bs[1])) if isinstance(bs, list) and len(bs) == 2 else None
    else:
        wd = _dt(w1)
        if wd.startswith("float8"):
            flags["use_fp8_w8a8"] = True
        elif wd == "int8":
            flags["use_int8_w8a8"] = True
            assumed.append("int8 weights taken as int8_w8a8 (int8_w8a16 has the same inputs; "
                           "record with --args to know)")
        elif wd in ("uint8", "int4"):
            flags["use_int4_w4a16"] = True
        scale = as_tensor(sig.inputs.get("w1_scale"))
        block = block_from_scale(w1, scale) if flags else None
        if block:
            assumed.append(f"block shape {list(block)} inferred from w1_scale's shape "
                           "(record with --args to read it)")
        w8a8 = flags.get("use_fp8_w8a8") or flags.get("use_int8_w8a8")
        per_channel = bool(w8a8 and not block and scale is not None and len(scale["shape"]) >= 2
                           and scale["shape"][1] == w1["shape"][1])
        if w8a8 and not block:
            assumed.append(f"per_channel_quant={per_channel} inferred from w1_scale's shape "
                           "(record with --args to read it)")
    dtype = dtype_str(_dt(x), flags)
    pad = int(w1["shape"][-1]) - int(k)
    if pad > 0 and not block and (flags.get("use_fp8_w8a8") or flags.get("use_int8_w8a8")):
        # SGLANG_MOE_PADDING pads w13's K and w2's N; SGLang names the config by the unpadded N
        n = int(n) - pad
        assumed.append(f"SGLANG_MOE_PADDING seen (w1 is {pad} wider than hidden_states): N is w2's last "
                       f"dimension - {pad}, as SGLang takes it")
    return MoeKey(int(e), int(n), dtype, block, per_channel), int(m), int(k), assumed


def moe_uses(signatures: Iterable[Signature], dtype_str: DtypeStr = plain_dtype_str) -> List[MoeUse]:
    """Every config key the records' fused-MoE calls needed, with their M
    values and true counts per phase; most called first. Calls that raised
    count too: the config is chosen before the kernel runs (on a CPU
    SGLang's ops record and then raise)."""
    uses: Dict[Tuple[MoeKey, int], MoeUse] = {}
    for sig in signatures:
        got = moe_key_of(sig, dtype_str)
        if got is None:
            continue
        key, m, k, assumed = got
        u = uses.get((key, k))
        if u is None:
            u = uses[(key, k)] = MoeUse(key, k)
        op = sig.operation.rsplit(".", 1)[0]
        if op not in u.operations:
            u.operations.append(op)
        u.assumed += [a for a in assumed if a not in u.assumed]
        count_call(u, sig, m)
    return ranked(uses.values(), lambda u: u.key.e, lambda u: u.key.n)


def count_call(u: MoeUse, sig: Signature, m: int) -> None:
    """Adds a record's calls to u's count for M, per phase (and, outside
    CUDA graphs, to its eager count)."""
    if not sig.count:  # a graph captured and never replayed ran no call
        return
    phase = phase_group(sig.phase)
    for table in (u.calls, u.eager) if sig.graph is None else (u.calls,):
        ms = table.setdefault(phase, {})
        ms[m] = ms.get(m, 0) + sig.count
    u.time_ns += sig.time_ns
    u.timed += sig.timed
    u.kernel_ns += sig.kernel_ns
    u.kernel_calls += sig.kernel_calls


def ranked(uses: Iterable[MoeUse], *tie: Callable[[MoeUse], object]) -> List[MoeUse]:
    """What to tune first: the most measured time when the records were
    timed (docs/time.md), else the most calls; then tie's keys."""
    return sorted(uses, key=lambda u: (-u.kernel_ns, -u.time_ns, -u.total, *(f(u) for f in tie)))


def tuner_command(u: MoeUse, model: Optional[str] = None, tp: Optional[int] = None,
                  ep: Optional[int] = None, limit: int = 0) -> str:
    """SGLang's fused-MoE tuner's command line for one key: its batch sizes
    are the observed M, most called first (at most limit; 0: all). The
    script derives E and N from the model and TP/EP, so it takes the model,
    not the key: MODEL is left for the user to fill when not given."""
    ms = [m for m, _ in u.ms()]
    if limit:
        ms = ms[:limit]
    parts = ["python", TUNER, "--model", model or "MODEL"]
    if tp is not None:
        parts += ["--tp-size", str(tp)]
    if ep is not None:
        parts += ["--ep-size", str(ep)]
    if u.key.dtype in DTYPE_FLAGS:
        parts += ["--dtype", u.key.dtype]
    if u.key.per_channel_quant:
        parts.append("--per-channel-quant")
    parts += ["--tune", "--batch-sizes"] + [str(m) for m in ms]
    return " ".join(parts)


def moe_op_reading(sig: Signature) -> Optional[MoeReading]:
    """An SGLang fused-experts op's call (MOE_OPS: hidden_states [T, H], w1
    [E, N, H], topk_ids [T, top-k]) as tokens, E, top-k, N, K; else None."""
    if sig.operation.rsplit(".", 1)[0] not in MOE_OPS or sig.error is not None or sig.incomplete:
        return None
    x, w1, ids = (as_tensor(sig.inputs.get(k)) for k in ("hidden_states", "w1", "topk_ids"))
    if x is None or w1 is None or ids is None or len(w1["shape"]) != 3 or len(ids["shape"]) != 2:
        return None
    return MoeReading(ids["shape"][0], w1["shape"][0], ids["shape"][1], w1["shape"][1], x["shape"][-1])

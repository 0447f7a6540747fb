"""`sgl-shapeprof tune`: which of the fused-MoE (and block-quantized GEMM)
kernel configs a run needed are tuned for a device, which M each call falls
back to, the lists SGLang's tuner takes, and the CUDA-graph batch sizes the
decode passes suggest (tune_result gathers it for the command and the
report; TunableOp's side is tunableop.py).

SGLang picks a fused-MoE kernel config per call: from the weights it takes
a key (E, N from w2's shape `(E, K, N)`, the quantization as a dtype string,
the block shape, per-channel quantization), looks up one JSON file named
after that key and the GPU's name, and in that file uses the batch size
nearest to M (`hidden_states.shape[0]`; under a CUDA graph, the captured,
padded batch size). No file: its default config.

The naming and the dtype string are SGLang's own functions
(`fused_moe_triton_config.get_config_file_name`, `get_config_dtype_str`),
called with the device name set (`SGLangNaming`), never copied here. Without
SGLang importable, files in a directory of the user's are matched by the
fields their names spell (`parse_file_name`): enough to say covered or not,
not to name a missing file.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from ..records.scan import Signature, Source
from .moe_launch import MoeLaunch, expect, moe_launches

# SGLang's MoE custom ops (register_custom_op in moe_runner/triton_utils/fused_moe.py)
MOE_OPS = ("sglang.inplace_fused_experts", "sglang.outplace_fused_experts")
# the dtype strings SGLang's config names use (get_config_dtype_str's results)
DTYPE_FLAGS = {"fp8_w8a8": "use_fp8_w8a8", "int8_w8a8": "use_int8_w8a8",
               "int4_w4a16": "use_int4_w4a16", "int8_w8a16": "use_int8_w8a16"}
TUNER = "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py"
NO_PHASE = "(no phase)"


def phase_group(phase: Optional[str]) -> str:
    """`extend` and `prefill` are one phase (SGLang's prefill is `extend`)."""
    if phase in ("extend", "prefill"):
        return "prefill"
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


def _t(v: object) -> Optional[dict]:
    return v if isinstance(v, dict) and "shape" in v else None


def _dt(v: Optional[dict]) -> str:
    return str((v or {}).get("dtype", "")).replace("torch.", "")


def _block_from_scale(w: dict, scale: Optional[dict]) -> Optional[Tuple[int, int]]:
    """A block shape that fits a block-wise weight scale (E, ceil(N/bn),
    ceil(K/bk)): the powers of two that give its tile counts, 128 first."""
    if scale is None or len(scale["shape"]) != 3 or len(w["shape"]) != 3:
        return None
    _, rows, cols = w["shape"]
    _, tr, tc = scale["shape"]
    if tr <= 1 and tc <= 1 or tc == 1:
        return None  # per-tensor or per-channel

    def fit(size: int, tiles: int) -> Optional[int]:
        for b in (128, 64, 256, 32, 512, 16):
            if -(-size // b) == tiles:
                return b
        return None
    bn, bk = fit(rows, tr), fit(cols, tc)
    return (bn, bk) if bn and bk else None


def moe_key_of(sig: Signature, dtype_str: DtypeStr = plain_dtype_str
               ) -> Optional[Tuple[MoeKey, int, int, List[str]]]:
    """(key, M, K, what was assumed) for a record of SGLang's fused-MoE ops,
    else None. With arguments recorded (--args) the quantization flags and
    the block shape are read; without, they are inferred from the weights'
    dtypes and the scales' shapes, and said to be."""
    if sig.operation.rsplit(".", 1)[0] not in MOE_OPS:
        return None
    x, w1, w2 = (_t(sig.inputs.get(k)) for k in ("hidden_states", "w1", "w2"))
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
        scale = _t(sig.inputs.get("w1_scale"))
        block = _block_from_scale(w1, scale) if flags else None
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
        _count(u, sig, m)
    return sorted(uses.values(), key=lambda u: (-u.total, u.key.e, u.key.n))


def _count(u: MoeUse, sig: Signature, m: int) -> None:
    if not sig.count:  # a graph captured and never replayed ran no call
        return
    phase = phase_group(sig.phase)
    for table in (u.calls, u.eager) if sig.graph is None else (u.calls,):
        ms = table.setdefault(phase, {})
        ms[m] = ms.get(m, 0) + sig.count


# -- naming and lookup ---------------------------------------------------------

_FIELD = re.compile(r"(?:^|,)([A-Za-z_]+)=(\[[^\]]*\]|[^,]*)")


def name_fields(name: str) -> Optional[Dict[str, str]]:
    """The fields a config file's name spells (E=8,N=64,device_name=...),
    with "down" for a `_down` file; None for a name that is not one."""
    if not name.endswith(".json"):
        return None
    stem = name[:-5]
    down = stem.endswith("_down")
    if down:
        stem = stem[:-5]
    f = dict(_FIELD.findall(stem))
    if down:
        f["down"] = "True"
    return f


def _block_field(f: Dict[str, str]) -> Optional[Tuple[int, int]]:
    nums = [int(x) for x in re.findall(r"\d+", f.get("block_shape", ""))]
    return (nums[0], nums[1]) if len(nums) == 2 else None


def parse_file_name(name: str) -> Optional[Tuple[MoeKey, str, bool]]:
    """(key, device, down) from a fused-MoE config file's name, or None: how
    files in a user's folder are matched when SGLang is not importable."""
    f = name_fields(name)
    try:
        e, n = int(f["E"]), int(f["N"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None
    assert f is not None
    return (MoeKey(e, n, f.get("dtype") or None, _block_field(f), f.get("per_channel_quant") == "True"),
            f.get("device_name", ""), "down" in f)


def version_folders(root: str) -> List[Tuple[str, str]]:
    """(version, folder) for root/configs/triton_X_Y_Z, newest first."""
    base = os.path.join(root, "configs")
    try:
        names = [d for d in os.listdir(base) if d.startswith("triton_")]
    except OSError:
        return []
    out = []
    for d in names:
        v = d[len("triton_"):].replace("_", ".")
        if all(p.isdigit() for p in v.split(".")):
            out.append((v, os.path.join(base, d)))
    return sorted(out, key=lambda x: tuple(int(p) for p in x[0].split(".")), reverse=True)


def search_order(root: str, triton: Optional[str]) -> List[Tuple[Optional[str], str]]:
    """The folders SGLang's get_moe_configs reads under a config root: the
    running Triton's folder first, then the others newest first. A root
    without configs/triton_* folders is one flat folder (a user's)."""
    vs = version_folders(root)
    if not vs:
        return [(None, root)]
    first = [x for x in vs if x[0] == triton]
    return first + [x for x in vs if x[0] != triton]


def device_names(roots: Iterable[str]) -> List[str]:
    """The device names config files under these roots are tuned for."""
    names = set()
    for root in roots:
        for _, folder in search_order(root, None):
            try:
                files = os.listdir(folder)
            except OSError:
                continue
            for f in files:
                fields = name_fields(f)
                if fields and fields.get("device_name"):
                    names.add(fields["device_name"])
    return sorted(names)


def resolve_device(given: str, known: List[str]) -> str:
    """The device name as config files spell it (spaces as _): the name
    given, or the one known name it is the end of (H200 -> NVIDIA_H200).
    ValueError when it is the end of several."""
    name = given.strip().replace(" ", "_")
    if name in known:
        return name
    low = name.lower()
    hits = [k for k in known if k.lower() == low or k.lower().endswith("_" + low)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise ValueError(f"--device {given} names several devices the configs know: {', '.join(hits)}")
    return name


class Naming:
    """How a key becomes the file looked for: without SGLang, no name, and
    a file matches when the fields its name spells are the key's."""

    def __init__(self, device: str) -> None:
        self.device = device

    def name(self, key: MoeKey, down: bool = False) -> Optional[str]:
        return None

    def matches(self, file_name: str, key: MoeKey, expected: Optional[str], down: bool = False) -> bool:
        if expected is not None:
            return file_name == expected
        p = parse_file_name(file_name)
        return p is not None and p[2] == down and p[0] == key and p[1] == self.device


class SGLangNaming(Naming):
    """SGLang's own get_config_file_name, with get_device_name answering
    the device asked about."""

    def __init__(self, device: str, module: object) -> None:
        super().__init__(device)
        self.module = module

    def name(self, key: MoeKey, down: bool = False) -> Optional[str]:
        mod = self.module
        saved = getattr(mod, "get_device_name")
        setattr(mod, "get_device_name", lambda *a, **k: self.device)
        try:
            block = list(key.block_shape) if key.block_shape else None
            return str(getattr(mod, "get_config_file_name")(key.e, key.n, key.dtype, block,
                                                            key.per_channel_quant, down_moe=down))
        finally:
            setattr(mod, "get_device_name", saved)


def installed_triton() -> Optional[str]:
    """This environment's Triton version (what SGLang would run), or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("triton")
        except PackageNotFoundError:
            return None
    except ImportError:
        return None


def sglang_config_module() -> Optional[object]:
    """SGLang's fused_moe_triton_config module, or None when SGLang (or
    what it imports: torch, triton) is not importable."""
    try:
        from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as mod
    except Exception:  # ImportError, or SGLang failing to import on this machine
        return None
    return mod


def sglang_config_root(mod: object) -> str:
    """Where SGLang reads its MoE configs (get_moe_configs):
    `SGLANG_MOE_CONFIG_DIR`, else the folder its module is in."""
    return os.environ.get("SGLANG_MOE_CONFIG_DIR") or os.path.dirname(
        os.path.realpath(str(getattr(mod, "__file__"))))


def sglang_dtype_str(mod: object) -> "DtypeStr":
    """SGLang's own get_config_dtype_str, over a record's dtype name."""
    import torch

    def dtype_str(hidden_dtype: str, flags: Dict[str, bool]) -> Optional[str]:
        dt = getattr(torch, hidden_dtype, None)
        if not isinstance(dt, torch.dtype):
            dt = torch.bfloat16
        return getattr(mod, "get_config_dtype_str")(dt, **flags)  # type: ignore[no-any-return]
    return dtype_str


def _tuned_ms(path: str) -> List[int]:
    """The M keys of a config file, in file order."""
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
        if not isinstance(table, dict):
            raise ValueError("not an object of M -> kernel config")
        return [int(x) for x in table]
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{path}: not a kernel config file ({e})") from None


def lookup(key: MoeKey, roots: List[str], triton: Optional[str], naming: Naming, down: bool = False) -> Lookup:
    """The file SGLang would read for key: the roots in order (a user's
    folder, then SGLang's), in each the running Triton's folder first, then
    the other versions newest first. down: the `_down` file SGLang also
    looks for, for the second (down-projection) GEMM."""
    expected = naming.name(key, down)
    out = Lookup(expected)
    for root in roots:
        for version, folder in search_order(root, triton):
            out.searched.append(folder)
            try:
                files = sorted(os.listdir(folder))
            except OSError:
                continue
            hit = next((f for f in files if naming.matches(f, key, expected, down)), None)
            if hit is None:
                continue
            path = os.path.join(folder, hit)
            out.path, out.version, out.tuned = path, version, _tuned_ms(path)
            out.other_version = version is not None and triton is not None and version != triton
            if out.name is None:
                out.name = hit
            return out
    return out


# -- block-quantized GEMMs -----------------------------------------------------

# the marker ops the SGLang integration records for its Triton block GEMMs
# (integrations/sglang/block_gemm.py) -> the dtype part of their config names
BLOCK_GEMM_OPS = {"sgl_shapeprof.sglang_w8a8_block_fp8_matmul": "fp8_w8a8",
                  "sgl_shapeprof.sglang_w8a8_block_int8_matmul": "int8_w8a8"}
# SGLang's DeepGEMM block-FP8 GEMM, a custom op (kernels/ops/gemm/fp8_kernel.py):
# DeepGEMM compiles a kernel per (N, K) at run time; no config file to look up
DEEPGEMM_OPS = {"sglang.deep_gemm_fp8_fp8_bf16_nt": "fp8_w8a8"}


@dataclass(frozen=True)
class BlockKey:
    """What names one block-GEMM config file (the device aside)."""
    n: int
    k: int
    dtype: str
    block_shape: Tuple[int, int]

    @property
    def text(self) -> str:
        return f"N={self.n},K={self.k},dtype={self.dtype},block_shape=[{self.block_shape[0]}, {self.block_shape[1]}]"

    def matches(self, fields: Dict[str, str], device: str) -> bool:
        return (fields.get("N") == str(self.n) and fields.get("K") == str(self.k) and "E" not in fields
                and fields.get("dtype") == self.dtype and _block_field(fields) == self.block_shape
                and fields.get("device_name") == device and "down" not in fields)


def _block_arg(args: dict) -> Optional[Tuple[int, int]]:
    """The block shape a block GEMM's arguments give: block_size=[bn, bk]
    (the markers), or block_n and block_k (DeepGEMM's op)."""
    given = args.get("block_size")
    if isinstance(given, list) and len(given) == 2:
        return int(given[0]), int(given[1])
    if isinstance(args.get("block_n"), int) and isinstance(args.get("block_k"), int):
        return args["block_n"], args["block_k"]
    return None


def block_uses(signatures: Iterable[Signature], ops: Dict[str, str] = BLOCK_GEMM_OPS) -> List[MoeUse]:
    """Every (N, K, block shape) the records' block-quantized GEMMs (the
    operators of `ops`) needed, with their M per phase; A is (M, K), B
    (N, K), the block shape read from the arguments or inferred from Bs's
    shape (N/bn, K/bk), and said to be."""
    uses: Dict[BlockKey, MoeUse] = {}
    for sig in signatures:
        dtype = ops.get(sig.operation.rsplit(".", 1)[0])
        a, b, bs = (_t(sig.inputs.get(x)) for x in ("A", "B", "Bs"))
        if dtype is None or a is None or b is None or len(b["shape"]) != 2:
            continue
        n, k = b["shape"]
        m = math.prod(a["shape"][:-1])
        assumed: List[str] = []
        block = _block_arg(sig.args or {})
        if block is None:
            block = _block_from_scale({"shape": [1, n, k]}, {"shape": [1] + list(bs["shape"])} if bs else None)
            assumed.append(f"block shape {list(block) if block else '?'} inferred from Bs's shape "
                           "(record with --args to read it)")
        if block is None and ops is DEEPGEMM_OPS:  # its scales' layout varies; its default is 128x128
            block = (128, 128)
            assumed[-1] = "block shape [128, 128] (the op's default) assumed (record with --args to read it)"
        if block is None:
            continue
        key = BlockKey(int(n), int(k), dtype, block)
        u = uses.get(key)
        if u is None:
            u = uses[key] = MoeUse(key, int(k))  # type: ignore[arg-type]
        op = sig.operation.rsplit(".", 1)[0]
        if op not in u.operations:
            u.operations.append(op)
        u.assumed += [x for x in assumed if x not in u.assumed]
        _count(u, sig, m)
    return sorted(uses.values(), key=lambda u: (-u.total, u.key.n, u.key.k))  # type: ignore[attr-defined]


def sglang_block_gemm_root() -> Optional[str]:
    """The folder SGLang reads block-GEMM configs from (get_w8a8_block_fp8_configs:
    beside its fp8_kernel module), or None when SGLang is not importable."""
    try:
        from sglang.kernels.ops.gemm import fp8_kernel
    except Exception:
        return None
    return os.path.join(os.path.dirname(os.path.realpath(str(fp8_kernel.__file__))), "configs")


def lookup_block(key: BlockKey, folders: List[str], device: str) -> Lookup:
    """The block-GEMM config file for key: the folders in order (a user's,
    then SGLang's), matched by the fields the names spell (SGLang builds
    the name inline, with no function to call)."""
    out = Lookup(None)
    for folder in folders:
        out.searched.append(folder)
        try:
            files = sorted(os.listdir(folder))
        except OSError:
            continue
        for f in files:
            fields = name_fields(f)
            if fields is not None and key.matches(fields, device):
                out.name = f
                out.path = os.path.join(folder, f)
                out.tuned = _tuned_ms(out.path)
                return out
    return out


# -- coverage ----------------------------------------------------------------

@dataclass
class PhaseCoverage:
    phase: str
    calls: int = 0
    tuned: int = 0        # calls whose key has a tuned file
    exact: int = 0        # ... tuned for their own M
    distance: int = 0     # sum over calls of |M - tuned M| (tuned calls)

    @property
    def other_m(self) -> int:
        return self.tuned - self.exact

    def pct(self, n: int) -> float:
        return 100.0 * n / self.calls if self.calls else 0.0


def coverage(uses: List[MoeUse]) -> Dict[str, PhaseCoverage]:
    """Per phase, and "all": calls on a tuned file, on a config tuned for
    their own M, and how far the others fall back."""
    out: Dict[str, PhaseCoverage] = {}
    for u in uses:
        for phase, ms in u.calls.items():
            for pc in (out.setdefault(phase, PhaseCoverage(phase)), out.setdefault("all", PhaseCoverage("all"))):
                for m, c in ms.items():
                    pc.calls += c
                    t = u.nearest(m)
                    if t is not None:
                        pc.tuned += c
                        pc.exact += c if t == m else 0
                        pc.distance += c * abs(t - m)
    return out


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


def use_json(u: MoeUse, device: str, triton: Optional[str]) -> dict:
    lk = u.lookup or Lookup(None)
    return {
        "E": u.key.e, "N": u.key.n, "dtype": u.key.dtype,
        "block_shape": list(u.key.block_shape) if u.key.block_shape else None,
        "per_channel_quant": u.key.per_channel_quant, "device": device, "triton": triton,
        "hidden_size": u.hidden, "operations": u.operations, "calls": u.total,
        "file_name": lk.name, "file": lk.path, "file_triton": lk.version,
        "other_triton_version": lk.other_version, "tuned_m": lk.tuned, "assumed": u.assumed,
        "down_file_name": u.down.name if u.down else None, "down_file": u.down.path if u.down else None,
        "down_tuned_m": u.down.tuned if u.down else [],
        "m": [{"phase": p, "m": m, "calls": c, "tuned_m": u.nearest(m),
               "distance": None if u.nearest(m) is None else abs(u.nearest(m) - m)}  # type: ignore[operator]
              for p, ms in sorted(u.calls.items()) for m, c in sorted(ms.items())],
    }


CSV_FIELDS = ["E", "N", "dtype", "block_shape", "per_channel_quant", "device", "triton", "phase",
              "m", "calls", "file", "tuned_m", "distance"]


def csv_rows(uses: List[MoeUse], device: str, triton: Optional[str]) -> List[list]:
    rows = []
    for u in uses:
        for p, ms in sorted(u.calls.items()):
            for m, c in sorted(ms.items()):
                t = u.nearest(m)
                rows.append([u.key.e, u.key.n, u.key.dtype or "",
                             "" if not u.key.block_shape else f"{u.key.block_shape[0]}x{u.key.block_shape[1]}",
                             u.key.per_channel_quant, device, triton or "", p, m, c,
                             (u.lookup.path if u.lookup else None) or "",
                             "" if t is None else t, "" if t is None else abs(t - m)])
    return rows


# -- the whole question, for the command and the report -------------------------

NEEDS = ("needs SGLang importable (its config file naming and shipped configs: pip install sglang), "
         "or --configs DIR (your files, matched by the fields their names spell)")


@dataclass
class TuneResult:
    device: str
    triton: Optional[str]
    sglang: bool                 # SGLang's own naming was used
    roots: List[str]             # fused-MoE config roots, in lookup order
    gemm_folders: List[str]      # block-GEMM config folders, in lookup order
    moe: List[MoeUse]
    block: List[MoeUse]          # keys are BlockKey
    deepgemm: List[MoeUse] = field(default_factory=list)  # keys are BlockKey; nothing to look up
    launches: List[MoeLaunch] = field(default_factory=list)  # fused-MoE kernel launches, with their configs

    @property
    def moe_coverage(self) -> Dict[str, PhaseCoverage]:
        return coverage(self.moe)

    @property
    def block_coverage(self) -> Dict[str, PhaseCoverage]:
        return coverage(self.block)


def tune_result(signatures: List[Signature], device: str, configs: Optional[str] = None,
                triton: Optional[str] = None) -> TuneResult:
    """Every fused-MoE and block-GEMM config the calls needed, looked up for
    device. ValueError (one line) when neither SGLang nor configs is there,
    for a device name that is the end of several, or a config file that is
    not one."""
    mod = sglang_config_module()
    roots: List[str] = [configs] if configs else []
    folders: List[str] = [configs] if configs else []
    if mod is not None:
        roots.append(sglang_config_root(mod))
        gemm_root = sglang_block_gemm_root()
        if gemm_root:
            folders.append(gemm_root)
    elif not configs:
        raise ValueError(NEEDS)
    device = resolve_device(device, device_names(roots + folders))
    naming: Naming = SGLangNaming(device, mod) if mod is not None else Naming(device)
    triton = triton or installed_triton()
    moe = moe_uses(signatures, sglang_dtype_str(mod) if mod is not None else plain_dtype_str)
    for u in moe:
        u.lookup = lookup(u.key, roots, triton, naming)
        u.down = lookup(u.key, roots, triton, naming, down=True)
    block = block_uses(signatures)
    for u in block:
        u.lookup = lookup_block(u.key, folders, device)  # type: ignore[arg-type]
    launches = moe_launches(signatures, sglang_dtype_str(mod) if mod is not None else plain_dtype_str)

    def find(e: int, n: int, dtype: Optional[str], block: Optional[Tuple[int, int]], pcq: bool,
             down: bool) -> Lookup:
        return lookup(MoeKey(e, n, dtype, block, pcq), roots, triton, naming, down)
    expect(launches, find, sglang_default_config(mod) if mod is not None else None)
    return TuneResult(device, triton, mod is not None, roots, folders, moe, block,
                      block_uses(signatures, DEEPGEMM_OPS), launches)


def sglang_default_config(mod: object) -> Callable[..., Optional[Dict[str, int]]]:
    """SGLang's own get_default_config (None where it cannot answer here).
    It asks the server's published context whether deterministic inference
    is on (then one fixed config): tune asks for a server without it,
    SGLang's default, as SGLangNaming answers the device."""
    import types
    context = types.SimpleNamespace(deterministic=types.SimpleNamespace(enable_deterministic_inference=False))

    def default(*args: object) -> Optional[Dict[str, int]]:
        saved = getattr(mod, "get_exec", None)
        try:
            if saved is not None:
                setattr(mod, "get_exec", lambda: context)
            return dict(getattr(mod, "get_default_config")(*args))
        except Exception:  # a release whose get_default_config needs more of its server
            return None
        finally:
            if saved is not None:
                setattr(mod, "get_exec", saved)
    return default


def coverage_json(cov: Dict[str, PhaseCoverage]) -> dict:
    return {p: {"calls": c.calls, "tuned": c.tuned, "exact_m": c.exact, "other_m": c.other_m,
                "default": c.calls - c.tuned, "distance_calls": c.distance} for p, c in cov.items()}


def block_json(u: MoeUse, device: str) -> dict:
    k: BlockKey = u.key  # type: ignore[assignment]
    lk = u.lookup or Lookup(None)
    return {"N": k.n, "K": k.k, "dtype": k.dtype, "block_shape": list(k.block_shape), "device": device,
            "operations": u.operations, "calls": u.total, "file": lk.path, "tuned_m": lk.tuned,
            "assumed": u.assumed,
            "m": [{"phase": p, "m": m, "calls": c, "tuned_m": u.nearest(m),
                   "distance": None if u.nearest(m) is None else abs(u.nearest(m) - m)}  # type: ignore[operator]
                  for p, ms in sorted(u.calls.items()) for m, c in sorted(ms.items())]}


def deepgemm_json(u: MoeUse) -> dict:
    k: BlockKey = u.key  # type: ignore[assignment]
    return {"N": k.n, "K": k.k, "dtype": k.dtype, "block_shape": list(k.block_shape), "operations": u.operations,
            "calls": u.total, "assumed": u.assumed,
            "m": [{"phase": p, "m": m, "calls": c} for p, ms in sorted(u.calls.items()) for m, c in sorted(ms.items())]}


# -- CUDA-graph batch sizes ----------------------------------------------------

GRAPH_FAMILY = 1_000_000  # graph keys: family * 1e6 + size; family 0 = decode graphs (FORMAT.md)


@dataclass
class GraphSize:
    """One captured decode size: its replays and the real batch sizes they
    served (where the integration knew them: summaries' "real_sizes")."""
    size: int
    replays: int = 0
    served: Dict[int, int] = field(default_factory=dict)  # real batch size -> replays

    @property
    def known(self) -> int:
        return sum(self.served.values())

    @property
    def mean_real(self) -> Optional[float]:
        return sum(r * n for r, n in self.served.items()) / self.known if self.known else None

    @property
    def padding(self) -> Optional[float]:
        """The share of this graph's rows that were padding, over the
        replays whose real size is known."""
        return None if not self.known or not self.size else 1.0 - self.mean_real / self.size  # type: ignore[operator]


@dataclass
class GraphSizes:
    """What the decode passes' batch sizes say about SGLang's --cuda-graph-bs."""
    share: float                               # the share of calls the suggested list covers
    graphs: Dict[int, GraphSize] = field(default_factory=dict)  # captured decode size -> its replays
    eager: Dict[int, int] = field(default_factory=dict)     # real batch size (eager decode) -> calls
    per_replay: Dict[int, float] = field(default_factory=dict)  # captured size -> fused-MoE calls per replay
    unit: str = "replays"                     # what `batches` counts
    unweighed: List[int] = field(default_factory=list)  # sizes whose replays could not be weighed (left out)
    batches: Dict[int, float] = field(default_factory=dict)  # real batch size -> decode work (unit)
    suggested: List[int] = field(default_factory=list)
    waste_now: Optional[float] = None         # padded share of the real sizes on the captured sizes
    waste_suggested: Optional[float] = None   # ... on the suggested list

    def above(self, sizes: List[int]) -> float:
        """The share of `batches` larger than every size: they run without a graph."""
        total = sum(self.batches.values())
        top = max(sizes, default=0)
        return sum(c for b, c in self.batches.items() if b > top) / total if total else 0.0

    @property
    def replays(self) -> Dict[int, int]:
        return {b: g.replays for b, g in self.graphs.items()}

    @property
    def unused(self) -> List[int]:
        return sorted(b for b, g in self.graphs.items() if not g.replays)

    @property
    def unknown(self) -> int:
        """Replays whose real batch size is not in the summaries."""
        return sum(g.replays - g.known for g in self.graphs.values())


def padding_waste(real: Dict[int, float], sizes: List[int]) -> Optional[float]:
    """The share of the padded rows that are padding, over the batches that
    fit a size (the next size up, as SGLang pads); None: none fits."""
    rows = padded = 0.0
    for bs, c in real.items():
        up = min((s for s in sizes if s >= bs), default=None)
        if up is not None:
            rows += c * bs
            padded += c * up
    return None if not padded else 1.0 - rows / padded


def graph_sizes(sources: List[Source], uses: List[MoeUse], share: float) -> GraphSizes:
    """The captured decode graph sizes, their replays and the real batch
    sizes those served (the summaries); the real batch sizes of decode
    passes that ran eagerly (the fused-MoE calls' M outside graphs: one
    token per request); the fewest sizes that cover `share` percent of all
    of them, and the padding each list costs.

    One unit for both: with fused-MoE calls in the records, a replay weighs
    its graph's fused-MoE calls (what the capture recorded), so replays and
    eager calls add up; without, the unit is replays."""
    out = GraphSizes(share)
    moe_in_graph: Dict[int, int] = {}
    for src in sources:
        for key, g in src.graphs.items():
            if 0 <= key < GRAPH_FAMILY:
                gs = out.graphs.setdefault(key, GraphSize(key))
                gs.replays += int(g.get("replays", 0) or 0)
                for r, n in (g.get("real_sizes") or {}).items():
                    gs.served[int(r)] = gs.served.get(int(r), 0) + int(n)
        for sig in src.signatures.values():
            if sig.graph is not None and 0 <= sig.graph < GRAPH_FAMILY and moe_key_of(sig) is not None:
                moe_in_graph[sig.graph] = moe_in_graph.get(sig.graph, 0) + sig.count
    for u in uses:
        for m, c in u.eager.get("decode", {}).items():
            out.eager[m] = out.eager.get(m, 0) + c
    if out.eager or moe_in_graph:
        out.unit = "fused-MoE calls"
        out.per_replay = {k: c / out.graphs[k].replays for k, c in moe_in_graph.items()
                          if k in out.graphs and out.graphs[k].replays}
    typical = sum(out.per_replay.values()) / len(out.per_replay) if out.per_replay else None
    for k, g in sorted(out.graphs.items()):
        # a graph whose capture was not recorded (on request, say) weighs
        # what the others do: one model, the same layers in every graph
        w = 1.0 if out.unit == "replays" else out.per_replay.get(k, typical)
        if w is None:
            if g.served:
                out.unweighed.append(k)
            continue
        for r, n in g.served.items():
            out.batches[r] = out.batches.get(r, 0.0) + w * n
    for m, c in out.eager.items():
        out.batches[m] = out.batches.get(m, 0.0) + c
    out.batches = {b: c for b, c in out.batches.items() if c}
    total = sum(out.batches.values())
    covered = 0.0
    for bs, c in sorted(out.batches.items(), key=lambda x: (-x[1], x[0])):
        if total and 100.0 * covered / total >= share:
            break
        out.suggested.append(bs)
        covered += c
    out.suggested.sort()
    out.waste_now = padding_waste(out.batches, sorted(out.graphs))
    out.waste_suggested = padding_waste(out.batches, out.suggested)
    return out

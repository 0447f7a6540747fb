"""Block-quantized GEMMs (`sgl-shapeprof tune`): SGLang's Triton w8a8
block GEMMs, whose configs are files named by N, K, the dtype and the block
shape, and DeepGEMM's block-FP8 GEMM, which compiles a kernel per (N, K) at
run time and has no file to look up; and DeepGEMM's own functions
(torch.ops.deep_gemm), compiled per (N, K, groups) the same way."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from ...integrations.sglang.seam import DEEP_GEMM_NAMESPACE
from ...records.signature import Signature
from ..gemm import gemm_of
from .configs import block_field, name_fields, tuned_ms
from .moe import Lookup, MoeUse, as_tensor, block_from_scale, count_call, ranked

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
                and fields.get("dtype") == self.dtype and block_field(fields) == self.block_shape
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
        a, b, bs = (as_tensor(sig.inputs.get(x)) for x in ("A", "B", "Bs"))
        if dtype is None or a is None or b is None or len(b["shape"]) != 2:
            continue
        n, k = b["shape"]
        m = math.prod(a["shape"][:-1])
        assumed: List[str] = []
        block = _block_arg(sig.args or {})
        if block is None:
            block = block_from_scale({"shape": [1, n, k]}, {"shape": [1] + list(bs["shape"])} if bs else None)
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
        count_call(u, sig, m)
    return ranked(uses.values(), lambda u: u.key.n, lambda u: u.key.k)  # type: ignore[attr-defined]


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
                out.tuned = tuned_ms(out.path)
                return out
    return out


@dataclass(frozen=True)
class DeepGemmKey:
    """What DeepGEMM compiles a kernel for: its function, and the shape
    the kernel is built for (N, K, the groups of a grouped GEMM); M is a
    run-time argument (deep_gemm's JIT; SGLang's start-up warm-up,
    deep_gemm_wrapper/compile_utils.py, compiles each such kernel over a
    list of M)."""
    function: str            # deep_gemm.<name>
    n: int
    k: int
    groups: Optional[int]    # grouped (contiguous or masked): the weight groups
    dtypes: str              # A's and B's
    masked: bool = False     # M: each group's rows at most (masked_m's bound)

    @property
    def text(self) -> str:
        g = f" groups={self.groups}" if self.groups else ""
        return f"{self.function} N={self.n} K={self.k}{g} {self.dtypes}"


def deep_gemm_uses(signatures: Iterable[Signature]) -> List[MoeUse]:
    """Each kernel DeepGEMM's own functions (torch.ops.deep_gemm, as SGLang
    calls them) needed, with the M of its calls per phase, most called (or,
    timed, most time) first: what to pre-compile. The shapes are gemm's
    reading of the call (one owner)."""
    uses: Dict[DeepGemmKey, MoeUse] = {}
    prefix = DEEP_GEMM_NAMESPACE + "."
    for sig in signatures:
        if not sig.operation.startswith(prefix):
            continue
        g = gemm_of(sig, {})
        if g is None:
            continue
        masked = g.groups is None and g.batch > 1  # masked: A [G, M_max, K], one batch per group
        key = DeepGemmKey(sig.operation.rsplit(".", 1)[0], g.n, g.k, g.groups or (g.batch if masked else None),
                          f"{g.a_dtype},{g.b_dtype}", masked)
        u = uses.get(key)
        if u is None:
            u = uses[key] = MoeUse(key, g.k)  # type: ignore[arg-type]
            u.operations.append(key.function)
            if masked:
                u.assumed.append("masked: M is each group's rows at most (A's M_max)")
        count_call(u, sig, g.m)
    return ranked(uses.values(), lambda u: u.key.function, lambda u: u.key.n,  # type: ignore[attr-defined]
                  lambda u: u.key.k)  # type: ignore[attr-defined]

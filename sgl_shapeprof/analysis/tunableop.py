"""GEMMs as PyTorch TunableOp untuned entries, the input of offline tuning:

    PYTORCH_TUNABLEOP_ENABLED=1 PYTORCH_TUNABLEOP_TUNING=1 python -c \\
      "import torch.cuda.tunable as t; t.tune_gemm_in_file('gemms.csv')"

One line per distinct GEMM, `<op signature>,<params signature>`, as torch
2.7-2.15 record them with PYTORCH_TUNABLEOP_RECORD_UNTUNED=1 (GemmCommon.h,
TunableGemm.h). cuBLAS is column-major, so torch computes C = A @ B as
C^T = B^T A^T: the BLAS m is torch's N, the first layout letter describes
torch's second operand, and a row-major operand is "N" with ld = its row
length. Records made with arguments (`--args`) hold strides: then a 2-D
GEMM's (mm, addmm, linear, 2-D matmul) transposes and leading dimensions
are those torch's addmm computes from them (prepare_matrix_for_cublas in
ATen/native/cuda/Blas.cpp: a row-major operand is "N" with ld = stride[0],
a column-major one "T" with ld = stride[1], any other is copied contiguous
first). Without strides the export assumes contiguous operands; where that
decides the layout (mm/addmm's mat2 may be a transposed weight view), the
entry is marked as assumed, as are batched GEMMs (their strides are not
read).

`results_coverage` compares GEMMs with a TunableOp results file
(`tunableop_results<device>.csv`: `Validator,...` lines, then
`<op signature>,<params signature>,<kernel>,<time>`): a GEMM is tuned when
its untuned line's two fields are a results line's first two.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import math
from typing import Dict, List, Optional, Tuple

from .gemm import Gemm

# torch dtype -> TunableOp's spelling (TypeName<T> in TunableGemm.h)
_DTYPES = {"float16": "Half", "bfloat16": "BFloat16", "float32": "float", "float64": "double"}


def entry(g: Gemm) -> Tuple[Optional[str], str]:
    """(line, note): the untuned line for a GEMM, or (None, why not). The
    note says what was assumed."""
    name = g.operation.split(".")[1] if g.operation.count(".") >= 2 else g.operation
    t = _DTYPES.get(g.a_dtype)
    if name in ("_scaled_mm", "_int_mm"):
        return None, f"{name}: its TunableOp entry needs scaling modes the records do not hold"
    if t is None or g.b_dtype != g.a_dtype:
        return None, f"dtypes {g.a_dtype},{g.b_dtype}: TunableOp tunes half, bfloat16, float, double GEMMs"
    if g.out_dtype and g.out_dtype != g.a_dtype:
        return None, f"output {g.out_dtype} from {g.a_dtype} inputs is not tuned by TunableOp"
    if name == "custom" or name not in ("mm", "addmm", "bmm", "baddbmm", "linear", "matmul"):
        return None, "custom operator: not a torch GEMM TunableOp sees"
    m, n, k = g.m, g.n, g.k
    # BLAS operands: a = torch's B (N x K as K x N), b = torch's A
    if g.b_layout == "NK":  # linear's weight, used as weight.t()
        layout, lda = "TN", k
    else:
        layout, lda = "NN", n
    ldb, ldc = k, n
    note = "" if name == "linear" else "assumes contiguous operands"
    two_d = name in ("mm", "addmm", "linear") or (name == "matmul" and len(g.a_shape) == 2 == len(g.b_shape))
    if two_d and g.a_stride is not None and g.b_stride is not None:
        a_st = _folded(g.a_shape, g.a_stride)
        # B as the K x N matrix torch multiplies by (linear: weight.t())
        b_st = list(reversed(g.b_stride)) if g.b_layout == "NK" else g.b_stride
        ta, lda = _blas_operand([k, n], b_st)
        tb, ldb = _blas_operand([m, k], a_st) if a_st is not None else ("N", k)
        layout, note = ta + tb, ""
    if name in ("bmm", "baddbmm") or (name == "matmul" and g.batch > 1):
        if name == "matmul" and len(g.b_shape) < 3:
            # a 2-D right operand is folded into one mm over the batch
            m, batch = m * g.batch, 1
        else:
            batch = g.batch
        if batch > 1:
            params = f"{layout.lower()}_{n}_{m}_{k}_B_{batch}_ld_{lda}_{ldb}_{ldc}"
            return f"GemmStridedBatchedTunableOp_{t}_{layout},{params}", note
    params = f"{layout.lower()}_{n}_{m}_{k}_ld_{lda}_{ldb}_{ldc}"
    op = "GemmAndBiasTunableOp" if g.bias and name in ("linear", "addmm") and t != "double" else "GemmTunableOp"
    if op == "GemmAndBiasTunableOp" and min(m, n, k) <= 1:
        op = "GemmTunableOp"  # cuBLASLt's bias epilogue is skipped for degenerate shapes
    return f"{op}_{t}_{layout},{params}", note


def _contiguous(size: List[int], stride: List[int]) -> bool:
    expected = 1
    for sz, st in zip(reversed(size), reversed(stride)):
        if sz != 1 and st != expected:
            return False
        expected *= sz
    return True


def _blas_operand(size: List[int], stride: List[int]) -> Tuple[str, int]:
    """("N" or "T", ld) for one operand of a 2-D GEMM whose result is
    row-major, as torch's prepare_matrix_for_cublas decides it."""
    if math.prod(size) == 0 or _contiguous(size, stride):
        return "N", stride[0] if math.prod(size) else size[1]
    if _contiguous(size[::-1], stride[::-1]):  # column-major: dense, not contiguous
        return "T", stride[1]
    if stride[0] == 1 and stride[1] >= max(1, size[0]):
        return "T", stride[1]
    if stride[1] == 1 and stride[0] >= max(1, size[1]):
        return "N", stride[0]
    return "N", size[1]  # copied contiguous first


def _folded(shape: List[int], stride: List[int]) -> Optional[List[int]]:
    """The strides of a >2-D input folded to (rows, K), as linear's view
    does, or None when it cannot be a view (torch copies it contiguous)."""
    if len(shape) <= 2:
        return list(stride) if len(shape) == 2 else None
    for i in range(len(shape) - 2):
        if shape[i] != 1 and stride[i] != stride[i + 1] * shape[i + 1]:
            return None
    return [stride[-2], stride[-1]]


def results_lines(text: str) -> Dict[Tuple[str, str], str]:
    """A TunableOp results file's tuned entries: (op, params) -> kernel.
    ValueError for a line that is neither a Validator line nor an entry."""
    out: Dict[Tuple[str, str], str] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(",")
        if parts[0] == "Validator":
            continue
        if len(parts) < 4 or "TunableOp" not in parts[0]:
            raise ValueError(f"line {i} is not a TunableOp results entry: {line[:80]!r}")
        out[(parts[0], parts[1])] = parts[2]
    return out


@dataclass
class GemmTuned:
    gemm: Gemm
    line: Optional[str]       # its untuned line, None when TunableOp does not tune it
    note: str                 # why not, or what was assumed
    kernel: Optional[str]     # the kernel the results file holds for it


def results_coverage(gs: List[Gemm], tuned: Dict[Tuple[str, str], str]) -> List[GemmTuned]:
    """Each GEMM with its entry and the tuned kernel, if any; the GEMMs
    TunableOp does not tune have line None."""
    out = []
    for g in gs:
        line, note = entry(g)
        kernel = tuned.get(tuple(line.split(",", 1))) if line else None  # type: ignore[arg-type]
        out.append(GemmTuned(g, line, note, kernel))
    return out


def tunable_calls(cov: List[GemmTuned]) -> Tuple[int, int]:
    """(calls of GEMMs TunableOp tunes, calls of those the results tune)."""
    n = sum(c.gemm.count for c in cov if c.line)
    return n, sum(c.gemm.count for c in cov if c.line and c.kernel)


@dataclass
class Untuned:
    """The TunableOp untuned file's lines for some GEMMs."""
    lines: List[str] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)  # "<gemm>: why not"
    assumed: int = 0  # lines that assume contiguous operands

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def untuned(gs: List[Gemm]) -> Untuned:
    u = Untuned()
    for g in gs:
        line, note = entry(g)
        if line is None:
            u.skipped.append(f"{g.operation} {g.m}x{g.n}x{g.k}: {note}")
        elif line not in u.lines:
            u.lines.append(line)
            u.assumed += bool(note)
    return u

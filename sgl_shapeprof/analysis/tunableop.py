"""GEMMs as PyTorch TunableOp untuned entries, the input of offline tuning:

    PYTORCH_TUNABLEOP_ENABLED=1 PYTORCH_TUNABLEOP_TUNING=1 python -c \\
      "import torch.cuda.tunable as t; t.tune_gemm_in_file('gemms.csv')"

One line per distinct GEMM, `<op signature>,<params signature>`, as torch
2.7-2.15 record them with PYTORCH_TUNABLEOP_RECORD_UNTUNED=1 (GemmCommon.h,
TunableGemm.h). cuBLAS is column-major, so torch computes C = A @ B as
C^T = B^T A^T: the BLAS m is torch's N, the first layout letter describes
torch's second operand, and a row-major operand is "N" with ld = its row
length. Records hold shapes, not strides, so the export assumes contiguous
operands; where that decides the layout (mm/addmm's mat2 may be a
transposed weight view), the entry is marked as assumed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

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

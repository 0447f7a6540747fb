"""Kernel libraries' API calls read for what they compute: their GEMMs
(M, N, K), their fused MoE (tokens, experts, top-k, hidden and
intermediate sizes: two grouped GEMMs) and their attention (batch, heads,
head dim, query and KV lengths). Each function's dimensions come from its
own parameters, by name, as FlashInfer 0.7.2 defines them and SGLang 0.5.23
calls them (docs/kernels.md#what-gemm-cost-and-tune-read-of-them). A record
whose values do not fit is read as nothing, never guessed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ..integrations.flashinfer.seam import PREFIX as FLASHINFER_PREFIX
from ..integrations.flashinfer.templates import templates_of
from ..records.ledger import is_launch
from ..records.signature import Signature

# FlashInfer's API calls: its door's operations (its seam's prefix)
FLASHINFER = f"{FLASHINFER_PREFIX}:"
# FP4 values per stored element, where a tensor of this dtype holds packed
# FP4 (two per byte; SGLang views them as int64 for cutlass: sixteen)
PACKED = {"torch.uint8": 2, "torch.float4_e2m1fn_x2": 2}


def _shape(sig: Signature, name: str) -> Optional[List[int]]:
    v = sig.inputs.get(name)
    return list(v["shape"]) if isinstance(v, dict) and isinstance(v.get("shape"), list) else None


def _dtype(sig: Signature, name: str) -> str:
    v = sig.inputs.get(name)
    return str(v.get("dtype", "")) if isinstance(v, dict) else ""


def _list(sig: Signature, name: str) -> Optional[List[Optional[dict]]]:
    v = sig.inputs.get(name)
    return v if isinstance(v, list) else None


def _int(sig: Signature, name: str) -> Optional[int]:
    v = (sig.args or {}).get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def function_of(operation: str) -> Optional[str]:
    """'fused_moe.core.trtllm_bf16_moe' of a FlashInfer record, else None."""
    return operation[len(FLASHINFER):].split("#", 1)[0] if operation.startswith(FLASHINFER) else None


# ---- GEMMs: function -> (A's name, B's name, (M, N, K, batch) from the record)
def _mk(a: str, b: str, n_of: Callable[[List[int], List[int]], int], k_pack: bool = False):
    def dims(sig: Signature) -> Optional[Tuple[int, int, int, int]]:
        sa, sb = _shape(sig, a), _shape(sig, b)
        if not sa or not sb or len(sa) != 2 or len(sb) != 2:
            return None
        k = sa[1] * (PACKED.get(_dtype(sig, a), 1) if k_pack else 1)
        return sa[0], n_of(sa, sb), k, 1
    return a, b, dims


def _mm_bf16_fp4(sig: Signature) -> Optional[Tuple[int, int, int, int]]:
    sa, out = _shape(sig, "a"), sig.outputs
    if not sa or len(sa) != 2 or not isinstance(out, dict) or len(out.get("shape", [])) != 2:
        return None
    return sa[0], out["shape"][1], sa[1], 1  # the weight's layout is its backend's: N from the output


# Hand-written where FlashInfer's templates cannot tell: they name a tensor's
# stored dimensions, and these two hold packed FP4 (mm_fp4's a and b are
# uint8, two values a byte: its template's K is the stored one), or a weight
# whose layout its backend chooses (mm_bf16_fp4: five templates, one per
# backend, each shape fitting another's)
GEMMS: Dict[str, Tuple[str, str, Callable]] = {
    "gemm.gemm_base.mm_fp4": _mk("a", "b", lambda sa, sb: sb[1], k_pack=True),  # b: the weight, transposed
    "gemm.gemm_bf16_fp4.mm_bf16_fp4": ("a", "b", _mm_bf16_fp4),
}


# ---- FlashInfer's own templates (integrations/flashinfer/templates.py)
def _tensor_shape(sig: Signature, d: dict) -> Optional[List[int]]:
    v = sig.inputs.get(d["param"])
    if "tuple_idx" in d:
        v = v[d["tuple_idx"]] if isinstance(v, list) and len(v) > d["tuple_idx"] else None
    shape = v.get("shape") if isinstance(v, dict) else None
    return shape if isinstance(shape, list) else None


def _give(axes: Dict[str, int], dims: List[str], shape: List[int], first: bool) -> bool:
    """Names shape's sizes by dims into axes; False on a literal dimension
    of another size, or (not first) an axis already of another size."""
    for name, size in zip(dims, shape):
        if name.isdigit():
            if int(name) != size:
                return False
        elif axes.setdefault(name, size) != size and not first:
            return False
    return True


def _bind(template: dict, sig: Signature) -> Optional[Dict[str, int]]:
    """The template's axes as the record gives them, by FlashInfer's own
    rule (TraceTemplate._build_axis_extractors): an axis is the first passed
    tensor's that carries it, else a scalar named after it. None when the
    record does not fit the template (a tensor of another rank, a literal
    dimension of another size): a function with several templates (one per
    back-end) has the one its values fit."""
    axes: Dict[str, int] = {}
    for key, d in template["inputs"].items():
        if d.get("scalar"):
            continue
        shape = _tensor_shape(sig, d)
        if shape is None:
            continue  # not passed (None, optional): no axis from it
        if len(shape) != len(d["dims"]) or not _give(axes, d["dims"], shape, first=True):
            return None
    for key, d in template["inputs"].items():
        v = _int(sig, d["param"]) if d.get("scalar") and key in template["axes"] else None
        if v is not None:
            axes.setdefault(key, v)
    return axes


def bind_template(sig: Signature) -> List[Tuple[dict, Dict[str, int]]]:
    """A FlashInfer record's templates that its values fit, each with its
    axes, in FlashInfer's order."""
    fn = function_of(sig.operation)
    found = []
    for template in templates_of(fn) if fn else []:
        axes = _bind(template, sig)
        if axes is not None:
            found.append((template, axes))
    return found


def template_axes(sig: Signature) -> Optional[Tuple[dict, Dict[str, int]]]:
    """A FlashInfer record's template (the first its values fit) and axes,
    or None."""
    found = bind_template(sig)
    return found[0] if found else None


# the templates whose op_type is one of these are GEMMs: gemm_bf16, gemm_fp8,
# gemm_fp4, bmm_fp8, segment_gemm, ...
GEMM_OP_TYPES = ("gemm_", "bmm_", "segment_gemm")
# the axis of a GEMM's rows, by how its template names it: rows of one
# matrix, all groups' rows (segment GEMM), or each group's at most (masked)
ROW_AXES = ("M", "total_rows", "M_max")
GROUP_AXES = ("num_groups",)
# a masked grouped GEMM's label: M is each group's capacity, the rows that
# ran are in its masked_m's values (not recorded)
MASKED = "masked: rows at most"


def _template_gemm(sig: Signature) -> Optional["LibraryGemm"]:
    found = template_axes(sig)
    if found is None or not found[0]["op_type"].startswith(GEMM_OP_TYPES):
        return None
    template, axes = found
    rows = next((r for r in ROW_AXES if r in axes), None)
    tensors = [d for d in template["inputs"].values() if not d.get("scalar")]
    a = next((d for d in tensors if rows in d["dims"] and "K" in d["dims"]), None)
    b = next((d for d in tensors if "N" in d["dims"] and d is not a), None)
    if a is None or b is None:
        return None
    # a GEMM's M, N, K are its two operands': they must agree (a template
    # names one layout of its operands, a call may pass another)
    operands: Dict[str, int] = {}
    for d in (a, b):
        shape = _tensor_shape(sig, d)
        if shape is None or not _give(operands, d["dims"], shape, first=False):
            return None
    m, n, k = operands.get(rows), operands.get("N"), operands.get("K")
    if not all(isinstance(x, int) and x > 0 for x in (m, n, k)):
        return None
    batch, group_axis, part = 1, None, ""
    if rows == "M_max":  # DeepGEMM's masked layout: batch_size groups of at most M_max rows each
        batch, part = axes.get("batch_size", 1), MASKED
    elif rows == "total_rows":  # a segment GEMM: batch_size weights, the rows split among them
        group_axis = "batch_size"
    elif template["op_type"].startswith("bmm_"):
        batch = axes.get("batch_size", 1)
    else:
        group_axis = next((g for g in GROUP_AXES if g in axes), None)
    groups = axes.get(group_axis) if group_axis else None
    # its per-group inputs: those whose first axis is its groups'
    per_group = tuple(d["param"] for d in tensors if d["dims"][:1] == [group_axis]) if groups else ()
    return LibraryGemm(m, n, k, batch, a["param"], b["param"], part, groups=groups,  # type: ignore[arg-type]
                       per_group=per_group)


@dataclass
class LibraryGemm:
    """One GEMM a library call computes: (M, N, K, batch), its two inputs."""
    m: int
    n: int
    k: int
    batch: int
    a: str
    b: str
    part: str = ""  # of a fused MoE: "up" (gate and up projections) or "down"
    groups: Optional[int] = None  # of a grouped GEMM: its weights' groups (experts), rows split among them
    per_group: Tuple[str, ...] = ()  # ...and its inputs that hold one part per group
    experts: Optional[int] = None  # of a fused MoE: the experts here (its weights'), each token to top_k
    top_k: Optional[int] = None


@dataclass
class MoeCall:
    """A fused MoE call: tokens in, each sent to top_k of experts (of them
    local_experts here), hidden size, intermediate size, the up GEMM's
    width (2x intermediate when gated)."""
    tokens: int
    hidden: int
    intermediate: int
    up_width: int
    experts: Optional[int]
    local_experts: Optional[int]
    top_k: int

    def gemms(self) -> List[LibraryGemm]:
        rows = self.tokens * self.top_k  # each token once per expert it goes to
        e = self.local_experts or self.experts
        return [LibraryGemm(rows, self.up_width, self.hidden, 1, "hidden_states", "gemm1_weights", "up",
                            experts=e, top_k=self.top_k),
                LibraryGemm(rows, self.hidden, self.intermediate, 1, "hidden_states", "gemm2_weights", "down",
                            experts=e, top_k=self.top_k)]


MOE_PREFIX = "fused_moe.core.trtllm_"


def moe_of(sig: Signature) -> Optional[MoeCall]:
    """The MoE call a FlashInfer trtllm_*_moe record is, or None."""
    fn = function_of(sig.operation)
    if fn is None or not fn.startswith(MOE_PREFIX) or not fn.endswith("_moe"):
        return None
    hs, w1 = _shape(sig, "hidden_states"), _shape(sig, "gemm1_weights")
    top_k, inter = _int(sig, "top_k"), _int(sig, "valid_intermediate_size") or _int(sig, "intermediate_size")
    if not hs or len(hs) != 2 or not w1 or len(w1) not in (3, 4) or not top_k or not inter:
        return None
    hidden = _int(sig, "valid_hidden_size") or hs[1] * PACKED.get(_dtype(sig, "hidden_states"), 1)
    shared = _int(sig, "num_fused_shared_experts") or 0
    # gemm1_weights: [E, up, H] (MajorK), or [E, H/block, up, block] (BlockMajorK)
    up = w1[1] if len(w1) == 3 else w1[2]
    return MoeCall(hs[0], hidden, inter, up, _int(sig, "num_experts"), _int(sig, "local_num_experts") or w1[0],
                   top_k + max(shared, 0))


# ---- how a GEMM's weight is scaled (FP8, INT8: its scale tensor's shape)
def _fit(size: int, tiles: int) -> Optional[int]:
    """The block along a dimension of `size` that makes `tiles` blocks: the
    powers of two that scaled GEMMs use, 128 first."""
    for b in (128, 64, 256, 32, 512, 16):
        if -(-size // b) == tiles:
            return b
    return None


def block_from_scale(w: dict, scale: Optional[dict]) -> Optional[Tuple[int, int]]:
    """A block shape that fits a block-wise weight scale (E, ceil(N/bn),
    ceil(K/bk)): the powers of two that give its tile counts, 128 first."""
    if scale is None or len(scale["shape"]) != 3 or len(w["shape"]) != 3:
        return None
    _, rows, cols = w["shape"]
    _, tr, tc = scale["shape"]
    if tr <= 1 and tc <= 1 or tc == 1:
        return None  # per-tensor or per-channel
    bn, bk = _fit(rows, tr), _fit(cols, tc)
    return (bn, bk) if bn and bk else None


def positive_dims(v: object) -> Optional[List[int]]:
    """A shape of positive whole numbers, or None (records are untrusted)."""
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        return None
    return v


def _scale_names(b: str) -> Tuple[str, ...]:
    """The names a GEMM's weight `b` has its scales under, by the libraries'
    own spellings: B_scale (FlashInfer's bmm_fp8), Bs (SGLang's DeepGEMM
    op), scales_b (sgl-kernel's mat_b), b_scales (vLLM's cutlass b),
    gemm1_weights_scale (FlashInfer's MoE), b_scale_ptr (Triton's b_ptr),
    sfb (DeepGEMM's b), scale_b (aten._scaled_mm's mat2)."""
    if b.endswith("_ptr"):
        return (b[:-len("_ptr")] + "_scale_ptr",)
    last = b.rsplit("_", 1)[-1]
    return (b + "_scale", b + "_scales", b + "s", "scales_" + last, "sf" + b, "scale_b" if b == "mat2" else "")


# scales held as numbers (not packed: Blackwell's UE8M0 scales are int32, four to a word)
_SCALE_DTYPES = {"torch.float32", "torch.bfloat16", "torch.float16", "torch.float8_e8m0fnu"}


def weight_scaling(inputs: dict, b: str, n: int, k: int, layout: str = "") -> Optional[str]:
    """How a GEMM's weight (input `b`: [N, K] or [K, N] -- layout "NK",
    "KN", or "" to tell from N and K -- one per group in front where
    grouped) is scaled, from its scale tensor's shape: "per-tensor",
    "per-channel" (one scale per N), "block [bn, bk]"; None without a
    scale tensor of numbers, or one of another shape."""
    w = inputs.get(b)
    scale = next((inputs[x] for x in _scale_names(b) if x and isinstance(inputs.get(x), dict)), None)
    ws = positive_dims(w.get("shape")) if isinstance(w, dict) else None
    ss = positive_dims(scale.get("shape")) if scale is not None and scale.get("dtype") in _SCALE_DTYPES else None
    if ws is None or ss is None or len(ws) < 2:
        return None
    if len(ws) == 3 and ss and ss[0] == ws[0]:
        ws, ss = ws[1:], ss[1:]  # one per group (expert)
    rows, cols = ws[-2:]
    nk = layout == "NK" or not layout and (rows, cols) == (n, k)
    if (rows, cols) != ((n, k) if nk else (k, n)):
        return None
    if all(x == 1 for x in ss):
        return "per-tensor"
    if ss in ([n], [n, 1] if nk else [1, n]):
        return "per-channel"
    if len(ss) != 2:
        return None
    br, bc = _fit(rows, ss[0]), _fit(cols, ss[1])
    if not br or not bc:
        return None
    bn, bk = (br, bc) if nk else (bc, br)
    return f"block [{bn}, {bk}]"


# ---- what a fused MoE call reads of its experts' weights
@dataclass
class ExpertWeights:
    """A fused MoE call's per-expert inputs (each one's first dimension the
    experts: weights, their scales and biases), the experts there are, and
    the rows it computes (tokens x top-k: a row is one token through one
    expert)."""
    prefixes: Tuple[str, ...]  # its per-expert inputs' parameter names begin so
    experts: int
    rows: int
    names: Tuple[str, ...] = ()  # ...or are these

    @property
    def read(self) -> int:
        """The experts whose weights the call reads, at most: each row reads
        one expert's, so min(E, rows) (fewer when rows share an expert; the
        routing's values are not recorded, only its shapes)."""
        return max(1, min(self.experts, self.rows))

    def share(self, name: str, value: object) -> float:
        """The part of input `name` the call reads: read / E of a
        per-expert input, all of any other."""
        shape = value.get("shape") if isinstance(value, dict) else None
        if (name in self.names or name.startswith(self.prefixes)) and isinstance(shape, list) and shape and shape[0] == self.experts:
            return self.read / self.experts
        return 1.0


# SGLang's Triton fused_moe_kernel (sglang/kernels/ops/moe/fused_moe_triton_kernels.py,
# SGLang 0.5.23): b_ptr [E, N, K] and its b_scale_ptr / b_bias_ptr per expert;
# num_valid_tokens = tokens x top_k, the rows it computes
TRITON_MOE = "fused_moe_kernel"


def expert_weights(sig: Signature) -> Optional[ExpertWeights]:
    """A fused MoE call's per-expert inputs (FlashInfer's trtllm MoE, SGLang's
    Triton fused_moe_kernel launch), or None."""
    moe = moe_of(sig)
    if moe is not None:
        experts = moe.local_experts or moe.experts
        return ExpertWeights(("gemm1_", "gemm2_"), experts, moe.tokens * moe.top_k) if experts else None
    grouped = _template_gemm(sig) if sig.operation.startswith(FLASHINFER) else None
    if grouped is not None and grouped.groups and grouped.per_group:
        return ExpertWeights((), grouped.groups, grouped.m, grouped.per_group)
    if is_launch(sig.operation) and sig.operation.rsplit(".", 1)[-1] == TRITON_MOE:
        b, rows = positive_dims(_shape(sig, "b_ptr")), _int(sig, "num_valid_tokens")
        if b and len(b) == 3 and rows and rows > 0:
            return ExpertWeights(("b_",), b[0], rows)
    return None


def gemms_of(sig: Signature) -> List[LibraryGemm]:
    """The GEMMs a kernel library's API call computes ([] when it is none,
    or its values do not fit)."""
    if sig.error is not None or sig.incomplete:
        return []
    moe = moe_of(sig)
    if moe is not None:
        return moe.gemms()
    spec = GEMMS.get(function_of(sig.operation) or "")
    if spec is None:
        g = _template_gemm(sig)
        return [g] if g is not None else []
    dims = spec[2](sig)
    return [LibraryGemm(*dims, spec[0], spec[1])] if dims and all(d > 0 for d in dims) else []


# ---- attention
@dataclass
class AttentionCall:
    """What an attention call computes, as far as shapes tell: batch, query
    and KV heads, head dim, query tokens in all and per request (the
    longest), KV tokens per request (an upper bound: a length argument the
    caller gave) or in all (ragged: exact). None where the record cannot
    tell."""
    batch: Optional[int]
    q_heads: int
    kv_heads: Optional[int]
    head_dim: int
    q_tokens: int
    q_len: Optional[int]
    kv_len_max: Optional[int]
    kv_tokens: Optional[int] = None
    kv_len: Optional[int] = None  # every request's KV length, exact (SDPA's dense tensors)


def _paged_kv(sig: Signature, name: str, layout: Optional[str]) -> Optional[int]:
    """KV heads of a paged cache: a (k, v) pair of [pages, Hkv, page, D]
    (HND) or [pages, page, Hkv, D] (NHD), or one [pages, 2, ...] tensor, or
    SGLang's page-size-1 [slots, Hkv, D] pair; None for a 4-D one whose
    layout the call does not say (a wrapper's is set when it is built)."""
    pair = _list(sig, name)
    t = pair[0] if pair and isinstance(pair[0], dict) else sig.inputs.get(name)
    s = list(t["shape"]) if isinstance(t, dict) and isinstance(t.get("shape"), list) else None
    if not s:
        return None
    if not pair and len(s) == 5:
        s = [s[0]] + s[2:]  # [pages, 2, ...]: the pair's halves
    if len(s) == 3:
        return s[1]
    if len(s) == 4 and layout:
        return s[1] if layout.upper() == "HND" else s[2]
    return None


def _decode(sig: Signature) -> Optional[AttentionCall]:
    q = _shape(sig, "query")
    if not q or len(q) != 3:
        return None
    cum = _shape(sig, "cum_seq_lens_q")
    seq = _shape(sig, "seq_lens")
    layout = str((sig.args or {}).get("kv_layout") or "HND")
    if cum:
        batch, q_len = cum[0] - 1, _int(sig, "max_q_len")
    else:
        batch = seq[-1] if seq else None
        q_len = _int(sig, "q_len_per_req") or 1
    return AttentionCall(batch, q[1], _paged_kv(sig, "kv_cache", layout), q[2], q[0], q_len,
                         _int(sig, "max_seq_len"))


def _decode_mla(sig: Signature) -> Optional[AttentionCall]:
    q = _shape(sig, "query")
    if not q or len(q) not in (3, 4):
        return None
    cum = _shape(sig, "cum_seq_lens_q")
    if len(q) == 4:
        batch, q_len, heads, dim, tokens = q[0], q[1], q[2], q[3], q[0] * q[1]
    else:
        batch, q_len, heads, dim, tokens = (cum[0] - 1 if cum else None), _int(sig, "max_q_len"), q[1], q[2], q[0]
    top = _int(sig, "sparse_mla_top_k") or 0
    return AttentionCall(batch, heads, 1, dim, tokens, q_len, top if top > 0 else _int(sig, "max_seq_len"))


def _context(sig: Signature) -> Optional[AttentionCall]:
    q = _shape(sig, "query")
    if not q or len(q) != 3:
        return None
    layout = str((sig.args or {}).get("kv_layout") or "HND")
    return AttentionCall(_int(sig, "batch_size"), q[1], _paged_kv(sig, "kv_cache", layout), q[2], q[0],
                         _int(sig, "max_q_len"), _int(sig, "max_kv_len"))


def _ragged(q_name: str, k_name: str) -> Callable[[Signature], Optional[AttentionCall]]:
    def read(sig: Signature) -> Optional[AttentionCall]:
        q, k = _shape(sig, q_name), _shape(sig, k_name)
        if not q or len(q) != 3 or not k or len(k) != 3:
            return None
        return AttentionCall(_int(sig, "batch_size"), q[1], k[1], q[2], q[0], _int(sig, "max_q_len"),
                             _int(sig, "max_kv_len"), kv_tokens=k[0])
    return read


def _wrapper_run(sig: Signature) -> Optional[AttentionCall]:
    q = _shape(sig, "q")
    if not q or len(q) != 3:
        return None
    return AttentionCall(None, q[1], _paged_kv(sig, "paged_kv_cache", None), q[2], q[0], None, None)


ATTENTION: Dict[str, Callable[[Signature], Optional[AttentionCall]]] = {
    "decode.trtllm_batch_decode_with_kv_cache": _decode,
    "mla._core.trtllm_batch_decode_with_kv_cache_mla": _decode_mla,
    "prefill.trtllm_batch_context_with_kv_cache": _context,
    "prefill.trtllm_ragged_attention_deepseek": _ragged("query", "key"),
    "prefill.BatchPrefillWithRaggedKVCacheWrapper.run": _ragged("q", "k"),
    "decode.BatchDecodeWithPagedKVCacheWrapper.run": _wrapper_run,
    "prefill.BatchPrefillWithPagedKVCacheWrapper.run": _wrapper_run,
}


# torch's SDPA, as the dispatcher sees it (whole under inference_mode, else
# one of the backends' ops): query [B, H, L, D], key [B, Hkv, S, D] (exact:
# the tensors hold every token)
SDPA_OPS = ("aten.scaled_dot_product_attention", "aten._scaled_dot_product_flash_attention",
            "aten._scaled_dot_product_flash_attention_for_cpu", "aten._scaled_dot_product_efficient_attention",
            "aten._scaled_dot_product_cudnn_attention", "aten._scaled_dot_product_fused_attention_overrideable")


def _sdpa(sig: Signature) -> Optional[AttentionCall]:
    q, k = _shape(sig, "query"), _shape(sig, "key")
    if not q or not k or len(q) != 4 or len(k) != 4 or q[0] != k[0] or q[3] != k[3]:
        return None
    return AttentionCall(q[0], q[1], k[1], q[3], q[0] * q[2], q[2], k[2], kv_tokens=k[0] * k[2], kv_len=k[2])


# FlashAttention 3 in sgl-kernel (sglang-kernel 0.4.10's flash_ops schema:
# fwd(Tensor q, Tensor k, Tensor v, ..., Tensor? cu_seqlens_q, ...,
# Tensor? seqused_k, int? max_seqlen_q, int? max_seqlen_k, Tensor?
# page_table, ...), called by sgl_kernel/flash_attn.py)
FA3_OP = "sgl_kernel.fwd"


def _fa3(sig: Signature) -> Optional[AttentionCall]:
    q, k = _shape(sig, "q"), _shape(sig, "k")
    if not q or not k or len(q) not in (3, 4) or len(k) not in (3, 4):
        return None
    cu_q, pages, used = _shape(sig, "cu_seqlens_q"), _shape(sig, "page_table"), _shape(sig, "seqused_k")
    if len(q) == 4:  # [B, Lq, H, D]
        batch, q_len, heads, dim, tokens = q[0], q[1], q[2], q[3], q[0] * q[1]
    else:  # [total_q, H, D], varlen
        batch = cu_q[0] - 1 if cu_q else None
        q_len, heads, dim, tokens = _int(sig, "max_seqlen_q"), q[1], q[2], q[0]
    kv_max = _int(sig, "max_seqlen_k")
    if pages and len(pages) == 2 and len(k) == 4:  # a paged cache [pages, page size, Hkv, D]
        return AttentionCall(batch if batch is not None else pages[0], heads, k[2], dim, tokens, q_len,
                             kv_max or pages[1] * k[1])
    if len(k) == 3:  # varlen keys [total_k, Hkv, D]: their total exact
        return AttentionCall(batch, heads, k[1], dim, tokens, q_len, kv_max, kv_tokens=k[0])
    if used:  # a cache [B, capacity, Hkv, D] holding seqused_k tokens each: the capacity a bound
        return AttentionCall(batch, heads, k[2], dim, tokens, q_len, kv_max or k[1])
    return AttentionCall(batch, heads, k[2], dim, tokens, q_len, k[1], kv_tokens=k[0] * k[1], kv_len=k[1])


def attention_of(sig: Signature) -> Optional[AttentionCall]:
    """The attention call a record is, or None."""
    qual = sig.operation.rsplit(".", 1)[0]
    if qual in SDPA_OPS or qual == FA3_OP:
        if sig.error is not None or sig.incomplete:
            return None
        return _sdpa(sig) if qual in SDPA_OPS else _fa3(sig)
    read = ATTENTION.get(function_of(sig.operation) or "")
    if read is None or sig.error is not None or sig.incomplete:
        return None
    try:
        return read(sig)
    except (TypeError, IndexError):  # values of another form than FlashInfer's
        return None



@dataclass
class MoeReading:
    """A fused MoE call as tokens, experts, top-k and its up projection's N
    and K (K the hidden size)."""
    tokens: int
    experts: int
    top_k: int
    n: int
    k: int

    @property
    def text(self) -> str:
        return f"MoE: tokens {self.tokens}, E {self.experts}, top-k {self.top_k}, N {self.n}, K {self.k}"


def moe_reading(sig: Signature) -> Optional[MoeReading]:
    """What a fused MoE call computes (FlashInfer's trtllm MoE, SGLang's
    Triton fused_moe_kernel launch; its fused-experts ops: tune/moe.py's
    moe_op_reading), or None."""
    if sig.error is not None or sig.incomplete:
        return None
    moe = moe_of(sig)
    if moe is not None:
        return MoeReading(moe.tokens, moe.local_experts or moe.experts or 0, moe.top_k, moe.up_width, moe.hidden)
    if is_launch(sig.operation) and sig.operation.rsplit(".", 1)[-1] == TRITON_MOE:
        b, rows, top_k = _shape(sig, "b_ptr"), _int(sig, "num_valid_tokens"), _int(sig, "top_k")
        n, k = _int(sig, "N"), _int(sig, "K")
        if b and len(b) == 3 and rows and top_k and n and k:
            return MoeReading(rows // top_k, b[0], top_k, n, k)
    return None


def reading_of(sig: Signature) -> Optional[str]:
    """What a kernel call computes, in words (analyze --show-shapes), or None."""
    att = attention_of(sig)
    if att is not None:
        kv = (f"kv len {att.kv_len}" if att.kv_len is not None else f"{att.kv_tokens} kv tokens"
              if att.kv_tokens is not None
              else f"kv len <= {att.kv_len_max}" if att.kv_len_max is not None else "kv len ?")
        return (f"attention: batch {'?' if att.batch is None else att.batch}, q heads {att.q_heads}, "
                f"kv heads {'?' if att.kv_heads is None else att.kv_heads}, head dim {att.head_dim}, "
                f"q len {'?' if att.q_len is None else att.q_len}, {kv}")
    moe = moe_reading(sig)
    return moe.text if moe is not None else None


def attention_calls(signatures: List[Signature]) -> List[Tuple[Signature, AttentionCall]]:
    """The attention calls among signatures, most calls first."""
    found = [(s, a) for s in signatures for a in [attention_of(s)] if a is not None]
    return sorted(found, key=lambda x: (-x[0].count, x[0].first_call))


@dataclass
class MoeGroup:
    """A library's fused-MoE calls of one shape but their token count: the
    tokens per call that ran, with their calls, per phase."""
    operation: str
    experts: Optional[int]
    local_experts: Optional[int]
    hidden: int
    intermediate: int
    up_width: int
    top_k: int
    dtype: str
    tokens: Dict[Tuple[Optional[str], int], int]  # (phase, tokens) -> calls

    @property
    def calls(self) -> int:
        return sum(self.tokens.values())


def moe_groups(signatures: List[Signature]) -> List[MoeGroup]:
    """The fused-MoE calls of kernel libraries, by shape, most called first."""
    groups: Dict[tuple, MoeGroup] = {}
    for s in signatures:
        m = moe_of(s) if s.error is None and not s.incomplete else None
        if m is None:
            continue
        dtype = _dtype(s, "hidden_states").replace("torch.", "")
        key = (s.operation, m.experts, m.local_experts, m.hidden, m.intermediate, m.up_width, m.top_k, dtype)
        g = groups.get(key)
        if g is None:
            g = groups[key] = MoeGroup(*key, tokens={})
        g.tokens[(s.phase, m.tokens)] = g.tokens.get((s.phase, m.tokens), 0) + s.count
    return sorted(groups.values(), key=lambda g: (-g.calls, g.operation))

"""Which config each launch of SGLang's fused-MoE Triton kernel ran (`tune`).

A launch record (FORMAT.md, "Kernel launches") holds the config the kernel
was launched with (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages),
and the shapes that name the config file SGLang reads for it. Each launch
is compared with what SGLang's own lookup gives for its device and M: the
tuned file's config for the nearest M (`get_moe_configs`; the `_down` file
for the down projection where there is one), or, with no file, SGLang's
`get_default_config`. A launch on the default config is an untuned shape.

SGLang's fused_experts launches the kernel twice per call (fused_moe.py):
the up projection (w13, top_k = the router's top-k, routing weights not
applied) and the down projection (w2, top_k = 1, routing weights applied).
The file is named by E and N = w2's last dimension, so the two are paired
by (E, tokens x top-k) to read N and M; what could not be read is said.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ...records import untrusted
from ...records.ledger import is_launch
from ...records.signature import Signature
from ...records.values import short_dtype

KERNEL = "fused_moe_kernel"
CONFIG = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def is_moe_launch(operation: str) -> bool:
    """SGLang's fused-MoE kernel, wherever its module lives in this release."""
    return is_launch(operation) and operation.partition(":")[2].startswith("sglang.") \
        and operation.rsplit(".", 1)[-1] == KERNEL


@dataclass
class MoeLaunch:
    """One distinct launch (a signature), with the config it ran."""
    e: int
    n: Optional[int]            # the config file's N (w2's last dimension); None: not known
    hidden: int                 # the model's hidden size (w13's K, w2's N)
    dtype: Optional[str]        # SGLang's dtype part of the file name (fp8_w8a8, ...; None: plain)
    block_shape: Optional[Tuple[int, int]]
    per_channel_quant: bool
    gemm: str                   # "up" or "down"
    m: Optional[int]            # tokens; None: not known
    top_k: Optional[int]
    phase: Optional[str]
    calls: int
    launched: Dict[str, int]
    expected: Optional[Dict[str, int]] = None
    source: str = ""            # "file", "down file", "default"; "": SGLang's default not known here
    file: Optional[str] = None
    tuned_m: Optional[int] = None
    assumed: List[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """tuned, default (an untuned shape), other (neither), unknown."""
        if self.expected is None:
            return "unknown"
        same = all(self.launched.get(f) == v for f, v in self.expected.items()
                   if f in CONFIG and f in self.launched)
        if not same:
            return "other"
        return "tuned" if self.source in ("file", "down file") else "default"

    def config_text(self, cfg: Optional[Dict[str, int]] = None) -> str:
        cfg = self.launched if cfg is None else cfg
        return " ".join(f"{f}={cfg[f]}" for f in CONFIG if f in cfg)


def _shape(v: object) -> Optional[List[int]]:
    return list(v["shape"]) if isinstance(v, dict) and isinstance(v.get("shape"), list) else None


def _int(args: dict, name: str) -> Optional[int]:
    v = args.get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _dtype(a: str, b: str, plain: Callable[[str, Dict[str, bool]], Optional[str]]) -> Optional[str]:
    """The dtype part of the file name, from the two operands' dtypes (the
    quantization flags are the kernel's constexprs on some releases and
    plain arguments on others)."""
    if b.startswith("float8"):
        return plain(a, {"use_fp8_w8a8": True})
    if b == "int8":
        return plain(a, {"use_int8_w8a8": True} if a == "int8" else {"use_int8_w8a16": True})
    return plain(a, {})


def moe_launches(signatures: List[Signature],
                 dtype_str: Callable[[str, Dict[str, bool]], Optional[str]]) -> List[MoeLaunch]:
    """Every distinct fused-MoE launch in the records, most called first."""
    raw = []
    for sig in signatures:
        if not is_moe_launch(sig.operation) or sig.error is not None or not sig.args or not sig.count:
            continue
        a, b = _shape(sig.inputs.get("a_ptr")), _shape(sig.inputs.get("b_ptr"))
        args = sig.args
        k, valid, top_k = _int(args, "K"), _int(args, "num_valid_tokens"), _int(args, "top_k")
        if a is None or b is None or len(b) != 3 or k is None or valid is None or top_k is None:
            continue
        raw.append([sig, a, b, k, valid, top_k, False])
    # which GEMM each is, within its (E, tokens x top-k): the down projection's
    # output width is the up one's K (the hidden size) and its K the up one's
    # output width (gated: half of it); top-k above 1 is the up projection's
    groups: Dict[Tuple[int, int], set] = {}
    for r in raw:
        groups.setdefault((r[2][0], r[4]), set()).add((r[2][1], r[3]))
    guessed = set()
    for r in raw:
        sig, b, k, top_k = r[0], r[2], r[3], r[5]
        if top_k > 1:
            continue
        others = groups[(b[0], r[4])] - {(b[1], k)}
        up_of = any(n2 == k and k2 in (b[1], b[1] // 2) for n2, k2 in others)    # this one's K is theirs N
        down_of = any(b[1] == k2 and k in (n2, n2 // 2) for n2, k2 in others)  # theirs K is this one's N
        if up_of != down_of:
            r[6] = down_of
        else:  # alone, or a square layer: SGLang weighs the routed experts in the down GEMM
            r[6] = bool((sig.args or {}).get("MUL_ROUTED_WEIGHT"))
            guessed.add(id(r))
    # the up launch of each (E, tokens x top-k) gives the router's top-k; the down one, N
    up_topk = {(b[0], valid): top_k for _, _, b, _, valid, top_k, down in raw if not down}
    down_n = {(b[0], valid): k for _, _, b, k, valid, _, down in raw if down}
    out = []
    for r in raw:
        sig, a, b, k, valid, top_k, down = r
        args = sig.args or {}
        e = b[0]
        assumed = []
        if id(r) in guessed:
            assumed.append("up or down projection taken from MUL_ROUTED_WEIGHT (no launch of the other "
                           "projection with telling shapes; SGLang weighs the down one unless "
                           "apply_router_weight_on_input)")
        if down:
            n: Optional[int] = k
            t = up_topk.get((e, valid))
            m = valid // t if t else None
            if t is None:
                assumed.append("no up-projection launch of this expert set to read the router's top-k: M unknown")
        else:
            n = down_n.get((e, valid))
            if n is None:
                n = b[1] // 2
                assumed.append(f"N = w13's {b[1]} / 2 (a gated activation; no down-projection launch to read it)")
            t, m = top_k, valid // top_k
        gn, gk = _int(args, "group_n") or 0, _int(args, "group_k") or 0
        a_dt = short_dtype(sig.inputs["a_ptr"].get("dtype", ""))
        b_dt = short_dtype(sig.inputs["b_ptr"].get("dtype", ""))
        launched = {f: v for f in CONFIG if isinstance(v := args.get(f), int)}
        out.append(MoeLaunch(e, n, b[1] if down else k, _dtype(a_dt, b_dt, dtype_str),
                             (gn, gk) if gn and gk else None, bool(args.get("per_channel_quant")),
                             "down" if down else "up", m, t, sig.phase, sig.count, launched,
                             assumed=assumed))
    # signatures that differ only in what the routing padded (EM, the grid) are one use of a config
    merged: Dict[tuple, MoeLaunch] = {}
    for x in out:
        key = (x.e, x.n, x.hidden, x.dtype, x.block_shape, x.per_channel_quant, x.gemm, x.m, x.top_k,
               x.phase, tuple(sorted(x.launched.items())))
        if key in merged:
            merged[key].calls += x.calls
        else:
            merged[key] = x
    return sorted(merged.values(), key=lambda x: (-x.calls, x.e, x.n or 0, x.gemm, x.m or 0))


def _table(path: str) -> Dict[int, Dict[str, int]]:
    with open(path, encoding="utf-8") as f:
        return {int(m): dict(cfg) for m, cfg in untrusted.loads(f.read()).items()}


def expect(launches: List[MoeLaunch], find: Callable[..., object],
           default: Optional[Callable[..., Optional[Dict[str, int]]]]) -> None:
    """Fills each launch's expected config. find(e, n, dtype, block_shape,
    per_channel_quant, down) -> the Lookup of that file (configs.lookup);
    default: SGLang's get_default_config, or None when SGLang is not
    importable (then a launch without a file is "unknown")."""
    for x in launches:
        if x.n is None or x.m is None:
            continue
        up = find(x.e, x.n, x.dtype, x.block_shape, x.per_channel_quant, False)
        look = up
        if x.gemm == "down":
            d = find(x.e, x.n, x.dtype, x.block_shape, x.per_channel_quant, True)
            if getattr(d, "path", None):
                look = d
        path = getattr(look, "path", None)
        if path:
            table = _table(path)
            x.tuned_m = min(table, key=lambda t: abs(t - x.m))  # type: ignore[operator]
            x.expected = dict(table[x.tuned_m])
            x.file = path
            x.source = "down file" if look is not up else "file"
            if look is not up:
                # both GEMMs share one alignment: SGLang keeps the up config's BLOCK_SIZE_M
                # (the tuned one's, else its default's)
                if getattr(up, "path", None):
                    up_table = _table(up.path)  # type: ignore[attr-defined]
                    up_cfg: Optional[Dict[str, int]] = up_table[min(up_table, key=lambda t: abs(t - x.m))]  # type: ignore[operator]
                else:
                    up_cfg = default(x.m, x.e, x.n, x.hidden, x.top_k or 1, x.dtype, False,
                                     list(x.block_shape) if x.block_shape else None) if default else None
                if up_cfg is None:
                    x.expected = None  # what SGLang would pick is not known here
                    continue
                x.expected["BLOCK_SIZE_M"] = up_cfg["BLOCK_SIZE_M"]
        elif default is not None:
            cfg = default(x.m, x.e, x.n, x.hidden, x.top_k or 1, x.dtype, False,
                          list(x.block_shape) if x.block_shape else None)
            if cfg is not None:
                x.expected, x.source = dict(cfg), "default"


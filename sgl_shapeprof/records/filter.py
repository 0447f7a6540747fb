"""Which calls a scan keeps (--filter-op, --phase, --passes, --min-elements,
--max-entries), and the operation names a filter that matched nothing was
probably meant for."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, List, Optional, Tuple

from .signature import Signature


@dataclass
class Filter:
    """Which calls a scan keeps."""
    op: Optional[str] = None               # regex, case-insensitive search
    phase: Optional[str] = None            # phase label
    passes: Optional[Tuple[int, int]] = None  # inclusive
    min_elements: int = 0                  # output elements at least
    max_entries: int = 0                   # records read at most (0: all)

    def __post_init__(self) -> None:
        self._op = re.compile(self.op, re.IGNORECASE) if self.op else None

    def keeps(self, sig: Signature) -> bool:
        if self._op is not None and not self._op.search(sig.operation):
            return False
        if self.phase is not None and sig.phase != self.phase:
            return False
        return sig.out_elements >= self.min_elements

    @property
    def active(self) -> bool:
        return bool(self.op or self.phase is not None or self.passes or self.min_elements)


def parse_passes(text: str) -> Tuple[int, int]:
    """'3-7', '5', '5-' -> inclusive range of pass numbers."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:(-)\s*(\d*)\s*)?", text)
    if not m:
        raise ValueError(f"--passes wants A-B, A or A- (pass numbers), not {text!r}")
    a = int(m.group(1))
    b = a if not m.group(2) else (int(m.group(3)) if m.group(3) else 2**62)
    if b < a:
        raise ValueError(f"--passes {text}: the range ends before it starts")
    return a, b


# Operators that do one job under different names: a filter for one of them
# was probably meant for all (inference_mode models run aten.linear, not mm).
_FAMILIES = [
    ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_mm", "_int_mm", "gemm", "dot"),
    ("conv", "convolution", "conv1d", "conv2d", "conv3d", "_convolution", "cudnn_convolution"),
    ("attention", "scaled_dot_product_attention", "_scaled_dot_product_efficient_attention",
     "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention", "sdpa", "softmax"),
    ("norm", "layer_norm", "group_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm",
     "batch_norm", "rmsnorm"),
]


def close_names(pattern: str, names: Iterable[str], n: int = 6) -> List[str]:
    """Operation names that look like what a filter was meant to find."""
    import difflib
    names = sorted(set(names))

    def short(x: str) -> str:
        return x.split(".")[1] if x.count(".") >= 2 else x
    word = re.sub(r"[^A-Za-z0-9_]+", " ", pattern).strip().lower()
    parts = [w for w in word.split() if w]
    hits: List[str] = []
    for fam in _FAMILIES:
        if any(w in fam or any(w in f for f in fam) for w in parts):
            hits += [x for x in names if short(x).lower() in fam and x not in hits]
    shorts = {short(x).lower(): x for x in names}
    for w in parts:
        for m in difflib.get_close_matches(w, list(shorts), n=n, cutoff=0.5):
            if shorts[m] not in hits:
                hits.append(shorts[m])
    return hits[:n]

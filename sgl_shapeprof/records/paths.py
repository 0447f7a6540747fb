"""Which records files a command reads: the paths named, globs and folders
expanded, in rank order."""
from __future__ import annotations

import glob
import os
from typing import Iterable, List, Tuple

from .reader import InputError, is_kernels, is_summary
from .worker import label_order


def expand_paths(patterns: Iterable[str]) -> List[str]:
    """Files named, with globs expanded (shapes.rank*.jsonl) in rank order;
    a folder stands for every records file in it and its subfolders (each
    node's folder gathered into one, say), in worker order."""
    out: List[str] = []
    def order(h: str) -> Tuple[Tuple[int, ...], str]:
        return (label_order(os.path.basename(h)), h)
    for p in patterns:
        if os.path.isdir(p):
            hits = [os.path.join(d, f) for d, _, files in os.walk(p) for f in files
                    if f.endswith((".jsonl", ".jsonl.zst")) and not is_kernels(f)]
            if not hits:
                raise InputError(f"no records file (*.jsonl) in folder {p}")
            out.extend(sorted(hits, key=order))
        elif glob.has_magic(p) and not os.path.exists(p):
            hits = glob.glob(p)
            if not hits:
                raise InputError(f"no file matches {p}")
            hits = [h for h in hits if not is_summary(h) and not is_kernels(h)] or hits
            out.extend(sorted(hits, key=order))
        else:
            out.append(p)
    return out

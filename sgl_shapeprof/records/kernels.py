"""The kernels file of a kernels-timed recording (shapes_kernels.jsonl,
FORMAT.md "Kernels"), read back and joined to the records.

The collector (csrc/core/sp_cupti.c) writes what CUPTI and the core said,
unjoined: kernels with the correlation id of the API call that launched
them; which correlation ids ran under which of our ids; which graph nodes
were made under which id, and which were cloned from which; what each id
became (a record's call_id, or a repeat of one); the logged passes' spans.
The join is here, so that it is tested on a synthetic stream where no GPU
is:

    kernel -> its correlation's id, else its graph node's (through clones)
           -> the call_id that id became: the kernel is that record's;
    a kernel with none, launched inside a logged pass, is unexplained
    (the ledger names it); one launched outside every logged pass is not
    the recording's.

A kernels file is untrusted data: a line that is not what the format says
is counted and left out, never raised."""
from __future__ import annotations

import bisect
import os
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import untrusted
from .reader import InputError, kernels_path_for

CLONE_DEPTH = 8  # a node cloned from a clone (a graph cloned, then instantiated)


@dataclass
class Kernel:
    name: str
    correlation: int
    start_ns: int
    end_ns: int
    device: int = 0
    stream: int = 0
    grid: Tuple[int, ...] = ()
    block: Tuple[int, ...] = ()
    graph: int = 0
    graph_node: int = 0
    launch_ns: Optional[int] = None

    @property
    def ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


@dataclass
class KernelsFile:
    path: str
    clock: str = ""
    offset_ns: int = 0  # added to a kernel's times to put it on CLOCK_MONOTONIC (0: CUPTI read that clock)
    kernels: List[Kernel] = field(default_factory=list)
    ext_of_correlation: Dict[int, int] = field(default_factory=dict)
    call_of_ext: Dict[int, Tuple[int, bool]] = field(default_factory=dict)  # -> (call_id, repeat)
    ext_of_node: Dict[int, int] = field(default_factory=dict)
    cloned_from: Dict[int, int] = field(default_factory=dict)
    pass_begins: List[int] = field(default_factory=list)
    pass_ends: List[int] = field(default_factory=list)
    dropped: int = 0
    incomplete: int = 0  # activity records CUPTI had not finished when their buffer came back
    ended: bool = False  # its last line is the collector's stop: nothing was cut
    bad_lines: int = 0


def _int(v) -> Optional[int]:
    return v if type(v) is int and v >= 0 else None


def _dims(v) -> Tuple[int, ...]:
    if isinstance(v, list) and len(v) == 3 and all(type(x) is int for x in v):
        return tuple(v)
    return ()


def _kernel(d: dict) -> Optional[Kernel]:
    name, corr, start, end = d.get("kernel"), _int(d.get("correlation")), _int(d.get("start_ns")), _int(d.get("end_ns"))
    if not isinstance(name, str) or corr is None or start is None or end is None:
        return None
    return Kernel(name, corr, start, end, _int(d.get("device")) or 0, _int(d.get("stream")) or 0,
                  _dims(d.get("grid")), _dims(d.get("block")), _int(d.get("graph")) or 0,
                  _int(d.get("graph_node")) or 0, _int(d.get("launch_ns")))


def read_kernels(path: str) -> KernelsFile:
    """The kernels file at path; InputError if it is not one."""
    kf = KernelsFile(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise InputError(f"cannot read kernels file {path}: {e.strerror or e}") from None
    with f:
        for n, raw in enumerate(f):
            try:
                d = untrusted.loads(raw)
            except ValueError:
                d = None
            if n == 0:
                if not isinstance(d, dict) or d.get("kernels_file") != 1:
                    raise InputError(f"{path} is not a kernels file (its first line is not "
                                     f"{{\"kernels_file\": 1, ...}})")
                kf.clock = d.get("clock") if isinstance(d.get("clock"), str) else ""
                mono, cupti = _int(d.get("monotonic_ns")), _int(d.get("cupti_ns"))
                if kf.clock == "cupti" and mono is not None and cupti is not None:
                    kf.offset_ns = mono - cupti  # CUPTI's own clock, read beside ours at the start
                continue
            if not isinstance(d, dict):
                kf.bad_lines += 1
                continue
            kf.ended = False
            if "kernel" in d:
                k = _kernel(d)
                if k is None:
                    kf.bad_lines += 1
                else:
                    if kf.offset_ns:
                        k.start_ns += kf.offset_ns
                        k.end_ns += kf.offset_ns
                        if k.launch_ns is not None:
                            k.launch_ns += kf.offset_ns
                    kf.kernels.append(k)
            elif "graph_node" in d:
                node, ext, src = _int(d.get("graph_node")), _int(d.get("ext")), _int(d.get("cloned_from"))
                if node is not None and ext is not None:
                    kf.ext_of_node[node] = ext
                elif node is not None and src is not None:
                    kf.cloned_from[node] = src
                else:
                    kf.bad_lines += 1
            elif "correlation" in d:
                corr, ext = _int(d.get("correlation")), _int(d.get("ext"))
                if corr is None or ext is None:
                    kf.bad_lines += 1
                else:
                    kf.ext_of_correlation[corr] = ext
            elif "ext" in d:
                ext, call, rep = _int(d.get("ext")), _int(d.get("call_id")), _int(d.get("repeat_of"))
                if ext is None or (call or rep) is None:
                    kf.bad_lines += 1
                else:
                    kf.call_of_ext[ext] = (call, False) if call else (rep, True)
            elif "pass_begin_ns" in d or "pass_end_ns" in d:
                t = _int(d.get("pass_begin_ns", d.get("pass_end_ns")))
                if t is None:
                    kf.bad_lines += 1
                else:
                    (kf.pass_begins if "pass_begin_ns" in d else kf.pass_ends).append(t)
            elif d.get("end") is True:
                kf.dropped = _int(d.get("dropped")) or 0
                kf.incomplete = _int(d.get("incomplete")) or 0
                kf.ended = True
            else:
                kf.bad_lines += 1
    return kf


def kernels_beside(records_path: str) -> Optional[KernelsFile]:
    """The kernels file of the records at records_path, or None if it has
    none (an untimed or CPU-timed recording)."""
    path = kernels_path_for(records_path)
    return read_kernels(path) if os.path.exists(path) else None


def windows(kf: KernelsFile) -> List[Tuple[int, int]]:
    """The time some logged pass was open, as sorted disjoint spans: the
    begins and ends (of any thread: lines carry none) swept in time order,
    open while more passes began than ended; one still open at the end (a
    process killed in a pass) runs to the file's last kernel."""
    last = max((k.end_ns for k in kf.kernels), default=0)
    events = sorted([(t, 1) for t in kf.pass_begins] + [(t, -1) for t in kf.pass_ends], key=lambda e: (e[0], -e[1]))
    spans: List[Tuple[int, int]] = []
    depth, opened = 0, 0
    for t, step in events:
        if step > 0:
            if depth == 0:
                opened = t
            depth += 1
        elif depth > 0:  # an end with no begin before it (a cut file): nothing to close
            depth -= 1
            if depth == 0:
                spans.append((opened, t))
    if depth > 0:
        spans.append((opened, max(last, opened)))
    return spans


def _inside(spans: List[Tuple[int, int]], starts: List[int], t: int) -> bool:
    i = bisect.bisect_right(starts, t) - 1
    return i >= 0 and t <= spans[i][1]


@dataclass
class CallKernels:
    """The kernels one record stands for: its own call's and, deduplicated,
    its repeats'."""
    call_id: int
    kernels: List[Kernel] = field(default_factory=list)
    per_call_ns: List[int] = field(default_factory=list)  # each call's kernel time (its kernels summed)

    @property
    def ns(self) -> int:
        return sum(self.per_call_ns)

    def stats(self) -> dict:
        """count, total, min, median and max of the calls' kernel time, in us."""
        t = self.per_call_ns
        return {"count": len(t), "total_us": sum(t) / 1e3, "min_us": min(t) / 1e3,
                "median_us": statistics.median(t) / 1e3, "max_us": max(t) / 1e3} if t else {"count": 0}


@dataclass
class Joined:
    by_call: Dict[int, CallKernels]
    unexplained: List[Kernel]
    outside: int  # kernels launched outside every logged pass, no record's: not the recording's

    def explained_ns(self) -> int:
        return sum(c.ns for c in self.by_call.values())

    def unexplained_ns(self) -> int:
        return sum(k.ns for k in self.unexplained)


def _ext_of(kf: KernelsFile, k: Kernel) -> Tuple[Optional[int], bool]:
    """The id a kernel ran under, and whether it came through its graph node
    (a replay's kernel, each replay a call): its API call's id, else its
    node's, following clones to the node made under a call first (a clone
    made while some call had its id pushed is noted under that id too)."""
    ext = kf.ext_of_correlation.get(k.correlation)
    if ext is not None or not k.graph_node:
        return ext, False
    node = k.graph_node
    for _ in range(CLONE_DEPTH):
        if node not in kf.cloned_from:
            break
        node = kf.cloned_from[node]
    ext = kf.ext_of_node.get(node)
    if ext is None:
        ext = kf.ext_of_node.get(k.graph_node)
    return ext, ext is not None


def join(kf: KernelsFile) -> Joined:
    """Each kernel to the record it is under, or to the ledger's unexplained."""
    spans = windows(kf)
    starts = [b for b, _ in spans]
    by_call: Dict[int, CallKernels] = {}
    # a call's kernel time, by (its id, the replay's launch: 0 for a call's own kernels)
    per_call: Dict[Tuple[int, int], int] = {}
    unexplained, outside = [], 0
    for k in kf.kernels:
        ext, via_node = _ext_of(kf, k)
        call = kf.call_of_ext.get(ext) if ext is not None else None
        if call is None:
            if _inside(spans, starts, k.launch_ns if k.launch_ns is not None else k.start_ns):
                unexplained.append(k)
            else:
                outside += 1
            continue
        c = by_call.get(call[0])
        if c is None:
            c = by_call[call[0]] = CallKernels(call[0])
        c.kernels.append(k)
        key = (ext, k.correlation if via_node else 0)
        per_call[key] = per_call.get(key, 0) + k.ns
    for (ext, _), ns in per_call.items():
        by_call[kf.call_of_ext[ext][0]].per_call_ns.append(ns)
    return Joined(by_call, unexplained, outside)

"""One streaming pass over records files, the base of every analysis command.

A records file can hold tens of millions of lines, most of them repeats of a
few thousand signatures. The scan therefore keys each line by its raw bytes
after the call_id and forward_pass fields (phase, operation, inputs, outputs,
error: the text the profiler writes for a signature is always the same), and
parses JSON only the first time it sees a key. Memory grows with distinct
signatures, not with records.

Counts are true call counts: with deduplication on, a record stands for the
calls its summary's `signature_counts` gives (see docs/FORMAT.md).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import IO, Callable, Dict, List, Optional, Tuple

from . import untrusted
from .filter import Filter
from .graphs import eager_sizes, graph_replays
from .reader import (InputError, LineParser, ReadReport, SummaryError, open_records, read_summary,
                     records_after_summary)
from .kernels import join, kernels_beside
from .signature import Signature, float_key, key_of, signature_of
from .worker import Worker, rank_in_name


def dispatch_key_of(summary: Optional[dict]) -> Optional[str]:
    """The summary's "dispatch_key" when it is a key's name (a summary is
    untrusted: what is printed from it is an identifier), else None."""
    key = summary.get("dispatch_key") if summary else None
    return key if isinstance(key, str) and DISPATCH_KEY_NAME.fullmatch(key) else None


DISPATCH_KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass
class Source:
    """One records file as scanned."""
    path: str
    label: str                       # "rank 1", or the file name
    rank: Optional[int]
    summary: Optional[dict]          # its summary, when beside it and readable
    summary_note: Optional[str]      # why the summary was not used
    report: ReadReport = field(default_factory=ReadReport)
    deduplicated: bool = False
    records: int = 0                 # lines read (after --max-entries)
    calls: int = 0                   # true calls they stand for
    passes: Dict[int, int] = field(default_factory=dict)  # pass -> calls
    phases: Dict[str, int] = field(default_factory=dict)  # phase -> calls
    signatures: Dict[bytes, Signature] = field(default_factory=dict)
    seen_operations: set = field(default_factory=set)  # filtered out ones too
    truncated: bool = False          # stopped at --max-entries
    flt: Optional["Filter"] = None   # the filter it was scanned with (applied: not again)
    graphs: Dict[int, dict] = field(default_factory=dict)  # summary "graphs", by key
    eager_sizes: Dict[str, Dict[int, int]] = field(default_factory=dict)  # summary "eager_sizes"
    worker: Optional[Worker] = None  # the summary's "worker": its place in the deployment
    records_after_summary: int = 0   # records past the summary's records_bytes (killed before it caught up)
    timed: bool = False              # its records carry their calls' time (FORMAT.md "time_us")
    dispatch_key: Optional[str] = None  # the summary's "dispatch_key": the route its calls came by
    # a kernels-timed recording's GPU kernel time per call, by record call_id
    # (as bytes; records/kernels.py's join), and why the kernels file beside
    # it could not be read, if it could not
    kernel_times: Dict[bytes, List[int]] = field(default_factory=dict)
    kernels_note: Optional[str] = None

    @property
    def filtered(self) -> bool:
        """A filter was applied."""
        return self.flt is not None and self.flt.active

    @property
    def operations(self) -> Dict[str, int]:
        ops: Dict[str, int] = {}
        for s in self.signatures.values():
            ops[s.operation] = ops.get(s.operation, 0) + s.count
        return ops


def scan(path: str, flt: Optional[Filter] = None, label: Optional[str] = None,
         on_record: Optional[Callable[[int, Signature, int], None]] = None,
         progress: Optional[Callable[[int], None]] = None) -> Source:
    """Reads one records file. on_record(call_id, signature, count) is called
    for each kept record in file order (for timelines)."""
    flt = flt or Filter()
    try:
        summary, note = read_summary(path), None
    except SummaryError as e:
        summary, note = None, str(e)
    rank = summary.get("rank") if summary else None
    if rank is None:
        rank = rank_in_name(os.path.basename(path))
    worker = Worker.from_json(summary.get("worker")) if summary else None
    if label is None:
        label = (worker.name if worker is not None and worker.several else
                 f"rank {rank}" if rank is not None else os.path.basename(path))
    src = Source(path=path, label=label, rank=rank, summary=summary, summary_note=note, worker=worker,
                 dispatch_key=dispatch_key_of(summary))
    counts: Dict[bytes, int] = {}
    if summary and summary.get("dedupe_enabled"):
        src.deduplicated = True
        sc = summary.get("signature_counts")
        if isinstance(sc, dict):
            counts = {k.encode(): int(v) for k, v in sc.items()}
        else:
            src.summary_note = ("its summary predates signature_counts: counts of "
                                "deduplicated calls are not known (each record counts once)")
    times = signature_times(summary) if src.deduplicated else {}
    src.flt = flt
    src.graphs = graph_replays(summary)
    src.eager_sizes = eager_sizes(summary)
    src.records_after_summary = records_after_summary(path, summary)
    try:
        kf = kernels_beside(path)
    except InputError as e:
        kf, src.kernels_note = None, str(e)
    if kf is not None:
        src.kernel_times = {str(cid).encode(): ck.per_call_ns for cid, ck in join(kf).by_call.items()}
    f = open_records(path)
    try:
        _scan_lines(f, src, flt, counts, times, on_record, progress)
    except (OSError, EOFError) as e:  # a corrupt .gz, say
        raise InputError(f"cannot read {path}: {e}") from None
    finally:
        f.close()
    return src


def ns_of_us(v: object) -> Optional[int]:
    """A time in µs as a file says it, in ns; None if it is not one."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e15:
        return None
    return round(v * 1000)


def signature_times(summary: Optional[dict]) -> Dict[bytes, Tuple[int, int, int, int]]:
    """A deduplicated file's summary "signature_times": per record's call_id
    (as bytes), (calls, total, min, max) in ns; entries that are not numbers
    are left out (a summary is untrusted)."""
    st = summary.get("signature_times") if summary else None
    out: Dict[bytes, Tuple[int, int, int, int]] = {}
    if not isinstance(st, dict):
        return out
    for k, v in st.items():
        if not isinstance(v, dict):
            continue
        n = v.get("count")
        total, low, high = ns_of_us(v.get("total_us")), ns_of_us(v.get("min_us")), ns_of_us(v.get("max_us"))
        if type(n) is int and n > 0 and None not in (total, low, high):
            out[str(k).encode()] = (n, total, low, high)
    return out


def _add_time(src: Source, sig: Signature, cid: bytes, us: object,
              times: Dict[bytes, Tuple[int, int, int, int]]) -> None:
    """A record's measured time: its signature's in the summary (a
    deduplicated file), else its own call's (time_us)."""
    src.timed = True
    if sig.graph is not None:  # a capture ran no kernel: its time is not its replays'
        return
    t = times.get(cid) if times else None
    if t is not None:
        sig.add_time(*t)
        return
    ns = ns_of_us(us)
    if ns is not None:
        sig.add_time(1, ns, ns, ns)


def _add_kernel_time(sig: Signature, per_call: Optional[List[int]]) -> None:
    """A record's calls' kernel time (each call's kernels summed), if any ran."""
    if per_call:
        sig.add_kernel_time(len(per_call), sum(per_call), min(per_call), max(per_call))


_TIME = b', "time_us": '
_START = b', "start_us": '   # just before time_us: the call's start (FORMAT.md)


# A line as the profiler writes it: '{"call_id": N, "forward_pass": P, ' then
# the rest, the signature's text (the same for every call of a signature;
# a timed call's "time_us" is its own, taken out of it).
_PREFIX = b'{"call_id": '
_PASS = b'"forward_pass": '
_ID_AT = len(_PREFIX)         # where call_id's digits start
_PASS_AT = 2 + len(_PASS)     # from the comma after call_id to the pass's digits


class _Entry:
    """What the scan knows of one line text (the key): its signature (None
    when filtered out), the records and calls counted under it, what each
    call counts (its graph's replays for a capture's record), and the key of
    its signature in Source.signatures (texts with other float arguments
    share one signature)."""
    __slots__ = ("sig", "records", "calls", "replays", "sig_key")

    def __init__(self, sig: Optional[Signature], replays: int, sig_key: bytes) -> None:
        self.sig = sig
        self.records = 0
        self.calls = 0
        self.replays = replays
        self.sig_key = sig_key


def _scan_lines(f: IO[bytes], src: Source, flt: Filter, counts: Dict[bytes, int],
                times: Dict[bytes, Tuple[int, int, int, int]], on_record: Optional[Callable[[int, Signature, int], None]],
                progress: Optional[Callable[[int], None]]) -> None:
    rep = src.report
    entries: Dict[bytes, _Entry] = {}
    by_float_key: Dict[bytes, _Entry] = {}  # records whose args hold floats
    pass_calls: Dict[bytes, int] = {}  # pass number as text -> calls
    sigs = src.signatures
    lo, hi = flt.passes or (0, 2**62)
    use_passes = flt.passes is not None
    limit = flt.max_entries or -1
    parser = LineParser(rep)
    get_count = counts.get if counts else None
    kernel_times = src.kernel_times.get if src.kernel_times else None
    prefix, pass_word, id_at, pass_at = _PREFIX, _PASS, _ID_AT, _PASS_AT  # locals: the loop is hot
    n_records = 0
    for line in f:
        parser.next_line()
        if n_records == limit:
            src.truncated = True
            break
        # Fast path: a whole line as the profiler writes it.
        if line.startswith(prefix) and line.endswith(b"}\n"):
            id_end = line.find(b", ", id_at)
            pass_end = line.find(b", ", id_end + pass_at)
            cid, fp = line[id_at:id_end], line[id_end + pass_at:pass_end]
            # numbers as the profiler writes them (a records file is
            # untrusted: anything else takes the slow path)
            if id_end > 0 and pass_end > 0 and line.startswith(pass_word, id_end + 2) and \
                    cid.isdigit() and fp.isdigit():
                key = line[pass_end + 2:]
                t_at = key.find(_TIME)
                us = None
                if t_at >= 0:  # a timed call: its time is not its signature's
                    t_end = key.find(b", ", t_at + len(_TIME))
                    if t_end < 0:
                        parser.hold(line)
                        continue
                    us = key[t_at + len(_TIME):t_end]
                    s_at = key.rfind(_START, 0, t_at)
                    if s_at >= 0 and key[s_at + len(_START):t_at].replace(b".", b"", 1).isdigit():
                        t_at = s_at  # its start is the call's own as well
                    key = key[:t_at] + key[t_end:]
                e = entries.get(key)
                if e is None:
                    try:
                        rec = untrusted.loads(line)
                    except ValueError:
                        parser.hold(line)
                        continue
                    fk = float_key(rec)
                    same = by_float_key.get(fk) if fk is not None else None
                    if same is not None:  # a signature seen with other float values
                        e = entries[key] = _Entry(same.sig, same.replays, fk)
                    else:
                        sig = signature_of(rec)
                        src.seen_operations.add(sig.operation)
                        e = entries[key] = _Entry(sig if flt.keeps(sig) else None,
                                                  _replays(src, sig), fk or key)
                        if fk is not None:
                            by_float_key[fk] = e
                n_records += 1
                sig = e.sig
                if sig is None:
                    continue
                if use_passes and not lo <= int(fp) <= hi:
                    continue
                n = (get_count(cid, 1) if get_count else 1) * e.replays
                if e.sig_key not in sigs:
                    sig.first_call = int(cid)
                    sigs[e.sig_key] = sig
                e.records += 1
                e.calls += n
                if us is not None:
                    try:
                        _add_time(src, sig, cid, float(us), times)
                    except ValueError:
                        pass
                if kernel_times is not None:
                    _add_kernel_time(sig, kernel_times(cid))
                pass_calls[fp] = pass_calls.get(fp, 0) + n
                if on_record is not None:
                    on_record(int(cid), sig, n)
                if progress is not None and not n_records & 0xFFFFF:
                    progress(n_records)
                continue
        # Slow path: another writer's layout, zero padding, a cut line.
        rec = parser.parse(line)
        if rec is None:
            continue
        if not isinstance(rec, dict):
            rep.bad_lines.append(parser.lineno)
            continue
        n_records += 1
        _add_slow(src, flt, rec, counts, times, on_record)
    recovered = parser.finish()
    if recovered is not None:
        n_records += 1
        _add_slow(src, flt, recovered, counts, times, on_record)
    rep.records = n_records
    src.records = n_records
    for e in entries.values():
        if e.sig is not None:
            e.sig.records += e.records
            e.sig.count += e.calls
    for fp, n in pass_calls.items():
        k = int(fp)
        if k:  # 0: graph captures, not a forward pass
            src.passes[k] = src.passes.get(k, 0) + n
    src.calls = sum(sig.count for sig in sigs.values())
    for sig in sigs.values():
        if sig.phase is not None:
            src.phases[sig.phase] = src.phases.get(sig.phase, 0) + sig.count


def _replays(src: Source, sig: Signature) -> int:
    """What a record's count is multiplied by: its graph's replays for a
    capture's record (FORMAT.md), else 1."""
    if sig.graph is None or src.summary is None:  # no summary: each record once
        return 1
    g = src.graphs.get(sig.graph)
    return g["replays"] if g else 0


def _add_slow(src: Source, flt: Filter, rec: dict, counts: Dict[bytes, int],
              times: Dict[bytes, Tuple[int, int, int, int]], on_record: Optional[Callable[[int, Signature, int], None]]) -> int:
    """Adds a record parsed the slow way; returns the calls it stands for."""
    fp = rec.get("forward_pass")
    if flt.passes is not None and not (isinstance(fp, int) and flt.passes[0] <= fp <= flt.passes[1]):
        return 0
    key = key_of(rec)
    sig = src.signatures.get(key)
    if sig is None:
        sig = signature_of(rec)
        src.seen_operations.add(sig.operation)
        if not flt.keeps(sig):
            return 0
        src.signatures[key] = sig
        cid = rec.get("call_id")
        sig.first_call = cid if isinstance(cid, int) else 0
    cid = rec.get("call_id")
    n = counts.get(str(cid).encode(), 1) * _replays(src, sig)
    sig.records += 1
    sig.count += n
    if "time_us" in rec:
        _add_time(src, sig, str(cid).encode(), rec["time_us"], times)
    if src.kernel_times:
        _add_kernel_time(sig, src.kernel_times.get(str(cid).encode()))
    if isinstance(fp, int) and fp:
        src.passes[fp] = src.passes.get(fp, 0) + n
    if on_record is not None:
        on_record(cid if isinstance(cid, int) else 0, sig, n)
    return n


def scan_all(paths: List[str], flt: Optional[Filter] = None,
             progress: Optional[Callable[[int], None]] = None,
             on_record: Optional[Callable[[int, Signature, int], None]] = None) -> List[Source]:
    """Several files (ranks); labels made unique."""
    srcs = [scan(p, flt, on_record=on_record, progress=progress) for p in paths]
    labels = [s.label for s in srcs]
    if len(set(labels)) != len(labels):
        for s in srcs:
            s.label = os.path.basename(s.path)
    return srcs

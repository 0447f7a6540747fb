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

import glob
import json
import os
import re
from dataclasses import dataclass, field
from typing import IO, Callable, Dict, Iterable, List, Optional, Tuple

from .reader import InputError, LineParser, ReadReport, SummaryError, open_records, read_summary
from .values import elements, format_inputs, format_value
from .worker import Worker, label_order, rank_in_name


@dataclass
class Signature:
    """A signature: what makes a call distinct to a reader (FORMAT.md), the
    same thing the profiler deduplicates on: its operation, inputs, outputs
    (or error), its pass's phase and graph, and, where arguments were
    recorded, the arguments other than float values (a float that changes
    every step does not make a new signature; `args` shows the first
    record's values)."""
    operation: str
    inputs: dict
    outputs: object
    error: Optional[dict]
    phase: Optional[str]
    incomplete: bool = False
    count: int = 0       # calls (true counts; a capture's: times its graph's replays)
    records: int = 0     # lines in the file
    first_call: int = 0  # call_id of its first record
    out_elements: int = 0
    args: Optional[dict] = None   # the other arguments, when recorded (FORMAT.md)
    graph: Optional[int] = None   # the graph a capture's record belongs to

    @property
    def text(self) -> str:
        """inputs -> outputs, for people."""
        return format_inputs(self.inputs) + " -> " + (
            format_value(self.outputs) if self.outputs is not None else "None")

    @property
    def key(self) -> Tuple[str, str, str]:
        """What makes two signatures the same across files (phase aside)."""
        return (self.operation, json.dumps(self.inputs, sort_keys=False) + (
                    json.dumps(mask_floats(self.args)) if self.args is not None else ""),
                json.dumps(self.outputs) if self.error is None else "error")


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
    worker: Optional[Worker] = None  # the summary's "worker": its place in the deployment

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
                    if f.endswith((".jsonl", ".jsonl.zst"))]
            if not hits:
                raise InputError(f"no records file (*.jsonl) in folder {p}")
            out.extend(sorted(hits, key=order))
        elif glob.has_magic(p) and not os.path.exists(p):
            hits = glob.glob(p)
            if not hits:
                raise InputError(f"no file matches {p}")
            hits = [h for h in hits if not h.endswith("_summary.json")] or hits
            out.extend(sorted(hits, key=order))
        else:
            out.append(p)
    return out


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


_PREFIX = b'{"call_id": '
_PASS = b'"forward_pass": '


_FLOAT_WORDS = ("inf", "-inf", "nan")  # floats JSON cannot hold (FORMAT.md)


def _is_float(v: object) -> bool:
    return (isinstance(v, float) or v in _FLOAT_WORDS or
            (isinstance(v, dict) and set(v) == {"real", "imag"}))


def mask_floats(args: Optional[dict]) -> Optional[dict]:
    """args without their float values (each float becomes null): what the
    signature keeps of them."""
    if not args:
        return args

    def one(v):
        if isinstance(v, list) and v and all(_is_float(x) or isinstance(x, int) for x in v) \
                and any(_is_float(x) for x in v):
            return [None] * len(v)
        return None if _is_float(v) else v
    return {k: one(v) for k, v in args.items()}


def _float_key(rec: dict) -> Optional[bytes]:
    """The scan key of a record whose args hold floats (they are masked),
    else None (its text is its key)."""
    args = rec.get("args")
    if not isinstance(args, dict) or not any(
            _is_float(v) or (isinstance(v, list) and any(_is_float(x) for x in v)) for v in args.values()):
        return None
    body = {k: (mask_floats(v) if k == "args" else v) for k, v in rec.items()
            if k not in ("call_id", "forward_pass")}
    return json.dumps(body).encode()[1:]


def _signature_of(rec: dict) -> Signature:
    out = rec.get("outputs")
    return Signature(
        operation=str(rec.get("operation", "?")), inputs=rec.get("inputs") or {},
        outputs=out, error=rec.get("error"), phase=rec.get("phase"),
        incomplete=bool(rec.get("incomplete")), out_elements=elements(out),
        args=rec.get("args") if isinstance(rec.get("args"), dict) else None,
        graph=rec.get("graph") if isinstance(rec.get("graph"), int) else None)


def graph_replays(summary: Optional[dict]) -> Dict[int, dict]:
    """The summary's "graphs" by integer key ({} when there are none), with
    "real_sizes" by integer size where the summary has them."""
    out: Dict[int, dict] = {}
    graphs = summary.get("graphs") if summary else None
    if isinstance(graphs, dict):
        for k, v in graphs.items():
            try:
                g = out[int(k)] = {"captures": int(v.get("captures", 0)), "replays": int(v.get("replays", 0))}
                if v.get("real_sizes"):
                    g["real_sizes"] = {int(r): int(n) for r, n in v["real_sizes"].items()}
            except (TypeError, ValueError, AttributeError):
                continue
    return out


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
    src = Source(path=path, label=label, rank=rank, summary=summary, summary_note=note, worker=worker)
    counts: Dict[bytes, int] = {}
    if summary and summary.get("dedupe_enabled"):
        src.deduplicated = True
        sc = summary.get("signature_counts")
        if isinstance(sc, dict):
            counts = {k.encode(): int(v) for k, v in sc.items()}
        else:
            src.summary_note = ("its summary predates signature_counts: counts of "
                                "deduplicated calls are not known (each record counts once)")
    src.flt = flt
    src.graphs = graph_replays(summary)
    f = open_records(path)
    try:
        _scan_lines(f, src, flt, counts, on_record, progress)
    except (OSError, EOFError) as e:  # a corrupt .gz, say
        raise InputError(f"cannot read {path}: {e}") from None
    finally:
        f.close()
    return src


def _scan_lines(f: IO[bytes], src: Source, flt: Filter, counts: Dict[bytes, int],
                on_record: Optional[Callable[[int, Signature, int], None]],
                progress: Optional[Callable[[int], None]]) -> None:
    rep = src.report
    # key -> [signature, or None when filtered out; records; calls;
    #         replays; its key in src.signatures]
    entries: Dict[bytes, list] = {}
    by_float_key: Dict[bytes, list] = {}  # records whose args hold floats
    pass_calls: Dict[bytes, int] = {}  # pass number as text -> calls
    sigs = src.signatures
    lo, hi = flt.passes or (0, 2**62)
    use_passes = flt.passes is not None
    limit = flt.max_entries or -1
    parser = LineParser(rep)
    get_count = counts.get if counts else None
    n_records = 0
    for line in f:
        parser.next_line()
        if n_records == limit:
            src.truncated = True
            break
        # Fast path: a whole line as the profiler writes it.
        if line.startswith(_PREFIX) and line.endswith(b"}\n"):
            c = line.find(b", ", 12)
            d = line.find(b", ", c + 18)
            cid, fp = line[12:c], line[c + 18:d]
            # numbers as the profiler writes them (a records file is
            # untrusted: anything else takes the slow path)
            if c > 0 and d > 0 and line.startswith(_PASS, c + 2) and cid.isdigit() and fp.isdigit():
                key = line[d + 2:]
                e = entries.get(key)
                if e is None:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        parser.hold(line)
                        continue
                    fk = _float_key(rec)
                    same = by_float_key.get(fk) if fk is not None else None
                    if same is not None:  # a signature seen with other float values
                        e = entries[key] = [same[0], 0, 0, same[3], fk]
                    else:
                        e = entries[key] = [_signature_of(rec), 0, 0, 1, fk or key]
                        src.seen_operations.add(e[0].operation)
                        e[3] = _replays(src, e[0])
                        if not flt.keeps(e[0]):
                            e[0] = None
                        if fk is not None:
                            by_float_key[fk] = e
                n_records += 1
                if e[0] is None:
                    continue
                if use_passes and not lo <= int(fp) <= hi:
                    continue
                n = (get_count(cid, 1) if get_count else 1) * e[3]
                if e[4] not in sigs:
                    e[0].first_call = int(cid)
                    sigs[e[4]] = e[0]
                e[1] += 1
                e[2] += n
                pass_calls[fp] = pass_calls.get(fp, 0) + n
                if on_record is not None:
                    on_record(int(cid), e[0], n)
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
        _add_slow(src, flt, rec, counts, on_record)
    recovered = parser.finish()
    if recovered is not None:
        n_records += 1
        _add_slow(src, flt, recovered, counts, on_record)
    rep.records = n_records
    src.records = n_records
    for e in entries.values():
        if e[0] is not None:
            e[0].records += e[1]
            e[0].count += e[2]
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
              on_record: Optional[Callable[[int, Signature, int], None]]) -> int:
    """Adds a record parsed the slow way; returns the calls it stands for."""
    fp = rec.get("forward_pass")
    if flt.passes is not None and not (isinstance(fp, int) and flt.passes[0] <= fp <= flt.passes[1]):
        return 0
    key = _float_key(rec) or json.dumps(
        {k: v for k, v in rec.items() if k not in ("call_id", "forward_pass")}).encode()[1:]
    sig = src.signatures.get(key)
    if sig is None:
        sig = _signature_of(rec)
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

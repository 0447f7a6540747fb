"""Reading records files: the one place that opens them (plain, .gz, .zst),
tells a records file from something else, parses their lines, and finds
their summaries. RecordReader is the public reader; the scan under every
command uses the same opening, check and line parser.

Files a crash left behind are read too.

A process that died while profiling can leave (a) the half record of the call
that was running -- its inputs, without outputs -- and (b) zero bytes after the
last record, where the file had been grown ahead of the writer. The reader
skips the zeros and turns a cut record whose inputs are complete into a record
with "outputs": null and "incomplete": true.
"""
from __future__ import annotations

import gzip
import io
import os
from dataclasses import dataclass, field
from typing import IO, Any, Iterator, List, Optional, Union

from . import untrusted

PathLike = Union[str, "os.PathLike[str]"]


class InputError(ValueError):
    """A file that cannot be read as records: the message says what it is."""


class SummaryError(InputError):
    """No readable summary: the message says why (missing, unreadable, not a
    summary)."""


# a records file's summary is named as it, this in place of its extension
# (the C core's sp_profiler.c names it the same way: tests/test_format.py
# checks the two agree on files it writes)
SUMMARY_SUFFIX = "_summary.json"
KERNELS_SUFFIX = "_kernels.jsonl"


def is_summary(path: str) -> bool:
    return path.endswith(SUMMARY_SUFFIX)


def summary_path_for(records_path: PathLike) -> str:
    """shapes.jsonl -> shapes_summary.json, as the profiler names it (a
    compressed copy, shapes.jsonl.gz, maps to the same summary)."""
    return _beside(records_path, SUMMARY_SUFFIX)


def kernels_path_for(records_path: PathLike) -> str:
    """shapes.jsonl -> shapes_kernels.jsonl: the GPU kernels of a
    kernels-timed recording (FORMAT.md "Kernels")."""
    return _beside(records_path, KERNELS_SUFFIX)


def is_kernels(path: str) -> bool:
    return path.endswith(KERNELS_SUFFIX)


def _beside(records_path: PathLike, suffix: str) -> str:
    d, base = os.path.split(os.fspath(records_path))
    for ext in (".gz", ".zst"):
        if base.endswith(ext) and len(base) > len(ext):
            base = base[: -len(ext)]
            break
    for ext in (".jsonl", ".json"):
        if base.endswith(ext) and len(base) > len(ext):
            base = base[: -len(ext)]
            break
    return os.path.join(d, base + suffix)


def read_summary(path: PathLike) -> dict:
    """The summary: `path` is the summary file itself (..._summary.json) or
    the records file it is beside. SummaryError says why there is none."""
    path = os.fspath(path)
    beside = not is_summary(path)
    sp = summary_path_for(path) if beside else path
    try:
        with open(sp, "rb") as f:
            s = untrusted.loads(f.read())
    except FileNotFoundError:
        raise SummaryError(f"no summary beside it ({os.path.basename(sp)})" if beside
                           else f"no such file: {sp}") from None
    except (OSError, ValueError) as e:
        raise SummaryError(f"its summary {sp} is unreadable ({e})") from None
    if not isinstance(s, dict):
        raise SummaryError(f"its summary {sp} is not a summary")
    return s


@dataclass
class ReadReport:
    records: int = 0
    cut_last_line: bool = False       # the last line was cut short
    recovered: Optional[dict] = None  # what could be rebuilt from it
    bad_lines: List[int] = field(default_factory=list)  # other unparsable lines
    zero_padding: int = 0             # bytes of zero padding skipped


def recover(text: str) -> Optional[dict]:
    """A cut record: complete it if its inputs are whole."""
    for tail in ("}", "}}", "]}}", "}]}}"):
        try:
            rec = untrusted.loads(text + tail)
        except ValueError:
            continue
        if isinstance(rec, dict) and "operation" in rec and isinstance(rec.get("inputs"), dict):
            rec.setdefault("outputs", None)
            rec["incomplete"] = True
            return rec
    return None


class LineParser:
    """Parses a records file line by line, keeping the ReadReport's account
    of zero padding, unparsable lines and a cut last line. Shared by
    RecordReader and the analysis scan (which parses most lines its own
    faster way, and hands the parser the rest).

        for raw in f:
            parser.next_line()
            rec = parser.parse(raw)   # None: blank, padding, or held as bad
        rec = parser.finish()         # the cut last line, recovered, or None
    """

    def __init__(self, report: ReadReport):
        self.report = report
        self.lineno = 0
        self.pending: Optional[bytes] = None  # an unparsable line, bad unless it is the last

    def next_line(self) -> None:
        self.lineno += 1
        if self.pending is not None:  # a line was bad but more followed
            self.report.bad_lines.append(self.lineno - 1)
            self.pending = None

    def hold(self, line: bytes) -> None:
        """A line that did not parse: bad, unless no line follows it."""
        self.pending = line

    def parse(self, raw: bytes) -> Any:
        line = raw.rstrip(b"\n")
        stripped = line.rstrip(b"\0")
        if len(stripped) != len(line):
            self.report.zero_padding += len(line) - len(stripped)
            line = stripped
        line = line.lstrip(b"\0")
        if not line.strip():
            return None
        try:
            return untrusted.loads(line)
        except ValueError:
            self.pending = line
            return None

    def finish(self) -> Optional[dict]:
        if self.pending is None:
            return None
        rep = self.report
        rep.cut_last_line = True
        rep.recovered = recover(self.pending.decode("utf-8", "replace"))
        return rep.recovered


class RecordReader:
    """Iterates over the records of a file, one line in memory at a time.

    for rec in (reader := RecordReader(path)): ...
    reader.report then says what was cut or skipped.
    """

    def __init__(self, source: Union[PathLike, IO[bytes]]):
        self.source = source
        self.report = ReadReport()

    def __iter__(self) -> Iterator[dict]:
        f = open_records(self.source)
        try:
            yield from self._read(f)
        except (OSError, EOFError) as e:  # a corrupt .gz, say
            raise InputError(f"cannot read {_name(self.source)}: {e}") from None
        finally:
            if isinstance(self.source, (str, os.PathLike)):
                f.close()

    def _read(self, f: IO[bytes]) -> Iterator[dict]:
        parser = LineParser(self.report)
        for raw in f:
            parser.next_line()
            rec = parser.parse(raw)
            if rec is not None:
                self.report.records += 1
                yield rec
        recovered = parser.finish()
        if recovered is not None:
            yield recovered


def read_records(path: PathLike) -> List[dict]:
    """All records of a (small) file as a list; see RecordReader for big ones."""
    return list(RecordReader(path))


_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"


def _name(source: Union[PathLike, IO[bytes]]) -> str:
    return os.fspath(source) if isinstance(source, (str, os.PathLike)) else str(getattr(source, "name", source))


def records_after_summary(path: PathLike, summary: Optional[dict]) -> int:
    """Records a plain records file holds past its summary's `records_bytes`
    (FORMAT.md: a summary agrees with the records up to there). More than 0
    when the process was killed between a pass's records and the summary
    that follows them (about 1 ms after the last pass end): the summary's
    counts stop before these. 0 for a compressed file (its sizes are not
    the records') or a summary without records_bytes."""
    at = summary.get("records_bytes") if summary else None
    if not isinstance(at, int) or isinstance(at, bool) or at < 0:
        return 0
    try:
        with open(path, "rb") as f:
            if f.read(4).startswith((_GZIP, _ZSTD)):
                return 0
            f.seek(at)
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def open_records(source: Union[PathLike, IO[bytes]], check: bool = True) -> IO[bytes]:
    """The records' bytes, decompressed if they are .gz or .zst (told by their
    first bytes, not the name): a path is opened, an open binary file is
    wrapped. With check, what is plainly not a records file is refused
    (check_records). InputError with one line saying what is wrong."""
    path = _name(source)
    owned = isinstance(source, (str, os.PathLike))  # opened here: closed here on failure
    if owned:
        if os.path.isdir(source):
            raise InputError(f"{path} is a directory, not a records file "
                             "(give the .jsonl file, or a glob such as 'dir/shapes*.jsonl')")
        try:
            f: IO[bytes] = open(source, "rb")
        except FileNotFoundError:
            raise InputError(f"no such file: {path}") from None
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror or e}") from None
    else:
        f = source if hasattr(source, "peek") else io.BufferedReader(source)  # type: ignore[arg-type]
    head = f.peek(4)[:4]  # type: ignore[attr-defined]
    if head.startswith(_GZIP):
        f = gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[assignment]
    elif head.startswith(_ZSTD):
        try:
            import zstandard
        except ImportError:
            if owned:
                f.close()
            raise InputError(f"{path} is zstd-compressed: pip install zstandard to read it "
                             "(or zstd -d it first)") from None
        f = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(f, closefd=owned))
    if check:
        try:
            check_records(path, f)
        except BaseException:
            if owned:
                f.close()
            raise
    return f


def _first_line(f: IO[bytes]) -> bytes:
    head = f.peek(65536) if hasattr(f, "peek") else b""
    return head.lstrip(b"\0 \t\r\n").split(b"\n", 1)[0]


def check_records(path: str, f: IO[bytes]) -> None:
    """Raises InputError when f is plainly not a records file: a summary,
    some other JSON, or not text at all. An empty file is a records file
    with no records."""
    first = _first_line(f)
    if not first:
        return
    if first.strip() == b"{":  # pretty-printed JSON: is it a summary?
        try:
            data = untrusted.loads(f.peek(1 << 20)) if hasattr(f, "peek") else None
        except ValueError:
            data = None
        if isinstance(data, dict) and "total_operations" in data:
            rec = data.get("records_file")
            hint = f"; its records file is {rec}" if rec else ""
            raise InputError(f"{path} is a summary file, not a records file{hint}")
        raise InputError(f"{path} is not a records file: it holds pretty-printed JSON, "
                         "not one record per line")
    try:
        rec = untrusted.loads(first)
    except ValueError:
        rec = recover(first.rstrip(b"\0").decode("utf-8", "replace"))
        if rec is None:
            printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in first[:256])
            what = ("binary data" if printable < 0.9 * min(len(first), 256)
                    else f"its first line is not JSON: {first[:60].decode('utf-8', 'replace')!r}")
            raise InputError(f"{path} is not a records file (JSON Lines of operator calls): {what}")
    if not isinstance(rec, dict) or "operation" not in rec:
        raise InputError(f"{path} is not a records file: its first line is JSON but not an "
                         "operator record (no \"operation\" field)")

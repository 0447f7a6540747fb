"""Streaming reader for records files, including ones a crash left behind.

A process that died while profiling can leave (a) the half record of the call
that was running -- its inputs, without outputs -- and (b) zero bytes after the
last record, where the file had been grown ahead of the writer. The reader
skips the zeros and turns a cut record whose inputs are complete into a record
with "outputs": null and "incomplete": true.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import IO, Any, Iterator, List, Optional, Union


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
            rec = json.loads(text + tail)
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
            return json.loads(line)
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

    def __init__(self, source: Union[str, "os.PathLike[str]", IO[bytes]]):
        self.source = source
        self.report = ReadReport()

    def __iter__(self) -> Iterator[dict]:
        f = open(self.source, "rb") if isinstance(self.source, (str, os.PathLike)) else self.source
        try:
            yield from self._read(f)
        finally:
            if f is not self.source:
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


def read_records(path: Union[str, "os.PathLike[str]"]) -> List[dict]:
    """All records of a (small) file as a list; see RecordReader for big ones."""
    return list(RecordReader(path))


def read_summary(path: Union[str, "os.PathLike[str]"]) -> dict:
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)

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
from typing import IO, Iterator, List, Optional, Union


@dataclass
class ReadReport:
    records: int = 0
    cut_last_line: bool = False       # the last line was cut short
    recovered: Optional[dict] = None  # what could be rebuilt from it
    bad_lines: List[int] = field(default_factory=list)  # other unparsable lines
    zero_padding: int = 0             # bytes of zero padding skipped


def _recover(text: str) -> Optional[dict]:
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
        rep = self.report
        lineno = 0
        pending: Optional[bytes] = None
        for raw in f:
            lineno += 1
            if pending is not None:  # a line was bad but more followed
                rep.bad_lines.append(lineno - 1)
                pending = None
            line = raw.rstrip(b"\n")
            stripped = line.rstrip(b"\0")
            if len(stripped) != len(line):
                rep.zero_padding += len(line) - len(stripped)
                line = stripped
            line = line.lstrip(b"\0")
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                pending = line
                continue
            rep.records += 1
            yield rec
        if pending is not None:
            rep.cut_last_line = True
            rep.recovered = _recover(pending.decode("utf-8", "replace"))
            if rep.recovered is not None:
                yield rep.recovered


def read_records(path: Union[str, "os.PathLike[str]"]) -> List[dict]:
    """All records of a (small) file as a list; see RecordReader for big ones."""
    return list(RecordReader(path))


def read_summary(path: Union[str, "os.PathLike[str]"]) -> dict:
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)

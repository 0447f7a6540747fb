"""GPU kernel time of a kernels-timed recording (FORMAT.md "Kernels"):
what each operation's calls cost on the device, and the ledger of the
window: every kernel launched in a logged pass is under a record (by the
door its record came through) or listed as unexplained, by name, with its
launches and time. `analyze` shows it beside the records it read.

The join is records/kernels.py's; this reads the records' operations by
call_id and sums."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..records import untrusted
from ..records.kernels import Joined, KernelsFile, join, kernels_beside
from ..records.ledger import door_of
from ..records.reader import open_records


@dataclass
class OperationTime:
    operation: str
    calls: int = 0   # calls whose kernels were seen
    kernels: int = 0
    ns: int = 0


@dataclass
class KernelLedger:
    label: str
    path: str                       # the kernels file
    kernels: int = 0                # in the window or under a record
    explained_ns: int = 0
    unexplained_ns: int = 0
    by_door: Dict[str, int] = field(default_factory=dict)         # door -> ns under its records
    unexplained: List[Tuple[str, int, int]] = field(default_factory=list)  # (name, launches, ns), most ns first
    operations: Dict[str, OperationTime] = field(default_factory=dict)
    signatures: Dict[int, dict] = field(default_factory=dict)   # record call_id -> its calls' kernel time stats
    outside: int = 0                # kernels of this process outside every logged pass
    unknown_records: int = 0        # kernels under a call_id no record line has (a cut file)
    dropped: int = 0                # activity records CUPTI dropped (its buffers were full)
    incomplete: int = 0             # records CUPTI had not finished at the stop (left out)
    bad_lines: int = 0
    ended: bool = True              # the collector stopped (else the process died first: the rest is lost)

    @property
    def total_ns(self) -> int:
        return self.explained_ns + self.unexplained_ns

    @property
    def explained_share(self) -> float:
        return self.explained_ns / self.total_ns if self.total_ns else 0.0


def operations_by_call(records_path: str) -> Dict[int, str]:
    """Each record's operation, by call_id (lines that are not records: left out)."""
    out: Dict[int, str] = {}
    with open_records(records_path) as f:
        for raw in f:
            if b'"call_id"' not in raw:
                continue
            try:
                d = untrusted.loads(raw)
            except ValueError:
                continue
            if isinstance(d, dict) and type(d.get("call_id")) is int and isinstance(d.get("operation"), str):
                out[d["call_id"]] = d["operation"]
    return out


def ledger(label: str, records_path: str, kf: KernelsFile) -> KernelLedger:
    joined: Joined = join(kf)
    ops = operations_by_call(records_path)
    led = KernelLedger(label, kf.path, outside=joined.outside, dropped=kf.dropped, incomplete=kf.incomplete,
                       bad_lines=kf.bad_lines, ended=kf.ended)
    for call_id, ck in joined.by_call.items():
        op = ops.get(call_id)
        if op is None:
            led.unknown_records += len(ck.kernels)
            led.kernels += len(ck.kernels)
            led.unexplained_ns += ck.ns
            continue
        door = door_of(op)
        led.by_door[door] = led.by_door.get(door, 0) + ck.ns
        led.explained_ns += ck.ns
        led.kernels += len(ck.kernels)
        o = led.operations.get(op)
        if o is None:
            o = led.operations[op] = OperationTime(op)
        o.calls += len(ck.per_call_ns)
        o.kernels += len(ck.kernels)
        o.ns += ck.ns
        led.signatures[call_id] = ck.stats()
    names: Dict[str, List[int]] = {}
    for k in joined.unexplained:
        n = names.setdefault(k.name, [0, 0])
        n[0] += 1
        n[1] += k.ns
    led.kernels += len(joined.unexplained)
    led.unexplained_ns += joined.unexplained_ns()
    led.unexplained = sorted(((name, n, ns) for name, (n, ns) in names.items()), key=lambda x: (-x[2], x[0]))
    led.by_door = dict(sorted(led.by_door.items(), key=lambda x: (-x[1], x[0])))
    return led


def ledger_beside(label: str, records_path: str) -> Optional[KernelLedger]:
    """The ledger of the records at records_path, if a kernels file is
    beside them; InputError for one that is not a kernels file."""
    kf = kernels_beside(records_path)
    return ledger(label, records_path, kf) if kf is not None else None

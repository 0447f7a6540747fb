"""`tune --flashinfer-bench DIR`: the run's FlashInfer calls as a
flashinfer-bench dataset -- one definition per function and constant axes,
written by FlashInfer's own fi_trace (definitions/<op_type>/<name>.json),
and one workload per shape that ran (workloads/<op_type>/<name>.jsonl:
flashinfer-bench's workload traces, the variable axes' values and the
inputs: tensors random, scalars the values the call passed)."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from ...integrations.flashinfer.bench import NotTraceable, definition
from ...records.signature import Signature
from ..kernel_calls import bind_template, function_of

# the workloads' uuids: the same definition and axes give the same one
NAMESPACE = uuid.UUID("5f1c1e0a-6b53-4d7e-9a3e-2f0d4c6b8a11")
# a definition's name and op_type name its files: FlashInfer's prefixes and
# integers only (checked all the same: a records file is untrusted)
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")


@dataclass
class BenchSet:
    """What was written: definitions by name, workloads by definition (each
    with its calls), and the calls that could not be, with why."""
    definitions: Dict[str, Tuple[str, str]] = field(default_factory=dict)  # name -> (op_type, fi_trace's file)
    workloads: Dict[str, Dict[str, Tuple[dict, int]]] = field(default_factory=dict)  # name -> uuid -> (workload, calls)
    skipped: Dict[str, int] = field(default_factory=dict)  # reason -> calls


def _template_of(defn: dict, sig: Signature):
    """The snapshot's template that fi_trace used (its inputs' axes are the
    definition's), bound to the record."""
    for t, bound in bind_template(sig):
        if {k: d.get("dims") for k, d in t["inputs"].items() if not d.get("scalar")} == \
                {k: v.get("shape") for k, v in defn["inputs"].items() if v.get("shape") is not None}:
            return t, bound
    return None


def _workload(defn: dict, template: dict, axes: Dict[str, int], sig: Signature) -> dict:
    names = [name for name, a in defn["axes"].items() if a.get("type") == "var"]
    missing = [name for name in names if name not in axes]
    if missing:
        raise NotTraceable(f"the record does not give the axis {missing[0]}")
    var = {name: axes[name] for name in names}
    inputs: Dict[str, dict] = {}
    for key, spec in defn["inputs"].items():
        d = template["inputs"].get(key, {})
        if spec.get("shape") is not None:
            if d.get("param") in sig.inputs and sig.inputs[d["param"]] is not None:
                inputs[key] = {"type": "random"}
            continue
        v = (sig.args or {}).get(d.get("param", key))
        if isinstance(v, (int, float, bool)):
            inputs[key] = {"type": "scalar", "value": v}
    uid = str(uuid.uuid5(NAMESPACE, repr((defn["name"], sorted(var.items())))))
    return {"axes": var, "inputs": inputs, "uuid": uid}


def bench_set(signatures: List[Signature]) -> BenchSet:
    """The FlashInfer calls among signatures as flashinfer-bench's
    definitions and workloads."""
    bench = BenchSet()
    for sig in signatures:
        function = function_of(sig.operation)
        if function is None or sig.error is not None or sig.incomplete:
            continue
        try:
            defn, text = definition(function, sig.inputs, sig.args)
            found = _template_of(defn, sig)
            if found is None:
                raise NotTraceable(f"{function}'s definition is none of the shipped templates")
            w = _workload(defn, found[0], found[1], sig)
            if not FILE_NAME.match(defn["name"]) or not FILE_NAME.match(defn["op_type"]):
                raise NotTraceable("a definition name that is not a file name")
        except NotTraceable as e:
            bench.skipped[str(e)] = bench.skipped.get(str(e), 0) + sig.count
            continue
        name = defn["name"]  # FlashInfer's: its prefix and constant axes' values
        bench.definitions.setdefault(name, (defn["op_type"], text))
        ws = bench.workloads.setdefault(name, {})
        prev = ws.get(w["uuid"])
        ws[w["uuid"]] = (w, (prev[1] if prev else 0) + sig.count)
    return bench


def files(bench: BenchSet) -> List[Tuple[str, str, object]]:
    """Where each part goes in flashinfer-bench's dataset layout: (relative
    path, "definition" or "workloads", fi_trace's text or the workloads,
    most called first)."""
    out: List[Tuple[str, str, object]] = []
    for name, (op_type, text) in sorted(bench.definitions.items()):
        out.append((f"definitions/{op_type}/{name}.json", "definition", text))
        ws = sorted(bench.workloads[name].values(), key=lambda x: (-x[1], x[0]["uuid"]))
        out.append((f"workloads/{op_type}/{name}.jsonl", "workloads", [w for w, _ in ws]))
    return out

"""Repro scripts: one standalone Python file per recorded call, which makes
its inputs as recorded (the plan replay uses: inputs.plan), calls the exact
overload through torch.ops and says whether it did what the record says
(raised the recorded exception; returned the recorded outputs). A script
needs only torch: it carries tensors.py and verdict.py verbatim.
"""
from __future__ import annotations

import keyword
import math
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Set

from ..records.reader import RecordReader
from ..records.filter import Filter
from ..records.scan import Source, scan
from ..records.signature import Signature, mask_floats
from ..records.ledger import COLLECTIVE_NAMESPACES, REGISTERED_BY_TORCH
from .calls import Call, NotReplayable, resolve, split_operation, tensor_specs
from .inputs import TensorPlan, plan
from . import tensors as _tensors_module, verdict as _verdict_module

# Namespaces whose operators a library registers when imported.
REGISTERING_MODULES = {"sgl_kernel": "sgl_kernel", "_C": "vllm._C", "_moe_C": "vllm._moe_C",
                       "torchvision": "torchvision"}

# repro --run's words for a script's exit status (verdict.py's)
OUTCOMES = {_verdict_module.REPRODUCED: "reproduced", _verdict_module.OTHER_ERROR: "raised something else",
            _verdict_module.DID_NOT_RAISE: "did not raise", _verdict_module.OTHER_OUTPUTS: "outputs differ"}


class NotReproducible(Exception):
    """Why no script is written for a record (the message says what is missing)."""


@dataclass
class Selection:
    """The records chosen from one file, in file order."""
    source: Source
    records: List[dict]
    missing: List[int] = field(default_factory=list)  # --call IDs not in the file


def is_failure(rec: dict) -> bool:
    """The call raised, or the process died in it (a cut last record)."""
    return bool(rec.get("error")) or bool(rec.get("incomplete"))


def select(path: str, flt: Filter, call_ids: Iterable[int] = (), failures: bool = False) -> Selection:
    """Records of path: the calls call_ids; else, of the records flt keeps,
    the failed ones (failures, or no filter) or all, one per distinct call."""
    wanted: Set[int] = set(call_ids)
    firsts: Dict[int, int] = {}  # id(signature) -> its first kept call_id

    def keep(cid: int, sig: Signature, _n: int) -> None:
        firsts.setdefault(id(sig), cid)

    src = scan(path, flt, on_record=keep)
    chosen = wanted or set(firsts.values())
    only_failures = failures or (not wanted and not flt.active)
    records = []
    for rec in RecordReader(path):
        cid = rec.get("call_id")
        if type(cid) is not int and not wanted and (not only_failures or is_failure(rec)):
            records.append(rec)  # refused by invalid(), in one line, rather than left out unsaid
            continue
        if cid in chosen and (wanted or not only_failures or is_failure(rec)):
            records.append(rec)
            chosen.discard(cid)  # a call_id is one record
    return Selection(src, records, sorted(wanted & chosen))


def invalid(rec: dict) -> Optional[str]:
    """What makes a record unfit to write a script from, or None. A records
    file is untrusted data: its fields are checked here, and a script holds
    them only as Python literals. error_type may be any one-line class name
    (Python makes classes of any name, and the profiler writes what it
    got)."""
    cid, fp, op, err = rec.get("call_id"), rec.get("forward_pass"), rec.get("operation"), rec.get("error")
    if type(cid) is not int or cid < 0:
        return f"call_id {cid!r} is not a whole number"
    if fp is not None and (type(fp) is not int or fp < 0):
        return f"forward_pass {fp!r} is not a whole number"
    try:
        split_operation(op if isinstance(op, str) else "")
    except NotReplayable:
        return f"operation {op!r} is not a dotted operator name (namespace.name.overload)"
    if err is not None:
        if not isinstance(err, dict) or not isinstance(err.get("error_message", ""), str):
            return f"error {err!r} is not an error_type and an error_message"
        t = err.get("error_type")
        if not isinstance(t, str) or not t or len(t) > 200 or not t.isprintable():
            return f"error_type {t!r} is not a class name"
    return None


def call_of(rec: dict) -> Call:
    return Call(str(rec.get("operation", "?")), rec.get("inputs") or {},
                rec.get("args") if isinstance(rec.get("args"), dict) else None,
                rec.get("outputs"), rec.get("error"), 1, bool(rec.get("incomplete")))


def _check(call: Call):
    """The overload, or NotReproducible: what the record lacks to call it."""
    ns = call.operation.split(".")[0]
    if ns in COLLECTIVE_NAMESPACES:
        raise NotReproducible("a collective: it needs the process group it ran in")
    specs = [s for v in call.inputs.values() for s in tensor_specs(v)]
    if call.args is None:
        raise NotReproducible(
            "the file was recorded without arguments (record with --args, SGLANG_PROFILE_SHAPES_ARGS=1): "
            "strides, storage offsets, devices and the non-tensor arguments (dim, ...) are not known")
    for k, v in call.args.items():
        if isinstance(v, dict) and "unsupported" in v:
            raise NotReproducible(f"argument {k} is a {v['unsupported']}, which records do not hold")
    for s in specs:
        if "stride" not in s:
            raise NotReproducible(f"an input is a {s.get('dtype')} tensor of another layout than strided "
                                  "(sparse, mkldnn): its layout is not recorded")
    try:
        op = resolve(call.operation)
    except NotReplayable as e:
        raise NotReproducible(str(e)) from None
    unknown = (set(call.inputs) | set(call.args)) - {a.name for a in op._schema.arguments}
    if unknown:
        raise NotReproducible(f"this torch's {call.operation} has no argument {', '.join(sorted(unknown))} "
                              "(recorded with another version?)")
    return op


@dataclass
class Script:
    """One record's script."""
    name: str            # its file name
    text: str
    notes: List[str]     # what it makes up, and what the record could not say


def script_name(rec: dict) -> str:
    op = re.sub(r"[^A-Za-z0-9_.]+", "_", str(rec.get("operation", "op")))
    return f"call{rec.get('call_id', 0)}_{op.replace('.', '_')}.py"


def _identifier(name: str, taken: Set[str]) -> str:
    v = re.sub(r"\W", "_", name) or "arg"
    if v[0].isdigit() or keyword.iskeyword(v) or v in ("torch", "sys", "tensor", "main", "call"):
        v += "_"
    while v in taken:
        v += "_"
    taken.add(v)
    return v


def _literal(value: object) -> str:
    """Python source for an argument's value (as the operator takes it)."""
    import torch
    if isinstance(value, torch.device):
        return f'torch.device("{value}")'
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_literal(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def _tensor_source(t: TensorPlan) -> str:
    s = t.spec
    parts = [repr(list(s["shape"])), repr(s["dtype"])]
    if list(s["stride"]) != _tensors_module.contiguous_stride(list(s["shape"])):
        parts.append(f"stride={list(s['stride'])!r}")
    if s.get("offset"):
        parts.append(f"offset={int(s['offset'])}")
    if t.device != "cpu":
        parts.append(f"device={t.device!r}")
    if t.fill.kind != "normal":
        parts.append(f"fill={t.fill.kind!r}")
        if t.fill.kind not in ("bool", "sorted"):
            parts.append(f"high={t.fill.high!r}")
    return f"tensor({', '.join(parts)})"


def _module_source(module) -> str:
    with open(module.__file__, encoding="utf-8") as f:
        return f.read()


def script(rec: dict, where: str, imports: Iterable[str] = (), deduplicated: bool = False) -> Script:
    """The script for one record (where: the file and pass it came from),
    or NotReproducible."""
    bad = invalid(rec)
    if bad:
        raise NotReproducible(f"not a valid record: {bad}")
    call = call_of(rec)
    op = _check(call)
    try:
        p = plan(op, call, here=False)
    except NotReplayable as e:
        raise NotReproducible(str(e)) from None
    ns = call.operation.split(".")[0]
    imports = list(dict.fromkeys(list(imports) + ([REGISTERING_MODULES[ns]] if ns in REGISTERING_MODULES else [])))
    paths = [p for p in (_found_in(m) for m in imports) if p]
    notes = ["tensor values are not recorded: floating-point inputs are drawn from N(0, 1)"]
    notes += [f"{k}: {v}" for k, v in p.synthesised.items()]
    if call.error is not None and not p.synthesised and any(
            not s["dtype"].startswith(("torch.float", "torch.bfloat", "torch.complex"))
            for v in call.inputs.values() for s in tensor_specs(v)):
        notes.append("if the recorded error depends on the values of the integer inputs, they cannot be "
                     "reproduced from the record: edit them below")
    if ns not in REGISTERED_BY_TORCH and not imports:
        notes.append(f"{ns}:: operators are registered by a library this script does not import "
                     "(repro --import MODULE adds it)")
    if call.incomplete:
        notes.append("the record was cut by a crash: the process died while this call ran, so its outputs "
                     "and any error are not known; the script says whether it dies here too")
    if deduplicated and call.error is None and mask_floats(call.args) != call.args:  # floats: not in the signature
        notes.append("deduplicated file: float arguments are those of the first call of this signature "
                     "(later calls of it may have had others)")

    taken: Set[str] = set()
    lines, call_args = [], []
    for a in p.args:
        if isinstance(a.value, TensorPlan) or (isinstance(a.value, list) and any(
                isinstance(v, TensorPlan) for v in a.value)):
            var = _identifier(a.name, taken)
            if isinstance(a.value, list):
                items = ",\n        ".join(_tensor_source(v) if isinstance(v, TensorPlan) else "None"
                                            for v in a.value)
                lines.append(f"    {var} = [\n        {items},\n    ]")
            else:
                lines.append(f"    {var} = {_tensor_source(a.value)}")
            text = var
        else:
            text = _literal(a.value)
        call_args.append(f"{a.name}={text}" if a.keyword else text)
    error = call.error
    recorded_error = None if error is None else (str(error.get("error_type")), str(error.get("error_message", "")))
    what = (f"raised {recorded_error[0]}: {_first(recorded_error[1])}" if recorded_error
            else "was cut by a crash (the process died in it)" if call.incomplete
            else "returned")
    devices = [t.device for a in p.args for t in (a.value if isinstance(a.value, list) else [a.value])
               if isinstance(t, TensorPlan)]
    device = next((d for d in devices if d.startswith("cuda")), None)
    assumed = "".join(f"    {n!r},\n" for n in notes)
    # Only the record's values as literals (repr) below: a records file is
    # untrusted, and a docstring or comment would carry its text as code.
    head = f'''#!/usr/bin/env python3
"""sgl-shapeprof repro: one recorded call, standalone. What the record says
is in the constants below, as Python literals.

Needs only torch{"" if not imports else " and " + ", ".join(imports)}. Edit call() below (shapes, dtypes,
strides, values) and run it again: python {script_name(rec)}
It prints what happened; exit status 0: as recorded (the same exception,
or the same output shapes), 1: raised something else, 2: did not raise,
3: other outputs. ASSUMED lists what the record could not say, so is made
up or assumed here.
"""
import sys

import torch
{"".join(f"sys.path.append({d!r})  # where it was imported from when this was written{chr(10)}" for d in paths)}{"".join(f"import {m}{chr(10)}" for m in imports)}
CALL_ID = {rec["call_id"]!r}
RECORDED_IN = {where!r}
OPERATION = {call.operation!r}
RECORDED = {what!r}
RECORDED_ERROR = {_literal(recorded_error)}  # (type, message); None: it returned
RECORDED_OUTPUTS = {rec.get("outputs")!r}  # shapes and dtypes, as recorded
CRASHED = {bool(call.incomplete)}  # the process died in this call
DEVICE = {device!r}  # synchronised after the call: an asynchronous error is this call's
ASSUMED = [
{assumed}]


def call():
    """The call as recorded."""
    # {op._schema}
{chr(10).join(lines)}
    return torch.ops.{call.operation}({", ".join(call_args)})


'''
    tail = ("\n\nif __name__ == \"__main__\":\n"
            "    sys.exit(main(call, RECORDED_ERROR, RECORDED_OUTPUTS, CRASHED, DEVICE))\n")
    body = (f"# ---- {os.path.basename(_tensors_module.__file__)}: how the tensors are made\n"
            + _module_source(_tensors_module)
            + f"\n\n# ---- {os.path.basename(_verdict_module.__file__)}: the call run and compared with the record\n"
            + _module_source(_verdict_module))
    return Script(script_name(rec), head + body + tail, notes)


def _found_in(module: str) -> Optional[str]:
    """The folder a module was imported from, when it is not an installed
    package's (site-packages): the script looks there too."""
    m = sys.modules.get(module.split(".")[0])
    f = getattr(m, "__file__", None)
    if not f:
        return None
    d = os.path.dirname(os.path.abspath(f))
    if os.path.basename(f) == "__init__.py":
        d = os.path.dirname(d)
    return None if "site-packages" in d or "dist-packages" in d else d


def _first(text: str) -> str:
    return text.strip().split("\n", 1)[0]


@dataclass
class Outcome:
    """What running a script said."""
    word: str        # reproduced | ran as recorded | raised something else | did not raise |
                     # outputs differ | crashed (SIGSEGV) | timed out
    ok: bool         # as the record says
    line: str        # the script's last line of output (or why none)


def run_script(path: str, rec: dict, timeout: float) -> Outcome:
    """Runs one script in a fresh interpreter."""
    try:
        r = subprocess.run([sys.executable, os.path.basename(path)], cwd=os.path.dirname(path) or ".",
                           capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome("timed out", False, f"still running after {timeout:g} s")
    out = (r.stdout.strip().splitlines() or [""])[-1]
    if r.returncode < 0:
        try:
            name = signal.Signals(-r.returncode).name
        except ValueError:
            name = f"signal {-r.returncode}"
        crashed = bool(rec.get("incomplete"))
        return Outcome(f"crashed ({name})" if not crashed else "reproduced", crashed,
                       f"the process died of {name}" + (" as recorded" if crashed else ""))
    word = OUTCOMES.get(r.returncode)
    if word is None:
        err = (r.stderr.strip().splitlines() or [""])[-1]
        return Outcome("failed", False, f"exit status {r.returncode}: {err}")
    if word == "reproduced" and not is_failure(rec):
        word = "ran as recorded"
    if word == "did not raise" and rec.get("incomplete"):
        word = "did not crash"
    return Outcome(word, r.returncode == _verdict_module.REPRODUCED, out)

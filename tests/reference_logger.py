"""The reference: a Python TorchDispatchMode shape logger that follows
FORMAT.md, as SGLang users run today. The parity tests compare the native
profiler's records with this one's; benchmarks/ uses it as the baseline
(flushing each record, as the seed logger did).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def describe(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return {"shape": list(v.shape), "dtype": str(v.dtype)}
    if isinstance(v, (list, tuple)):
        return [describe(x) if isinstance(x, torch.Tensor) else None for x in v]
    return None


def has_tensor(v: Any) -> bool:
    if isinstance(v, torch.Tensor):
        return True
    if isinstance(v, (list, tuple)):
        return any(isinstance(x, torch.Tensor) for x in v)
    return False


def describe_inputs(func, args, kwargs) -> dict:
    out = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            v = args[i]
        elif arg.name in kwargs:
            v = kwargs[arg.name]
        else:
            continue
        if has_tensor(v):
            out[arg.name] = describe(v)
    return out


def describe_outputs(func, result) -> Any:
    n = len(func._schema.returns)
    if n == 1:
        return describe(result) if has_tensor(result) else None
    items = list(result) if isinstance(result, (list, tuple)) else [result]
    if not any(has_tensor(x) for x in items):
        return None
    return [describe(x) if has_tensor(x) or isinstance(x, (list, tuple)) else None for x in items]


def signature(op: str, inputs: dict, outputs: Any = None, phase: Optional[str] = None) -> str:
    """What makes a call distinct (FORMAT.md): operation, inputs, outputs, phase."""
    return json.dumps([op, inputs, outputs, phase], sort_keys=False)


class ReferenceLogger(TorchDispatchMode):
    def __init__(self, path: str, *, rank: int = 0, skip_warmup: int = 0, log_n_passes: int = 0,
                 dedupe: bool = False, flush: bool = True):
        super().__init__()
        self.path = path
        self.file = open(path, "w")
        self.rank, self.skip_warmup, self.log_n_passes = rank, skip_warmup, log_n_passes
        self.dedupe, self.flush = dedupe, flush
        self.passes = self.logged_passes = self.records = self.skipped = 0
        self.counts: Counter = Counter()
        self.signatures: set = set()
        self.active = False

    # pass marking, same interface as ShapeProfiler
    def start_forward_pass(self, phase: Optional[str] = None) -> bool:
        self.end_forward_pass()
        self.passes += 1
        self.phase = phase
        if self.passes > self.skip_warmup and (
                not self.log_n_passes or self.logged_passes < self.log_n_passes):
            self.logged_passes += 1
            self.active = True
            self.__enter__()
        return self.active

    def end_forward_pass(self) -> None:
        if self.active:
            self.active = False
            self.__exit__(None, None, None)

    def _write(self, op: str, inputs: dict, outputs: Any, error: Optional[BaseException]) -> None:
        sig = signature(op, inputs, outputs, self.phase)
        seen = sig in self.signatures
        if error is None:  # a call that raised is always written, and no signature
            self.signatures.add(sig)
        self.counts[op] += 1
        if seen and self.dedupe and error is None:
            self.skipped += 1
            return
        self.records += 1
        rec = {"call_id": self.records, "forward_pass": self.passes}
        if self.phase:
            rec["phase"] = self.phase
        rec.update({"operation": op, "inputs": inputs, "outputs": outputs})
        if error is not None:
            rec["error"] = {"error_type": type(error).__name__, "error_message": str(error)}
        self.file.write(json.dumps(rec) + "\n")
        if self.flush:
            self.file.flush()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = describe_inputs(func, args, kwargs)
        try:
            result = func(*args, **kwargs)
        except Exception as e:
            self._write(str(func), inputs, None, e)
            raise
        outputs = describe_outputs(func, result)
        if inputs or outputs is not None:
            self._write(str(func), inputs, outputs, None)
        return result

    def close(self) -> None:
        self.end_forward_pass()
        if self.file.closed:
            return
        self.file.close()
        summary = {
            "rank": self.rank,
            "total_operations": self.records,
            "forward_passes": self.passes,
            "unique_operations": len(self.counts),
            "operation_counts": dict(sorted(self.counts.items(), key=lambda kv: -kv[1])),
            "dedupe_enabled": self.dedupe,
            "dedupe_skipped_count": self.skipped,
            "unique_op_signatures": len(self.signatures),
        }
        base = self.path[:-6] if self.path.endswith(".jsonl") else self.path
        with open(base + "_summary.json", "w") as f:
            json.dump(summary, f, indent=2)

"""JSON: every command's --json document, built from the data analysis/
returns, and written one way (indent 1, a final newline); and repro's
bundle, its index and its records (one a line)."""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, TextIO

from ..analysis.analyze import Analysis, doors, doors_within, passes_of
from ..analysis.cost import Device
from ..analysis.deployment import inventory
from ..analysis.diff import Diff
from ..analysis.gemm import Gemm
from ..analysis.kernel_calls import attention_calls
from ..analysis.tail import Tail
from ..analysis.tunableop import GemmTuned, tunable_calls
from ..analysis.tune.blocks import BlockKey, DeepGemmKey
from ..analysis.tune.coverage import PhaseCoverage
from ..analysis.tune.graphs import GraphSizes
from ..analysis.tune.launches import MoeLaunch
from ..analysis.tune.moe import Lookup, MoeUse
from ..analysis.tune.result import TuneResult
from ..records.scan import Source
from ..records.signature import Signature

if TYPE_CHECKING:  # types only: importing replay.scripts imports torch
    from ..replay.calls import Replayed
    from ..replay.scripts import Outcome, Script


def write_json(doc: Any, out: TextIO) -> None:
    json.dump(doc, out, indent=1)
    out.write("\n")


def write_jsonl(docs: Iterable[Any], out: TextIO) -> None:
    """One document a line, no indent (a records file's way)."""
    for d in docs:
        out.write(json.dumps(d) + "\n")


# -- analyze and diff ----------------------------------------------------------

def workload_traces_json(definition: str, workloads: List[dict]) -> List[dict]:
    """flashinfer-bench's workload traces (its data.Trace with no solution
    and no evaluation) of one definition."""
    return [{"definition": definition, "workload": w, "solution": None, "evaluation": None} for w in workloads]


def sig_json(s: Signature) -> dict:
    d = {"inputs": s.inputs, "outputs": s.outputs, "count": s.count, "records": s.records,
         "first_call_id": s.first_call, "output_elements": s.out_elements}
    if s.phase is not None:
        d["phase"] = s.phase
    if s.graph is not None:
        d["graph"] = s.graph
    if s.args is not None:
        d["args"] = s.args
    if s.error is not None:
        d["error"] = s.error
    if s.incomplete:
        d["incomplete"] = True
    if s.timed:  # a timed recording's measure: of timed_calls of its calls
        d.update(time_us=s.time_ns / 1000, timed_calls=s.timed, min_us=s.time_min / 1000,
                 max_us=s.time_max / 1000)
    if s.kernel_calls:  # a kernels-timed recording's: of kernel_calls of its calls
        d.update(kernel_us=s.kernel_ns / 1000, kernel_calls=s.kernel_calls, kernel_min_us=s.kernel_min / 1000,
                 kernel_max_us=s.kernel_max / 1000)
    return d


def _op_time(o) -> dict:
    return {"time_us": o.time_ns / 1000, "timed_calls": o.timed} if o.timed else {}


def analysis_json(a: Analysis, top: Optional[int] = None, by: str = "calls") -> dict:
    """The analysis as data: per operation, its distinct signatures with true counts."""
    files = []
    for s in a.sources:
        logged, started, with_records, covered = passes_of(s)
        files.append({"file": s.path, "label": s.label, "rank": s.rank,
                      "worker": s.worker.as_json() if s.worker is not None else None,
                      "dispatch_key": s.dispatch_key, "records": s.records,
                      "calls": s.calls, "deduplicated": s.deduplicated,
                      "forward_passes": covered, "logged_forward_passes": logged,
                      "started_forward_passes": started, "passes_with_records": with_records,
                      "truncated": s.truncated,
                      "last_line_cut": s.report.cut_last_line,
                      "unreadable_lines": len(s.report.bad_lines),
                      "graphs": {str(k): g for k, g in s.graphs.items()}, "timed": s.timed,
                      "doors": doors(s), "doors_within": doors_within(s), "records_after_summary": s.records_after_summary})
    # Over several files (ranks of one run number their passes alike): pass
    # numbers, not rank x pass -- the most any file logged, the distinct
    # numbers with records.
    known = [f["logged_forward_passes"] for f in files if f["logged_forward_passes"] is not None]
    total_logged = max(known) if known and len(known) == len(files) else None
    total_with_records = len(set().union(*(s.passes for s in a.sources))) if a.sources else 0
    total_covered = max([total_with_records] + [f["forward_passes"] for f in files])
    return {
        "files": files,
        "inventory": inventory(a.sources),
        "records": a.records,
        "calls": a.calls,
        "forward_passes": total_covered,
        "logged_forward_passes": total_logged,
        "passes_with_records": total_with_records,
        "errors": [sig_json(s) for s in a.errors],
        "attention": [{"operation": s.operation, "phase": s.phase, "calls": s.count, **asdict(c)}
                      for s, c in attention_calls(a.signatures)],
        "kernels": [kernel_ledger_json(led) for led in a.kernel_ledgers],
        "operations": [
            {"operation": o.operation, "calls": o.calls, "records": o.records, "errors": o.errors,
             "output_elements": o.out_elements, "by_file": o.by_source, **_op_time(o),
             "signatures": [sig_json(s) for s in o.signatures]}
            for o in a.ranked(top, by)
        ],
    }


def kernel_ledger_json(led) -> dict:
    """A file's GPU kernels (analysis/kernel_time.py), times in us."""
    return {"file": led.label, "kernels_file": led.path, "kernels": led.kernels,
            "total_us": led.total_ns / 1e3, "explained_us": led.explained_ns / 1e3,
            "explained_share": led.explained_share,
            "by_door_us": {d: ns / 1e3 for d, ns in led.by_door.items()},
            "unexplained": [{"kernel": n, "launches": c, "us": ns / 1e3} for n, c, ns in led.unexplained],
            "operations": [{"operation": o.operation, "calls": o.calls, "kernels": o.kernels, "us": o.ns / 1e3}
                           for o in sorted(led.operations.values(), key=lambda o: (-o.ns, o.operation))],
            "signature_kernel_times": {str(k): v for k, v in sorted(led.signatures.items())},
            "outside_passes": led.outside, "unknown_records": led.unknown_records, "dropped": led.dropped,
            "incomplete": led.incomplete,
            "unreadable_lines": led.bad_lines, "collector_stopped": led.ended}


def tail_json(tail: Tail) -> dict:
    return {"how": tail.how, "deduplicated": tail.deduplicated,
            "passes": [{"forward_pass": p.forward_pass, "graph": p.graph, "phase": p.phase,
                        "in_flight": p.in_flight, "records_after": p.after, "records": p.records}
                       for p in tail.passes]}


def diff_json(d: Diff) -> dict:
    return {
        "a": [s.path for s in d.a], "b": [s.path for s in d.b],
        "differs": d.differs,
        "only_in_a": [dict(sig_json(s), operation=s.operation) for s in d.only_a],
        "only_in_b": [dict(sig_json(s), operation=s.operation) for s in d.only_b],
        "count_changes": [dict(sig_json(s), operation=s.operation, count_a=x, count_b=y)
                          for s, x, y in d.changed],
        "operation_changes": [{"operation": op, "calls_a": x, "calls_b": y} for op, x, y in d.ops],
        "time_changes": [{"operation": s.operation, "inputs": s.inputs, "outputs": s.outputs, "phase": s.phase,
                          "us_per_call_a": x / 1000, "us_per_call_b": y / 1000} for s, x, y in d.times],
        "kernel_time_changes": [{"operation": s.operation, "inputs": s.inputs, "outputs": s.outputs,
                                 "phase": s.phase, "kernel_us_per_call_a": x / 1000,
                                 "kernel_us_per_call_b": y / 1000} for s, x, y in d.kernel_times],
    }


# -- cost and gemm -------------------------------------------------------------

COST_FIELDS = ["operation", "count", "flops_per_call", "bytes_per_call", "total_flops", "total_bytes",
               "est_us_per_call", "est_total_ms", "bound", "inputs", "outputs"]


def cost_row_json(r: tuple) -> dict:
    """One of analysis.cost.ranked_rows's rows (COST_FIELDS' keys)."""
    op, n, fl, by, sec, bound, sig = r
    return {"operation": op, "count": n, "flops_per_call": fl, "bytes_per_call": by,
            "total_flops": (fl or 0) * n, "total_bytes": by * n,
            "est_us_per_call": None if sec is None else sec * 1e6,
            "est_total_ms": None if sec is None else sec * n * 1e3, "bound": bound or None,
            "inputs": sig.inputs if sig else None, "outputs": sig.outputs if sig else None}


def cost_json(dev: Optional[Device], rows: list, srcs: List[Source]) -> dict:
    return {"device": dev.__dict__ if dev else None, "rows": [cost_row_json(r) for r in rows],
            "inventory": inventory(srcs)}


def gemm_json(shown: List[Gemm]) -> list:
    return [dict(asdict(g), total_flops=g.total_flops, us_per_call=g.us_per_call, tflops=g.tflops)
            for g in shown]


# -- tune ----------------------------------------------------------------------

def _m_json(u: MoeUse) -> List[dict]:
    return [{"phase": p, "m": m, "calls": c, "tuned_m": u.nearest(m),
             "distance": None if u.nearest(m) is None else abs(u.nearest(m) - m)}  # type: ignore[operator]
            for p, ms in sorted(u.calls.items()) for m, c in sorted(ms.items())]


def use_json(u: MoeUse, device: str, triton: Optional[str]) -> dict:
    lk = u.lookup or Lookup(None)
    return {
        "E": u.key.e, "N": u.key.n, "dtype": u.key.dtype,
        "block_shape": list(u.key.block_shape) if u.key.block_shape else None,
        "per_channel_quant": u.key.per_channel_quant, "device": device, "triton": triton,
        "hidden_size": u.hidden, "operations": u.operations, "calls": u.total,
        **({"time_us": u.time_ns / 1000, "timed_calls": u.timed} if u.timed else {}),
        **({"kernel_us": u.kernel_ns / 1000, "kernel_calls": u.kernel_calls} if u.kernel_calls else {}),
        "file_name": lk.name, "file": lk.path, "file_triton": lk.version,
        "other_triton_version": lk.other_version, "tuned_m": lk.tuned, "assumed": u.assumed,
        "down_file_name": u.down.name if u.down else None, "down_file": u.down.path if u.down else None,
        "down_tuned_m": u.down.tuned if u.down else [],
        "m": _m_json(u),
    }


def coverage_json(cov: Dict[str, PhaseCoverage]) -> dict:
    return {p: {"calls": c.calls, "tuned": c.tuned, "exact_m": c.exact, "other_m": c.other_m,
                "default": c.calls - c.tuned, "distance_calls": c.distance} for p, c in cov.items()}


def block_json(u: MoeUse, device: str) -> dict:
    k: BlockKey = u.key  # type: ignore[assignment]
    lk = u.lookup or Lookup(None)
    return {"N": k.n, "K": k.k, "dtype": k.dtype, "block_shape": list(k.block_shape), "device": device,
            "operations": u.operations, "calls": u.total, "file": lk.path, "tuned_m": lk.tuned,
            "assumed": u.assumed, "m": _m_json(u)}


def deepgemm_json(u: MoeUse) -> dict:
    k: BlockKey = u.key  # type: ignore[assignment]
    return {"N": k.n, "K": k.k, "dtype": k.dtype, "block_shape": list(k.block_shape), "operations": u.operations,
            "calls": u.total, "assumed": u.assumed,
            "m": _m_per_phase(u)}


def _m_per_phase(u: MoeUse) -> List[dict]:
    """A key's calls by phase and M, in order."""
    return [{"phase": p, "m": m, "calls": c} for p, ms in sorted(u.calls.items()) for m, c in sorted(ms.items())]


def deep_gemm_kernel_json(u: MoeUse) -> dict:
    k: DeepGemmKey = u.key  # type: ignore[assignment]
    ms = sorted(m for m, _ in u.ms())
    return {"function": k.function, "N": k.n, "K": k.k, "groups": k.groups, "masked": k.masked,
            "dtypes": k.dtypes, "calls": u.total, "m_min": ms[0], "m_max": ms[-1],
            "m": _m_per_phase(u)}


def launch_json(x: MoeLaunch) -> dict:
    return {"E": x.e, "N": x.n, "hidden_size": x.hidden, "dtype": x.dtype,
            "block_shape": list(x.block_shape) if x.block_shape else None,
            "per_channel_quant": x.per_channel_quant, "gemm": x.gemm, "m": x.m, "top_k": x.top_k,
            "phase": x.phase, "calls": x.calls, "launched": x.launched, "expected": x.expected,
            "source": x.source or None, "file": x.file, "tuned_m": x.tuned_m, "verdict": x.verdict,
            "assumed": x.assumed}


def tunableop_json(cov: List[GemmTuned], path: str) -> dict:
    n, t = tunable_calls(cov)
    return {"results": path, "calls": n, "tuned_calls": t,
            "gemms": [{"operation": c.gemm.operation, "m": c.gemm.m, "n": c.gemm.n, "k": c.gemm.k,
                       "batch": c.gemm.batch, "count": c.gemm.count, "entry": c.line, "kernel": c.kernel,
                       "note": c.note} for c in cov]}


def graph_sizes_json(g: GraphSizes) -> dict:
    return {"share": g.share, "replays": {str(k): v for k, v in sorted(g.replays.items())},
            "unused": g.unused,
            "graphs": [{"size": x.size, "replays": x.replays, "real_known": x.known,
                        "real_sizes": {str(r): n for r, n in sorted(x.served.items())},
                        "mean_real": x.mean_real, "padding": x.padding}
                       for _, x in sorted(g.graphs.items())],
            "real_unknown": g.unknown, "unweighed": g.unweighed,
            "eager_decode": {str(k): v for k, v in sorted(g.eager.items())},
            "unit": g.unit, "batch_sizes": {str(k): v for k, v in sorted(g.batches.items())},
            "suggested": g.suggested, "padding_now": g.waste_now, "padding_suggested": g.waste_suggested,
            "above_now": g.above(sorted(g.graphs)), "above_suggested": g.above(g.suggested)}


def tune_json(r: TuneResult, tuners: List[str], srcs: List[Source], gemm_cov: Optional[List[GemmTuned]] = None,
              results_path: str = "", sizes: Optional[GraphSizes] = None) -> dict:
    """`tune --json`: the whole result, with the tuner's command lines, the
    TunableOp results' coverage (gemm_cov, of results_path) and the
    CUDA-graph batch sizes where they were asked for."""
    return {"device": r.device, "triton": r.triton, "sglang": r.sglang, "roots": r.roots,
            "coverage": coverage_json(r.moe_coverage),
            "keys": [use_json(u, r.device, r.triton) for u in r.moe],
            "tuner_commands": tuners,
            "block_gemm": {"folders": r.gemm_folders, "coverage": coverage_json(r.block_coverage),
                           "keys": [block_json(u, r.device) for u in r.block]},
            "deepgemm": [deepgemm_json(u) for u in r.deepgemm],
            "deep_gemm_kernels": [deep_gemm_kernel_json(u) for u in r.deep_gemm_kernels],
            "launches": [launch_json(x) for x in r.launches],
            "library_moe": [{"operation": g.operation, "experts": g.experts, "local_experts": g.local_experts,
                             "hidden": g.hidden, "intermediate": g.intermediate, "up_width": g.up_width,
                             "top_k": g.top_k, "dtype": g.dtype, "calls": g.calls,
                             "tokens": [{"phase": p, "m": m, "calls": n} for (p, m), n in g.tokens.items()]}
                            for g in r.library_moe],
            "tunableop": None if gemm_cov is None else tunableop_json(gemm_cov, results_path),
            "cuda_graph_bs": None if sizes is None else graph_sizes_json(sizes),
            "inventory": inventory(srcs)}


# -- replay and repro ----------------------------------------------------------

def _replayed_json(r: Replayed) -> dict:
    d = {"operation": r.call.operation, "inputs": r.call.inputs, "args": r.call.args,
         "count": r.call.count, "median_us": r.median_us, "p10_us": r.p10_us, "p90_us": r.p90_us,
         "total_us": r.total_us, "iterations": r.iterations, "input_copies": r.copies,
         "device": r.device or None,
         "outputs_match": None if r.reason else r.output_mismatch is None,
         "output_mismatch": r.output_mismatch, "synthesised": r.synthesised,
         "timing_doubts": None if r.reason else r.timing_doubts, "others_runnable": r.others_runnable,
         "threads": r.threads or None}
    if r.reason is not None:
        d["reason"] = r.reason
    return d


def replay_json(results: List[Replayed]) -> list:
    """`replay --json`: one object per distinct call."""
    return [_replayed_json(r) for r in results]


def repro_call_json(rec: dict, script: Optional[Script] = None, reason: str = "",
                    outcome: Optional[Outcome] = None) -> dict:
    """One call of repro's index.json: its record's identity, then its script
    (or the reason there is none) and, with --run, what running it said."""
    d = {"call_id": rec.get("call_id"), "operation": rec.get("operation"), "forward_pass": rec.get("forward_pass"),
         "error": rec.get("error"), "incomplete": bool(rec.get("incomplete"))}
    if script is None:
        return {**d, "script": None, "reason": reason}
    d.update(script=script.name, notes=script.notes)
    if outcome is not None:
        d["outcome"] = {"result": outcome.word, "as_recorded": outcome.ok, "output": outcome.line}
    return d


def repro_index_json(records_file: str, calls: List[dict]) -> dict:
    """repro's index.json; the records file by its absolute path, the bundle being carried elsewhere."""
    return {"records_file": os.path.abspath(records_file), "calls": calls}

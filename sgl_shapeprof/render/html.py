"""HTML: `sgl-shapeprof report`'s one self-contained page of plots, from
analysis/report.py's data, that opens with no network (plotly.js is inlined
once, in the first figure).

Everything taken from the records (operation names, error messages, paths)
is escaped: a records file can hold any text.
"""
from __future__ import annotations

import html
import math
import time
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

from .. import __version__
from ..analysis.analyze import OpView
from ..analysis.cost import Device, format_time, peaks_text
from ..analysis.gemm import Gemm
from ..analysis.report import PhaseCalls, Report, Times
from ..analysis.tune.coverage import coverage
from ..analysis.tune.moe import MoeUse
from ..analysis.tune.result import TuneResult
from ..records.scan import Source
from ..records.signature import Signature
from ..records.values import format_inputs

_CONFIG = {"displaylogo": False, "responsive": True}
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1400px;
padding:16px 24px;color:#222}
h1{margin:0 0 4px}h2{margin:28px 0 4px;border-bottom:1px solid #ddd;padding-bottom:2px}
.note{color:#555;margin:2px 0 8px}.meta{color:#666;font-size:12px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5}tr:nth-child(even) td{background:#fafbfc}.n{text-align:right;white-space:nowrap}
code,td.s{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;overflow-wrap:anywhere}
.errors{border:2px solid #c62828;background:#fff5f5;padding:4px 12px 12px;margin:16px 0;border-radius:6px}
.errors h2{color:#c62828;border-color:#f3c0c0}
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _label(text: str) -> str:
    # plotly reads <br>, <b>... in labels and decodes &amp; &lt; &gt; (not &quot;)
    return html.escape(text, quote=False)


class _Page:
    """The page's parts in order; plotly.js goes in once, with the first figure."""

    def __init__(self) -> None:
        self.parts: List[str] = []
        self.figures = 0

    def add(self, text: str) -> None:
        self.parts.append(text)

    def section(self, title: str, note: str = "") -> None:
        self.add(f"<h2>{_e(title)}</h2>" + (f'<p class="note">{note}</p>' if note else ""))

    def figure(self, fig, height: int) -> None:
        fig.update_layout(height=height, template="plotly_white", margin=dict(l=10, r=30, t=30, b=50),
                          font=dict(size=12),
                          legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0, traceorder="normal"))
        self.add(fig.to_html(full_html=False, include_plotlyjs=self.figures == 0, config=_CONFIG,
                             default_height=f"{height}px"))
        self.figures += 1


def _hbar(go, labels: List[str], height_per: int = 18) -> Tuple[object, int]:
    """A horizontal bar figure, the first label on top, long names fully shown."""
    fig = go.Figure()
    fig.update_yaxes(categoryorder="array", categoryarray=[_label(x) for x in labels],
                     autorange="reversed", automargin=True)
    return fig, max(220, 110 + height_per * len(labels))


def _header(page: _Page, r: Report) -> None:
    a = r.analysis
    page.add(f"<h1>Operator shapes report</h1><p class=meta>sgl_shapeprof {_e(__version__)}, "
             f"{_e(time.strftime('%Y-%m-%d %H:%M'))}</p>")
    page.add(f"<p><b>{a.records:,}</b> records standing for <b>{a.calls:,}</b> calls of "
             f"<b>{len(a.ops):,}</b> operators in <b>{len(a.signatures):,}</b> distinct signatures; "
             f"{sum(f.passes for f in r.files):,} forward passes.</p>")
    if r.filters:
        page.add(f'<p class="note">filters: <code>{_e(r.filters)}</code></p>')
    rows = "".join(
        f"<tr><td class=s>{_e(f.source.path)}</td><td class=n>{f.source.records:,}</td>"
        f"<td class=n>{f.source.calls:,}</td><td class=n>{f.passes:,}</td>"
        f"<td>{_e(_phases_text(f.source))}</td><td>{_e('; '.join(f.notes))}</td></tr>" for f in r.files)
    page.add("<table><tr><th>file</th><th class=n>records</th><th class=n>true calls</th>"
             f"<th class=n>passes</th><th>phases</th><th>notes</th></tr>{rows}</table>")
    for line in r.inventory:
        page.add(f'<p class="note">{_e(line)}</p>')
    if any(f.source.deduplicated for f in r.files):
        page.add('<p class="note">Deduplicated files write each signature once; their calls are the true '
                 "counts from the summary beside them, and every count on this page is a call count.</p>")


def _phases_text(s: Source) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(s.phases.items(), key=lambda kv: -kv[1]))


def _errors(page: _Page, errs: List[Signature]) -> None:
    if not errs:
        return
    rows = []
    for s in errs[:100]:
        kind, msg = ((s.error.get("error_type"), s.error.get("error_message")) if s.error
                     else ("INCOMPLETE", "the process died during this call"))
        first = (str(msg or "").splitlines() or [""])[0]
        rows.append(f"<tr><td class=s>{_e(s.operation)}</td><td>{_e(kind)}</td><td>{_e(first)}</td>"
                    f"<td class=n>{s.first_call}</td><td class=n>{s.count:,}</td>"
                    f"<td class=s>{_e(format_inputs(s.inputs))}</td></tr>")
    more = f"<p class=note>... {len(errs) - 100} more</p>" if len(errs) > 100 else ""
    n = sum(s.count for s in errs)
    page.add(f'<div class="errors"><h2>&#9888; Errors: {n:,} call{"s" if n != 1 else ""} raised '
             f"({len(errs)} distinct)</h2><table><tr><th>operation</th><th>error</th>"
             "<th>message (first line)</th><th class=n>first call id</th><th class=n>calls</th>"
             f"<th>inputs</th></tr>{''.join(rows)}</table>{more}</div>")


def _calls(page: _Page, go, r: Report) -> None:
    ops = r.calls
    page.section(f"Operators by call count (top {len(ops)} of {len(r.analysis.ops)})")
    fig, height = _hbar(go, [o.operation for o in ops])
    labels: List[Optional[str]] = list(r.labels) or [None]
    for lab in labels:  # one stack segment per file when there are several
        xs = [o.by_source.get(lab, 0) if lab else o.calls for o in ops]
        fig.add_bar(x=xs, y=[_label(o.operation) for o in ops], orientation="h", name=_label(lab or "calls"),
                    hovertemplate="%{y}: %{x:,} calls<extra>%{fullData.name}</extra>")
    fig.update_layout(barmode="stack", showlegend=len(labels) > 1, xaxis_title="calls")
    page.figure(fig, height)


def _times(page: _Page, go, t: Times, dev: Device) -> None:
    if not t.total:
        page.section("Estimated GPU time", "No call with a cost (every call raised, or only views).")
        return
    left = (f" The other {t.hidden} operators, {format_time(t.hidden_seconds)} "
            f"({100 * t.hidden_seconds / t.total:.1f}%), are not shown." if t.hidden else "")
    page.section(f"Operators by estimated GPU time (top {len(t.shown)})",
                 f"A roofline estimate on {_e(dev.name)} ({_e(peaks_text(dev))}, {dev.bandwidth:g} TB/s), not a "
                 "measurement: per call the larger of FLOPs/peak and bytes moved/bandwidth, times the calls. "
                 f"{_e(format_time(t.total))} in all.{_e(left)}")
    fig, height = _hbar(go, [o.operation for o in t.shown])
    for bound, color in (("memory", "#1f77b4"), ("compute", "#d62728")):
        mine = [o for o in t.shown if o.bound == bound]
        fig.add_bar(x=[o.seconds for o in mine], y=[_label(o.operation) for o in mine], orientation="h",
                    name=f"{bound}-bound", marker_color=color,
                    customdata=[[format_time(o.seconds), f"{100 * o.seconds / t.total:.1f}%", o.calls]
                                for o in mine],
                    hovertemplate="%{y}<br>%{customdata[0]} (%{customdata[1]}), %{customdata[2]:,} calls"
                                  f"<extra>{bound}-bound</extra>")
    fig.update_layout(barmode="stack", xaxis=dict(title="estimated time", tickformat="~s", ticksuffix="s"))
    page.figure(fig, height)


def _shapes(page: _Page, go, shapes: List[Tuple[OpView, int]]) -> None:
    ops = [o for o, _ in shapes]
    page.section(f"Distinct shapes per operator (top {len(ops)})",
                 "Each distinct combination of input and output shapes and dtypes counts once.")
    fig, height = _hbar(go, [o.operation for o in ops])
    fig.add_bar(x=[n for _, n in shapes], y=[_label(o.operation) for o in ops], orientation="h",
                marker_color="#2ca02c", customdata=[o.calls for o in ops],
                hovertemplate="%{y}: %{x} shapes, %{customdata:,} calls<extra></extra>")
    fig.update_layout(xaxis_title="distinct shapes")
    page.figure(fig, height)


def _phases(page: _Page, go, p: Optional[PhaseCalls]) -> None:
    if p is None:
        page.section("Calls per phase", "No phases: the passes were not labelled (e.g. "
                     "<code>prof.forward_pass(\"decode\")</code>).")
        return
    ops = p.operations
    top = max(max(c.values()) for c in p.counts.values())
    log = top >= 100  # a phase with a few calls next to one with thousands
    page.section("Calls per operator per phase",
                 f"Each phase's most called operators ({len(ops)} in all){'; log scale' if log else ''}.")
    fig, height = _hbar(go, ops, height_per=8 + 9 * len(p.phases))
    for ph in p.phases:
        fig.add_bar(x=[p.counts[ph].get(op, 0) for op in ops], y=[_label(op) for op in ops], orientation="h",
                    name=_label(ph), hovertemplate="%{y}: %{x:,} calls<extra>%{fullData.name}</extra>")
    # from below 1 so that an operator called once still shows a bar; ticks at decades
    axis = dict(type="log", dtick=1, range=[-0.15, math.log10(top) + 0.1]) if log else {}
    fig.update_layout(barmode="group", xaxis=dict(title="calls", **axis))
    page.figure(fig, height)


def _gemms(page: _Page, go, gs: List[Gemm]) -> None:
    if not gs:
        page.section("GEMMs", "No matrix multiplies (mm, addmm, bmm, linear, matmul...) in these files.")
        return
    page.section(f"GEMM shapes: M x N x K ({len(gs)} distinct)",
                 "Each point a distinct GEMM; a larger marker is a larger K (log scale). Hover for details.")
    fig = go.Figure()
    by_dtype: Dict[str, list] = defaultdict(list)
    for g in gs:
        by_dtype[g.a_dtype if g.a_dtype == g.b_dtype else f"{g.a_dtype} x {g.b_dtype}"].append(g)
    for dt, rows in sorted(by_dtype.items()):
        fig.add_scatter(
            x=[g.m for g in rows], y=[g.n for g in rows], mode="markers", name=_label(dt),
            marker=dict(size=[6 + 3 * math.log2(max(g.k, 1)) for g in rows], opacity=0.7,
                        line=dict(width=1, color="white")),
            customdata=[[g.k, g.batch, g.count, f"{g.flops:,}", f"{g.total_flops:,}", _label(g.operation)]
                        for g in rows],
            hovertemplate="M=%{x} N=%{y} K=%{customdata[0]} batch=%{customdata[1]}<br>%{customdata[2]:,} "
                          "calls, %{customdata[3]} FLOP/call, %{customdata[4]} in all<br>%{customdata[5]}"
                          "<extra>%{fullData.name}</extra>")
    fig.update_layout(xaxis=dict(title="M (rows of A: tokens)", **_pow2_axis([g.m for g in gs])),
                      yaxis=dict(title="N (output features)", **_pow2_axis([g.n for g in gs])))
    page.figure(fig, 520)


def _pow2_axis(values: List[int]) -> dict:
    """A log axis ticked at powers of two, the sizes GEMMs come in."""
    lo, hi = max(min(values), 1), max(max(values), 1)
    ticks = [2 ** i for i in range(int(math.log2(lo)), int(math.log2(hi)) + 2)]
    return dict(type="log", tickvals=ticks, ticktext=[f"{t:,}" for t in ticks],
                range=[math.log10(lo) - 0.2, math.log10(hi) + 0.2])


def _table(page: _Page, r: Report) -> None:
    grand = r.cost_total
    if not grand:
        return
    page.section(f"Top {len(r.costly)} signatures by estimated time on {r.device.name}")
    ph = "<th>phase</th>" if r.phased else ""
    rows = "".join(
        f"<tr><td class=n>{_e(format_time(c.total_seconds))}</td>"
        f"<td class=n>{100 * c.total_seconds / grand:.1f}%</td><td class=n>{_e(format_time(c.seconds))}</td>"
        f"<td>{_e(c.bound)}</td><td class=n>{c.sig.count:,}</td>"
        + (f"<td>{_e(c.sig.phase or '')}</td>" if r.phased else "")
        + f"<td class=s>{_e(c.sig.operation)}</td><td class=s>{_e(c.sig.text)}</td></tr>" for c in r.costly)
    page.add("<table><tr><th class=n>est. total</th><th class=n>share</th><th class=n>per call</th>"
             f"<th>bound</th><th class=n>calls</th>{ph}<th>operation</th><th>inputs -&gt; outputs</th></tr>"
             f"{rows}</table>")


def _coverage(page: _Page, go, t: TuneResult) -> None:
    """Tuned-config coverage (`sgl-shapeprof tune`): per kind and phase,
    the calls on a config tuned for their own M, for another M, or on the
    default config; then every key with its file."""
    kinds = [("fused-MoE", t.moe, t.moe_coverage), ("block GEMM", t.block, t.block_coverage)]
    kinds = [k for k in kinds if k[1]]
    page.section(f"Tuned-config coverage on {t.device}",
                 "Which kernel configs the calls needed and whether SGLang has them tuned for this device "
                 "(<code>sgl-shapeprof tune</code>). " + ("" if kinds else
                                                          "No fused-MoE or block-GEMM calls in these files."))
    if not kinds:
        return
    fig = go.Figure()
    labels = [f"{kind}: {p}" for kind, _, cov in kinds for p in sorted(cov)]
    parts = (("tuned for their own M", "#2e7d32", lambda c: c.exact),
             ("tuned for another M", "#f9a825", lambda c: c.other_m),
             ("default config", "#c62828", lambda c: c.calls - c.tuned))
    for name, color, value in parts:
        xs = [100.0 * value(cov[p]) / (cov[p].calls or 1) for _, _, cov in kinds for p in sorted(cov)]
        fig.add_trace(go.Bar(y=[_label(x) for x in labels], x=xs, name=name, orientation="h",
                             marker_color=color, hovertemplate="%{x:.1f}%<extra>" + name + "</extra>"))
    fig.update_layout(barmode="stack", xaxis_title="% of calls")
    fig.update_yaxes(autorange="reversed", automargin=True)
    page.figure(fig, max(200, 90 + 28 * len(labels)))
    for kind, uses, _ in kinds:
        page.add(_coverage_table(kind, uses))


def _coverage_table(kind: str, uses: List[MoeUse]) -> str:
    rows = []
    for u in uses:
        per = "; ".join(f"{p}: {c.calls:,} calls, {c.pct(c.exact):.0f}% own M"
                        for p, c in sorted(coverage([u]).items()) if p != "all")
        f = u.lookup.path if u.lookup and u.lookup.path else None
        rows.append(f"<tr><td class=s>{_e(u.key.text)}</td><td class=n>{u.total:,}</td><td>{_e(per)}</td>"
                    f"<td class=s>{_e(f) if f else '<b>not tuned</b>: default config'}</td></tr>")
    return (f"<table><tr><th>{_e(kind)} key</th><th class=n>calls</th><th>per phase</th><th>file</th></tr>"
            + "".join(rows) + "</table>")


def report_html(r: Report) -> str:
    """The whole page; with r.tune, a tuned-config coverage section."""
    import plotly.graph_objects as go

    page = _Page()
    _header(page, r)
    _errors(page, r.errors)
    if not r.analysis.ops:
        page.add("<p>No calls: the files are empty or nothing matches the filters.</p>")
    else:
        _calls(page, go, r)
        _times(page, go, r.times, r.device)
        _shapes(page, go, r.shapes)
        _phases(page, go, r.phases)
        _gemms(page, go, r.gemms)
        if r.tune is not None:
            _coverage(page, go, r.tune)
        _table(page, r)
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>sgl-shapeprof report</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(page.parts) + "\n</body></html>\n")

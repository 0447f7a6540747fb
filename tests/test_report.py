"""`sgl-shapeprof report`: one self-contained HTML page whose plots render in
a browser (headless Chromium, when there is one) with no console errors."""
import json
import os
import re
import shutil
import subprocess

import pytest
import torch

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.cli import main

pytest.importorskip("plotly")

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
FIGURES = 5  # calls, estimated time, distinct shapes, per phase, GEMM scatter


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> str:
    """A tiny two-layer model profiled for real: a prefill, three decode
    steps, and one mm that raises inside the prefill."""
    path = str(tmp_path_factory.mktemp("report") / "shapes.jsonl")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    with torch.inference_mode(), ShapeProfiler(path) as prof:
        with prof.forward_pass("prefill"):
            model(torch.randn(2, 5, 16))
            try:
                torch.mm(torch.ones(2, 3), torch.ones(4, 5))
            except RuntimeError:
                pass
        for _ in range(3):
            with prof.forward_pass("decode"):
                model(torch.randn(2, 1, 16))
    return path


def _report(records: str, out, *extra) -> int:
    return main(["report", records, "-o", str(out), *extra])


def test_report_is_self_contained(records, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert _report(records, out) == 0
    said = capsys.readouterr().out.strip()
    assert said.count("\n") == 0 and str(out) in said and said.endswith("MB)")
    page = out.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\ssrc\s*=", page, re.I)          # nothing loaded: all inline
    assert not re.search(r"<link[^>]*href\s*=\s*[\"']?https?:", page, re.I)
    assert page.count("<script") >= FIGURES and page.count('class="plotly-graph-div"') == FIGURES
    assert len(re.findall(r"\bPlotly\.newPlot\(", page)) == FIGURES
    errors = page[page.index('class="errors"'):page.index("Operators by call count")]  # errors first
    assert "aten.mm.default" in errors and "RuntimeError" in errors
    assert "aten.linear.default" in page and "prefill" in page and "decode" in page
    assert "roofline estimate on H100" in page


def test_hostile_text_is_escaped(tmp_path):
    """Operation names and error messages go into the page as text, never as markup."""
    evil_op = 'aten.<img src=x onerror="alert(1)">.default'
    evil_msg = "</script><script>alert(2)</script> & more"
    recs = [{"call_id": 1, "forward_pass": 1, "operation": evil_op,
             "inputs": {"self": {"shape": [2, 3], "dtype": "torch.float16"}},
             "outputs": {"shape": [2, 3], "dtype": "torch.float16"}},
            {"call_id": 2, "forward_pass": 1, "operation": "aten.mm.default",
             "inputs": {"self": {"shape": [2, 3], "dtype": "torch.float16"},
                        "mat2": {"shape": [4, 5], "dtype": "torch.float16"}},
             "outputs": None, "error": {"error_type": "RuntimeError", "error_message": evil_msg}}]
    path = tmp_path / "evil.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "evil.html"
    assert _report(str(path), out) == 0
    page = out.read_text(encoding="utf-8")
    assert "<img src=x" not in page and "<script>alert(2)" not in page and "onerror=\"alert" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(2)" in page and "&lt;img src=x" in page


def test_existing_output_is_kept_without_force(records, tmp_path, capsys):
    out = tmp_path / "report.html"
    out.write_text("mine, keep me")
    assert _report(records, out) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"sgl-shapeprof report: {out} exists; not overwritten (--force to replace it)"
    assert out.read_text() == "mine, keep me"
    assert _report(records, out, "--force") == 0
    assert "Plotly.newPlot" in out.read_text(encoding="utf-8")


def test_bad_gpu_and_missing_plotly(records, tmp_path, capsys, monkeypatch):
    out = tmp_path / "report.html"
    assert _report(records, out, "--gpu", "nonsense") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sgl-shapeprof report: unknown --gpu 'nonsense'")
    assert not out.exists()
    monkeypatch.setitem(__import__("sys").modules, "plotly", None)  # import plotly raises ImportError
    assert _report(records, out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs plotly: pip install" in err
    assert not out.exists()


def _chromium(tmp_path, url: str, *args: str) -> subprocess.CompletedProcess:
    # --no-sandbox: Chromium refuses to run as root without it (containers, CI)
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=10000", *args, url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def _console(stderr: str) -> list:
    # what the page logs, errors included, comes out as
    # [...:INFO:CONSOLE:1] "Uncaught ReferenceError: ...", source: file:///... (1)
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (chromium on PATH or /usr/bin/chromium) "
                                             "to render the report headless")
def test_report_renders_in_chromium(records, tmp_path):
    # first make sure a JS error does show up in what _console() reads, so
    # that finding none below means something
    canary = tmp_path / "canary.html"
    canary.write_text("<html><body><script>noSuchFunction()</script></body></html>")
    seen = _console(_chromium(tmp_path, canary.as_uri(), "--dump-dom").stderr)
    assert any("noSuchFunction" in ln for ln in seen), "Chromium's console log format changed"

    out = tmp_path / "report.html"
    assert _report(records, out) == 0
    r = _chromium(tmp_path, out.as_uri(), "--dump-dom")
    assert _console(r.stderr) == []
    dom = r.stdout
    # plotly marks each graph div it has drawn, and draws SVG into it
    # (the inlined plotly.js holds these class names too: match whole tags)
    assert len(re.findall(r'<div [^>]*class="plotly-graph-div js-plotly-plot"', dom)) == FIGURES, dom[-3000:]
    assert dom.count('<svg class="main-svg"') >= FIGURES
    assert '<g class="trace bars"' in dom and '<g class="trace scatter' in dom
    assert len(re.findall(r'<path class="point\b', dom)) == 4  # GEMMs: 2 layers x (prefill, decode) M
    assert re.search(r"<text [^>]*>aten\.linear\.default</text>", dom)  # a tick label, drawn

    png = tmp_path / "report.png"
    r = _chromium(tmp_path, out.as_uri(), f"--screenshot={png}", "--window-size=1400,3000")
    assert _console(r.stderr) == []
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000, len(data)  # plots, not a blank page
    if os.environ.get("SHAPEPROF_ARTIFACTS"):
        os.makedirs(os.environ["SHAPEPROF_ARTIFACTS"], exist_ok=True)
        shutil.copy(png, os.path.join(os.environ["SHAPEPROF_ARTIFACTS"], "report.png"))

"""SGLang 0.5.23's CUDA graphs under the profiler, on CPU: the real
DecodeCudaGraphRunner (full graphs, one per batch size) and the real
BreakableCudaGraphBackend (prefill graphs with an @eager_on_graph attention
break), with only the CUDA pieces stubbed (tests/sglang_env/run_graphs.py,
in a child process: the stubs change torch and SGLang's global state).
Both ways in: the zero-edit start-up hook, and SGLang's graph backend files
patched with patches/.

What must hold: one capture per graph, recorded with its "graph" key and
phase, holding exactly one model run's calls (not the warm-ups before it);
a breakable graph's capture without its eager breaks (those are logged by
the passes that replay it); replays counted per graph in the summary; and
the analysis counting a captured call once per replay. The graph keys and
the wrappers' fallback are checked without SGLang too."""
import collections
import enum
import itertools
import json
import os
import subprocess
import sys
import sysconfig

import pytest
import torch
from helpers import PKG_ROOT, ROOT, needs_sglang, patched_sglang_tree, true_counts
from sglang_engine_helpers import assert_patched_and_compiling

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.recording import env as profiler_module
from sgl_shapeprof.integrations import graphs as graph_keys
from sgl_shapeprof.integrations.sglang import cuda_graphs as integration
from sgl_shapeprof.on_import import is_ours

SGLANG_VERSION = "0.5.23"
ENV_DIR = os.path.join(ROOT, "tests", "sglang_env")
STUBS = os.path.join(ENV_DIR, "stubs")
OVERLAY = os.path.join(ENV_DIR, "patched_overlay")
BACKENDS = {"full_cuda_graph_backend": "sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py",
            "breakable_cuda_graph_backend":
                "sglang/srt/model_executor/runner_backend/breakable_cuda_graph_backend.py"}
FAMILY = 1_000_000   # graph key = family * FAMILY + size; prefill graphs are family 1 here
# run_graphs.py's defaults: raw decode batches 3,1,4,2,3 over graphs 1, 2, 4;
# raw prefill token counts 3,16,4 over buckets 4, 16
DECODE_REPLAYS = {4: 3, 2: 1, 1: 1}
PREFILL_REPLAYS = {4: 2, 16: 1}
# the summary's real sizes per graph: what each replay served before padding
DECODE_REAL = {4: {"3": 2, "4": 1}, 2: {"2": 1}, 1: {"1": 1}}
PREFILL_REAL = {4: {"3": 1, "4": 1}, 16: {"16": 1}}
# SGLang custom ops (register_custom_op) in the models: the MLP's activation
# (captured with the decode graphs) and the attention's softmax (eager break)
RELU, SOFTMAX = "sglang.shapeprof_test_relu.default", "sglang.shapeprof_test_softmax.default"
ATTENTION = {"aten.transpose.int", "aten.mm.default", SOFTMAX}   # the eager break


needs_sglang = needs_sglang(SGLANG_VERSION)


# ---- without SGLang: graph keys, and the wrappers' fallback ---------------------
ForwardMode = enum.Enum("ForwardMode", "DECODE EXTEND TARGET_VERIFY DRAFT_EXTEND_V2")
ShapeKey = collections.namedtuple("ShapeKey", "size stream_idx variant_label attention_variant",
                                  defaults=(None, None, None))


class Runner:
    def __init__(self, mode, draft=False, forward_mode=None):
        self.capture_forward_mode = mode
        self.model_runner = type("MR", (), {"is_draft_worker": draft})()
        if forward_mode is not None:
            self.forward_mode = forward_mode


class FakeBackend:
    """capture_one/replay as SGLang's backends call forward_fn: two warm-ups,
    then the run made while the stream captures."""
    capturing = False

    def __init__(self, runner):
        self._cuda_graph_runner = runner
        self._device_module = self
        self.graphs = {}

    def is_current_stream_capturing(self):
        return FakeBackend.capturing

    def capture_one(self, shape_key, forward_fn, capture_inputs=None, post_warmup_hook=None):
        forward_fn()
        forward_fn()
        FakeBackend.capturing = True
        try:
            self.graphs[shape_key] = forward_fn()
        finally:
            FakeBackend.capturing = False

    def replay(self, shape_key, static_forward_batch, **kwargs):
        return self.graphs[shape_key]


@pytest.fixture
def fresh_keys(monkeypatch):
    monkeypatch.setattr(graph_keys, "_graph_families", {})
    monkeypatch.setattr(graph_keys, "_graph_captured", set())
    monkeypatch.setattr(graph_keys, "_graph_backends", itertools.count(1))


def test_graph_phases():
    phase = integration.graph_phase
    assert phase(FakeBackend(Runner(ForwardMode.DECODE))) == "decode"
    assert phase(FakeBackend(Runner(ForwardMode.EXTEND))) == "extend"
    assert phase(FakeBackend(Runner(ForwardMode.TARGET_VERIFY))) == "target_verify"
    assert phase(FakeBackend(Runner(ForwardMode.DECODE, draft=True))) == "draft_decode"
    assert phase(FakeBackend(Runner(ForwardMode.DECODE, draft=True,
                                    forward_mode=ForwardMode.DRAFT_EXTEND_V2))) == "draft_extend_v2"
    assert phase(object()) is None


def test_graph_keys(fresh_keys):
    """Decode graphs of the default variant: their batch size. Every other
    family of graphs: family * 1e6 + size, numbered in capture order; a graph
    captured again never reuses a key."""
    key = integration.graph_key
    prefill, decode = FakeBackend(Runner(ForwardMode.EXTEND)), FakeBackend(Runner(ForwardMode.DECODE))
    assert [key(prefill, ShapeKey(n), "extend") for n in (16, 8)] == [FAMILY + 16, FAMILY + 8]
    assert [key(decode, ShapeKey(bs), "decode") for bs in (4, 2, 1)] == [4, 2, 1]
    assert key(decode, ShapeKey(4, variant_label="lora"), "decode") == 2 * FAMILY + 4
    assert key(decode, ShapeKey(4, variant_label="nolora"), "decode") == 3 * FAMILY + 4
    assert key(decode, ShapeKey(4, stream_idx=1), "decode") == 4 * FAMILY + 4
    draft = FakeBackend(Runner(ForwardMode.DECODE, draft=True))
    assert key(draft, ShapeKey(4), "draft_decode") == 5 * FAMILY + 4
    again = FakeBackend(Runner(ForwardMode.DECODE))   # a new runner captures again (elastic EP)
    assert [key(again, ShapeKey(bs), "decode") for bs in (4, 2)] == [6 * FAMILY + 4, 6 * FAMILY + 2]
    assert key(decode, ShapeKey(4), "decode") == 7 * FAMILY + 4   # the same backend, again
    assert graph_keys.captured_key(decode, ShapeKey(4)) == 7 * FAMILY + 4   # replays count there now
    assert key(decode, ShapeKey(FAMILY), "decode") is None


def test_graph_backend_wrappers(tmp_path, monkeypatch, fresh_keys, capsys):
    """Warm-ups unrecorded, the capture run recorded, replays counted; a
    failure of ours leaves SGLang's behaviour and is said once."""
    class Backend(FakeBackend):
        pass
    integration._wrap_graph_backend(Backend)
    integration._wrap_graph_backend(Backend)   # both ways in at once: wrapped once
    assert not is_ours(Backend.capture_one.__wrapped__)
    prof = ShapeProfiler(tmp_path / "s.jsonl")
    monkeypatch.setattr(profiler_module, "_env_profiler", prof)
    x, runs = torch.ones(2, 3), []

    def forward():
        runs.append(FakeBackend.capturing)
        return torch.relu(x)

    backend = Backend(Runner(ForwardMode.DECODE))
    backend.capture_one(ShapeKey(2), forward)
    broken = Backend(Runner(ForwardMode.DECODE))
    del broken._device_module          # our wrapper fails: the capture runs as SGLang's would
    broken.capture_one(ShapeKey(8), forward)
    assert runs == [False, False, True] * 2
    for raw in (1, 1, 5, None):  # the runner's raw_bs: 5 does not fit graph 2 (not believed)
        if raw is not None:
            backend._cuda_graph_runner.raw_bs = raw
        else:
            del backend._cuda_graph_runner.raw_bs
        with prof.forward_pass("decode"):
            backend.replay(ShapeKey(2), None)
            broken.replay(ShapeKey(8), None)
    backend.replay(ShapeKey(2), None)  # outside a pass: not counted
    prof.close()
    records = [json.loads(line) for line in open(tmp_path / "s.jsonl")]
    assert [(r["operation"], r["forward_pass"], r["graph"]) for r in records] == [("aten.relu.default", 0, 2)]
    assert json.load(open(tmp_path / "s_summary.json"))["graphs"] == {
        "2": {"captures": 1, "replays": 4, "real_sizes": {"1": 2}}}
    assert capsys.readouterr().err.count("cannot record SGLang's CUDA graphs") <= 1


# ---- SGLang 0.5.23's graph runner and backends ----------------------------------
@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory):
    """SGLang's two graph backend files, as installed, with our patches applied."""
    return patched_sglang_tree(tmp_path_factory.mktemp("patched"), BACKENDS, SGLANG_VERSION)


def run_graphs(tmp_path, way, patched_tree=None, mode="1", by_stage=False, **profile_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_PROFILE_SHAPES")}
    paths = [STUBS, PKG_ROOT]
    if way == "patched":
        paths.insert(0, OVERLAY)
        env["SHAPEPROF_PATCHED_TREE"] = str(patched_tree)
    elif not os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "sgl_shapeprof_autohook.pth")):
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update({"SGLANG_PROFILE_SHAPES": mode, "SGLANG_PROFILE_SHAPES_FILE": str(tmp_path / "shapes.jsonl")})
    env.update({f"SGLANG_PROFILE_SHAPES_{k.upper()}": str(v) for k, v in profile_env.items()})
    args = [str(tmp_path / "out.json")] + (["--request", str(tmp_path / "request")] if mode != "1" else []) + (
        ["--by-stage"] if by_stage else [])
    r = subprocess.run([sys.executable, os.path.join(ENV_DIR, "run_graphs.py"), *args],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    assert "sgl_shapeprof: cannot" not in r.stderr, r.stderr[-3000:]
    out = json.load(open(tmp_path / "out.json"))
    assert out["wrapped"] == {"full": True, "breakable": True}
    for path in out["files"].values():   # patched: SGLang's files came from the patched tree
        assert path.startswith(str(patched_tree)) == (way == "patched"), path
    return out


def load(path):
    records = [json.loads(line) for line in open(path)]
    summary = json.load(open(str(path).replace(".jsonl", "_summary.json")))
    assert summary["total_operations"] == len(records)
    return records, summary


def calls(records):
    return [(r["operation"], r["inputs"], r["outputs"]) for r in records]


def gemm(path, phase):
    """sgl-shapeprof gemm --json: {(operation, m, n, k): count}."""
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "gemm", str(path), "--phase", phase, "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    counts = collections.Counter()
    for g in json.loads(r.stdout):
        counts[(g["operation"], g["m"], g["n"], g["k"])] += g["count"]
    return dict(counts)


def first_of_each(calls_list):
    """Calls in order, each signature (operation, inputs) once: what a
    deduplicated capture writes."""
    seen, kept = set(), []
    for c in calls_list:
        sig = json.dumps(c[:2], sort_keys=True)
        if sig not in seen:
            seen.add(sig)
            kept.append(c)
    return kept


def check_graphs(path, out, dedupe):
    hidden = 8
    records, summary = load(path)
    eager = collections.defaultdict(list)   # the models run eagerly, every call written
    for r in load(out["eager"])[0]:
        eager[r["phase"]].append(r)
    assert out["decode_replays"] == {str(k): v for k, v in DECODE_REPLAYS.items()}
    assert out["prefill_replays"] == {str(k): v for k, v in PREFILL_REPLAYS.items()}
    # two warm-ups, then the capture run, per prefill graph (largest first)
    assert out["prefill_runs"] == [[n, capturing] for n in (16, 4) for capturing in (False, False, True)]

    want = {str(bs): {"captures": 1, "replays": n, "real_sizes": DECODE_REAL[bs]}
            for bs, n in DECODE_REPLAYS.items()}
    want.update({str(FAMILY + t): {"captures": 1, "replays": n, "real_sizes": PREFILL_REAL[t]}
                 for t, n in PREFILL_REPLAYS.items()})
    assert summary["graphs"] == want
    assert summary["phase_passes"] == {"decode": sum(DECODE_REPLAYS.values()),
                                       "extend": sum(PREFILL_REPLAYS.values())}

    captured = collections.defaultdict(list)
    passes = collections.defaultdict(list)
    for r in records:
        assert ("graph" in r) == (r["forward_pass"] == 0), r
        if "graph" in r:
            captured[r["graph"]].append(r)
        else:
            passes[r["forward_pass"]].append(r)
    assert sorted(captured) == sorted(int(k) for k in want)

    # decode: each capture holds exactly one run of the model at its batch
    # size, as the model run eagerly at that size (no warm-up recorded)
    for bs in DECODE_REPLAYS:
        assert {r["phase"] for r in captured[bs]} == {"decode"}
        model = calls(eager[f"eager_decode_{bs}"])
        assert calls(captured[bs]) == (first_of_each(model) if dedupe else model)
        # SGLang's custom op, which it calls without the dispatcher outside our passes
        act = {"shape": [bs, 4 * hidden], "dtype": "torch.float32"}
        assert [c for c in calls(captured[bs]) if c[0] == RELU] == [(RELU, {"xs": [act]}, act)]
    # the replaying passes ran SGLang's batch loading; the model's calls are the graph's
    decode_passes = [p for p in passes.values() if p[0]["phase"] == "decode"]
    assert decode_passes and not any(r["operation"] in ("aten.embedding.default", "aten.addmm.default")
                                     for p in decode_passes for r in p)

    # prefill: a capture holds the body without its attention break, which
    # the replaying passes run eagerly (and copy its output into place)
    for t in PREFILL_REPLAYS:
        assert {r["phase"] for r in captured[FAMILY + t]} == {"extend"}
        model = calls(eager[f"eager_extend_{t}"])
        body = [c for c in model if c[0] not in ATTENTION]
        assert calls(captured[FAMILY + t]) == (first_of_each(body) if dedupe else body)
    if not dedupe:
        extend_passes = [p for p in passes.values() if p[0]["phase"] == "extend"]
        for p, t in zip(extend_passes, (4, 16, 4)):   # raw 3, 16, 4 tokens
            attention = [c for c in calls(eager[f"eager_extend_{t}"]) if c[0] in ATTENTION]
            assert [c for c in calls(p) if c[0] != "aten.copy_.default"] == attention

    # SGLang's custom ops took the dispatcher in the captures and the passes
    # only (3 decode captures, 3 extend passes' eager breaks); everywhere else
    # (warm-ups, a prefill capture's paused breaks, outside passes) SGLang's
    # direct call, with its own gate in place
    assert out["custom_op_calls"] == {"dispatched": len(DECODE_REPLAYS) + sum(PREFILL_REPLAYS.values()),
                                      "direct": 2 * len(DECODE_REPLAYS) + 3 * len(PREFILL_REPLAYS) + 1}
    assert out["gate_is_sglangs"] is True
    if not dedupe:
        assert [r["forward_pass"] for r in records if r["operation"] == SOFTMAX] == sorted(
            p for p, rs in passes.items() if rs[0]["phase"] == "extend")

    # the analysis: a captured GEMM is called once per replay of its graph
    decode = gemm(path, "decode")
    assert decode == {(op, bs, n, k): reps for bs, reps in DECODE_REPLAYS.items()
                      for op, n, k in (("aten.addmm.default", 4 * hidden, hidden),
                                       ("aten.addmm.default", hidden, 4 * hidden),
                                       ("aten.mm.default", 32, hidden))}
    extend = gemm(path, "extend")
    assert extend == {(op, t, n, k): reps for t, reps in PREFILL_REPLAYS.items()
                      for op, n, k in (("aten.addmm.default", 3 * hidden, hidden),   # QKV: captured
                                       ("aten.mm.default", t, hidden),              # Q K^T: eager at replay
                                       ("aten.mm.default", hidden, t),              # P V: eager at replay
                                       ("aten.addmm.default", hidden, hidden))}     # O: captured
    return records, summary


@needs_sglang
def test_graphs_zero_edit_from_start_up_and_on_request(tmp_path):
    """From start-up, and armed (issue 52): the armed process keeps the
    graphs it captured at start-up, and a request taken after them holds
    the captures of the graphs its passes replayed. Both files pass the
    same checks, and count the same calls per operation and signature."""
    (tmp_path / "start").mkdir()
    out = run_graphs(tmp_path / "start", "zero-edit")
    check_graphs(tmp_path / "start" / "shapes.jsonl", out, dedupe=False)
    for by_stage in (False, True):   # /start_profile's SHAPES; SGLANG_PROFILE_V2's profile_by_stage
        folder = tmp_path / f"armed-{by_stage}"
        folder.mkdir()
        armed = run_graphs(folder, "zero-edit", mode="on_request", by_stage=by_stage)
        assert armed["profiler"] == "OnRequestProfiler"
        assert os.path.dirname(armed["request"]) == str(folder)
        check_graphs(armed["request"], armed, dedupe=False)
        assert true_counts(armed["request"]) == true_counts(tmp_path / "start" / "shapes.jsonl")


@needs_sglang
def test_graphs_patched_deduplicated(tmp_path, patched_tree):
    out = run_graphs(tmp_path, "patched", patched_tree, dedupe=1)
    records, summary = check_graphs(tmp_path / "shapes.jsonl", out, dedupe=True)
    assert summary["dedupe_enabled"] and summary["dedupe_skipped_count"] > 0


@needs_sglang
def test_graphs_patches_apply_to_the_installed_sglang(patched_tree):
    assert_patched_and_compiling(patched_tree, BACKENDS.values())

"""sgl-shapeprof replay: recorded calls run again on synthesised inputs.

The proof that it measures what the model spends: a small model's passes are
recorded with arguments, replayed on CPU with one thread, and (a) every
recorded call is replayed or listed with a reason, (b) the replayed outputs
have the recorded shapes and dtypes, (c) count x per-call time sums to the
model's own measured time for the same passes within a factor of 2.
"""
import csv
import json
import statistics
import subprocess
import sys
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.cli import main
from sgl_shapeprof.replay import build, check, distinct_calls, noise, replay, replay_call, timing
from sgl_shapeprof.records.scan import scan


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class Net(nn.Module):
    """Embedding, layer norm, MLP, conv, softmax, topk, gather, index_select,
    cat, masks: the families whose inputs need valid values among them."""

    def __init__(self, vocab=5000, d=256):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.ln = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.conv = nn.Conv1d(d, d, 3, padding=1)
        self.head = nn.Linear(d, d // 4)  # topk picks among d // 4 <= d: valid gather indices
        self.register_buffer("keep", torch.tensor([0, 3, 1]))

    def forward(self, ids):
        x = self.ln(self.emb(ids))
        x = x + self.fc2(F.gelu(self.fc1(x)))
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        top, idx = self.head(x).softmax(-1).topk(8, dim=-1)
        picked = torch.gather(x, -1, idx)
        first = torch.index_select(x, 2, self.keep)
        x = x.masked_fill(x < -2, 0.0)
        return torch.cat([picked, top, first], -1), x.sum()


def passes_of(vocab=5000):
    """A prefill of 64 tokens and two decode steps, like an LLM's passes."""
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab, (2, 64), generator=g), torch.randint(0, vocab, (2, 1), generator=g),
            torch.randint(0, vocab, (2, 1), generator=g)]


def record(path, model, passes):
    torch.manual_seed(0)
    with torch.inference_mode(), ShapeProfiler(str(path), args=True, dedupe=True) as prof:
        for x in passes:
            with prof.forward_pass():
                model(x)
    return str(path)


def replay_file(path, **kw):
    src = scan(path)
    return src, replay(distinct_calls([src]), **kw)


def model_time_us(model, passes, runs=25):
    """The model's own time for these passes: per pass the median of several
    timed forwards (after warm-up; on a GPU, synchronised), summed; no
    profiler attached."""
    sync = torch.cuda.synchronize if passes[0].is_cuda else (lambda: None)
    total = 0.0
    with torch.inference_mode():
        for x in passes:
            for _ in range(3):
                model(x)
            ts = []
            for _ in range(runs):
                sync()
                t0 = time.perf_counter_ns()
                model(x)
                sync()
                ts.append(time.perf_counter_ns() - t0)
            total += statistics.median(ts) / 1000
    return total


def assert_time_within_2x(path, results, model, passes):
    """(c) count x per-call time within a factor of 2 of the model's own time
    for the same passes. The box may be shared: a measurement disturbed by a
    neighbour is taken again (at most 3 times); a wrong count or timing is
    off every time."""
    ratios = []
    for attempt in range(3):
        if attempt:
            results = replay_file(path)[1]
        ratios.append(sum(r.total_us for r in results) / model_time_us(model, passes))
        if 0.5 < ratios[-1] < 2.0:
            return
    raise AssertionError(f"replayed time / model time: {ratios}")


def assert_faithful(src, results, all_replayed=True):
    # (a) every recorded call is accounted for: replayed, or listed with a reason
    assert sum(r.call.count for r in results) == src.calls
    assert len(results) == len(distinct_calls([src]))
    for r in results:
        assert (r.median_us is None) == (r.reason is not None), r
        if all_replayed:
            assert r.reason is None, f"{r.call.operation}: {r.reason}"
    # (b) the replayed outputs have the recorded shapes and dtypes
    bad = [(r.call.operation, r.output_mismatch) for r in results if r.output_mismatch]
    assert not bad, bad


def test_replay_measures_what_the_model_spends(tmp_path, one_thread):
    torch.manual_seed(0)
    model = Net().eval()
    passes = passes_of()
    path = record(tmp_path / "net.jsonl", model, passes)
    src, results = replay_file(path)
    assert_faithful(src, results)
    ops = {r.call.operation for r in results}
    assert {"aten.embedding.default", "aten.layer_norm.default", "aten.linear.default", "aten.gelu.default",
            "aten.conv1d.default", "aten.softmax.int", "aten.topk.default", "aten.gather.default",
            "aten.index_select.default", "aten.cat.default", "aten.masked_fill.Scalar"} <= ops
    # true counts: the two decode passes' calls are one deduplicated record each
    emb = [r for r in results if r.call.operation == "aten.embedding.default"]
    assert sorted(r.call.count for r in emb) == [1, 2]
    # sorted by total time; the prefill's matrix multiplies lead
    totals = [r.total_us for r in results]
    assert totals == sorted(totals, reverse=True)
    assert results[0].call.operation in ("aten.linear.default", "aten.conv1d.default")
    assert_time_within_2x(path, results, model, passes)


def test_a_wrong_count_would_fail_the_time_check(tmp_path, one_thread):
    """(c) can fail: the prefill pass repeated 4 times by the model, recorded once."""
    torch.manual_seed(0)
    model = Net().eval()
    prefill = passes_of()[:1]
    src, results = replay_file(record(tmp_path / "p.jsonl", model, prefill))
    ratio = sum(r.total_us for r in results) / model_time_us(model, prefill * 4)
    assert not 0.5 < ratio < 2.0, ratio


def test_index_inputs_are_valid_for_the_recorded_shapes(tmp_path, one_thread):
    """Random int64 values would read out of range (IndexError on CPU) or
    give other output shapes; each family's inputs are made in range."""
    weight = torch.randn(50000, 16)
    ids = torch.randint(0, 50000, (4, 32))
    x = torch.randn(6, 40, 8)
    mask = torch.rand(6, 40) > 0.7
    buf = torch.zeros(100, 8)
    with torch.inference_mode(), ShapeProfiler(str(tmp_path / "i.jsonl"), args=True) as prof:
        with prof.forward_pass():
            F.embedding(ids, weight)
            x[:, torch.tensor([39, 2, 7])]                     # aten.index.Tensor, int index
            x[mask]                                            # bool mask: data-dependent shape
            torch.nonzero(mask)
            torch.masked_select(x[..., 0], mask)
            torch.take(x, torch.tensor([0, 1919]))
            buf.index_add_(0, torch.tensor([99, 0, 50]), torch.ones(3, 8))   # in-place, fresh tensor
            buf.scatter_(0, torch.full((2, 8), 99), 1.0)
            F.one_hot(torch.tensor([3, 9]), 12)
            F.embedding_bag(torch.tensor([1, 49999, 7, 3]), weight, torch.tensor([0, 1, 3]))
            y = x.clone()
            y[mask] = torch.ones(int(mask.sum()), 8)           # index_put_: values need that many
            torch.searchsorted(torch.tensor([1.0, 2.0, 5.0]), torch.tensor([1.5, 4.0]))
    src, results = replay_file(str(tmp_path / "i.jsonl"))
    assert_faithful(src, results, all_replayed=False)
    by_op = {r.call.operation: r for r in results}
    assert all(r.reason is None for r in results), [(r.call.operation, r.reason) for r in results if r.reason]
    assert by_op["aten.embedding.default"].synthesised == {"indices": "randint[0,50000) (rows of weight)"}
    assert by_op["aten.index.Tensor"].synthesised  # int and mask indices both said
    notes = [n for r in results if r.call.operation == "aten.index.Tensor" for n in r.synthesised.values()]
    assert "randint[0,40) (self's dim 1)" in notes
    assert any(n.startswith(f"exactly {int(mask.sum())} nonzero") for n in notes)
    assert by_op["aten.nonzero.default"].synthesised["self"].startswith(f"exactly {int(mask.sum())} nonzero")
    assert by_op["aten.take.default"].synthesised["index"] == "randint[0,1920) (elements of self)"
    assert by_op["aten.index_add_.default"].synthesised["index"] == "randint[0,100) (self's dim 0)"
    assert by_op["aten.one_hot.default"].synthesised["self"] == "randint[0,12) (classes)"
    assert by_op["aten.embedding_bag.padding_idx"].synthesised == {
        "indices": "randint[0,50000) (rows of weight)", "offsets": "sorted offsets from 0 up to 4 (bags of indices)"}
    assert by_op["aten.index_put_.default"].synthesised == {
        "indices[0]": f"exactly {int(mask.sum())} nonzero (as many as recorded)"}
    # the values themselves, as built for one replay
    rec = next(r.call for r in results if r.call.operation == "aten.embedding.default")
    b = build(check(rec), rec)
    idx = b.args[1]
    assert idx.dtype == torch.int64 and 0 <= int(idx.min()) and 1000 < int(idx.max()) < 50000


def write_records(path, records, summary=None):
    with open(path, "w") as f:
        for i, r in enumerate(records, 1):
            f.write(json.dumps({"call_id": i, "forward_pass": 1, **r}) + "\n")
    if summary is not None:
        with open(str(path).replace(".jsonl", "_summary.json"), "w") as f:
            json.dump(summary, f)


def t(shape, dtype="torch.float32", stride=None, offset=0):
    if stride is None:
        stride, n = [], 1
        for s in reversed(shape):
            stride.insert(0, n)
            n *= s
    return {"shape": shape, "dtype": dtype, "stride": stride, "offset": offset, "device": "cpu"}


def test_unreplayable_calls_are_listed_with_the_reason(tmp_path):
    mm = {"operation": "aten.mm.default", "inputs": {"self": t([4, 8]), "mat2": t([8, 3])},
          "outputs": {"shape": [4, 3], "dtype": "torch.float32"}}
    records = [
        mm,
        {"operation": "aten.mm.default", "inputs": {"self": t([4, 8]), "mat2": t([5, 3])}, "outputs": None,
         "error": {"error_type": "RuntimeError",
                   "error_message": "mat1 and mat2 shapes cannot be multiplied"}},
        {"operation": "c10d.allreduce_.default", "inputs": {"tensors": [t([8])]}, "args": {"reduce_op": 0},
         "outputs": None},
        {"operation": "sgl_kernel.rmsnorm.default", "inputs": {"input": t([4, 8]), "weight": t([8])},
         "args": {"eps": 1e-6}, "outputs": {"shape": [4, 8], "dtype": "torch.float32"}},
        {"operation": "aten.randn.default", "inputs": {},
         "args": {"size": [4], "dtype": None, "layout": None, "device": "cpu", "pin_memory": False},
         "outputs": {"shape": [4], "dtype": "torch.float32"}},
        {"operation": "aten.dropout.default", "inputs": {"input": t([4])}, "args": {"p": 0.1, "train": True},
         "outputs": {"shape": [4], "dtype": "torch.float32"}},
        {"operation": "aten.dropout.default", "inputs": {"input": t([4])}, "args": {"p": 0.1, "train": False},
         "outputs": {"shape": [4], "dtype": "torch.float32"}},
        {"operation": "aten.add_.Tensor",
         "inputs": {"self": t([2, 4], stride=[8, 1], offset=4), "other": t([2, 4])},
         "args": {"alpha": 1}, "outputs": {"shape": [2, 4], "dtype": "torch.float32"}},
        {"operation": "aten.add_.Tensor", "inputs": {"self": t([2, 4]), "other": t([2, 4])},
         "args": {"alpha": 1}, "outputs": {"shape": [2, 4], "dtype": "torch.float32"}},
        {"operation": "aten.sum.dim_IntList", "inputs": {"self": t([5, 4], stride=[1, 6], offset=1)},
         "args": {"dim": [1], "keepdim": True, "dtype": "torch.float64"},
         "outputs": {"shape": [5, 1], "dtype": "torch.float64"}},
        {"operation": "aten.clamp.default", "inputs": {"self": t([3])}, "args": {"min": "-inf", "max": 2.5},
         "outputs": {"shape": [3], "dtype": "torch.float32"}},
        {"operation": "aten.mul.Tensor", "inputs": {"self": t([3], "torch.complex64")},
         "args": {"other": {"real": 1.5, "imag": -2.0}},
         "outputs": {"shape": [3], "dtype": "torch.complex64"}},
        {"operation": "aten.mm.default", "inputs": {"self": t([4, 8]), "mat2": t([7, 3])},
         "outputs": {"shape": [4, 3], "dtype": "torch.float32"}},   # raises now: recorded wrongly
        {"operation": "aten.cumsum.default", "inputs": {"self": t([3])},
         "args": {"dim": 0, "dtype": {"unsupported": "ScriptObject"}}, "outputs": None},
        {"operation": "aten.relu.default", "inputs": {"self": {"shape": [3], "dtype": "torch.float32"}},
         "outputs": {"shape": [3], "dtype": "torch.float32"}},       # recorded without --args
        {"operation": "aten.relu.default", "inputs": {"self": t([3])}, "args": {"inplace_v2": True},
         "outputs": {"shape": [3], "dtype": "torch.float32"}},       # another torch's schema
    ]
    path = tmp_path / "crafted.jsonl"
    write_records(path, records)
    src, results = replay_file(str(path), iterations=3, warmup=1)
    assert len(results) == len(records) and sum(r.call.count for r in results) == src.calls
    why = [r.reason or "" for r in results]

    def has(text):
        return sum(text in w for w in why)
    assert has("raised when recorded (RuntimeError: mat1 and mat2 shapes cannot be multiplied)") == 1
    assert has("collective") == 1
    assert has("operator not loaded in this process (sgl_kernel.rmsnorm") == 1
    assert has("random op") == 2                         # randn, dropout while training
    assert has("in-place on a view (self)") == 1
    assert has("replay raised RuntimeError") == 1        # the mm whose shapes do not fit
    assert has("argument dtype is a ScriptObject") == 1
    assert has("no recorded arguments (record with --args)") == 1
    assert has("this torch's aten.relu.default has no argument inplace_v2") == 1
    assert sorted(r.call.operation for r in results if r.reason is None) == [
        "aten.add_.Tensor", "aten.clamp.default", "aten.dropout.default", "aten.mm.default",
        "aten.mul.Tensor", "aten.sum.dim_IntList"]
    assert all(r.output_mismatch is None for r in results if r.reason is None)
    assert results[-1].reason is not None  # the unreplayed last


def test_import_loads_the_library_of_custom_ops(tmp_path, monkeypatch, capsys):
    (tmp_path / "replay_test_ops.py").write_text(
        "import torch\n"
        "@torch.library.custom_op('replay_test::scale', mutates_args=())\n"
        "def scale(x: torch.Tensor, factor: float) -> torch.Tensor:\n"
        "    return x * factor\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    write_records(tmp_path / "custom.jsonl", [
        {"operation": "replay_test.scale.default", "inputs": {"x": t([4, 4])}, "args": {"factor": 2.0},
         "outputs": {"shape": [4, 4], "dtype": "torch.float32"}}])
    path = str(tmp_path / "custom.jsonl")
    assert main(["replay", path, "--json", "--iterations", "3"]) == 0
    row, = json.loads(capsys.readouterr().out)
    assert row["median_us"] is None and row["reason"].startswith(
        "operator not loaded in this process (replay_test.scale: --import the module")
    assert main(["replay", path, "--json", "--iterations", "3", "--import", "replay_test_ops"]) == 0
    row, = json.loads(capsys.readouterr().out)
    assert row["median_us"] > 0 and row["outputs_match"] and "reason" not in row
    assert main(["replay", path, "--import", "no_such_module_here"]) == 2
    assert "--import no_such_module_here: ModuleNotFoundError" in capsys.readouterr().err


def test_device_mapping(tmp_path):
    """A GPU recording replays on CPU with --device cpu; without it, it says why not."""
    on_gpu = dict(t([64, 32]), device="cuda:0")
    write_records(tmp_path / "gpu.jsonl", [
        {"operation": "aten.linear.default", "inputs": {"input": on_gpu, "weight": dict(on_gpu)},
         "args": {"bias": None}, "outputs": {"shape": [64, 64], "dtype": "torch.float32"}},
        {"operation": "aten.zeros.default", "inputs": {},
         "args": {"size": [8], "dtype": "torch.float16", "layout": None, "device": "cuda:0", "pin_memory": None},
         "outputs": {"shape": [8], "dtype": "torch.float16"}}])
    src, results = replay_file(str(tmp_path / "gpu.jsonl"), target="cpu", iterations=3)
    assert_faithful(src, results)
    assert {r.device for r in results} == {"cpu"}
    if not torch.cuda.is_available():
        src, results = replay_file(str(tmp_path / "gpu.jsonl"), iterations=3)
        assert [r.reason for r in results] == [
            "recorded on cuda:0; this process has no CUDA (--device cpu replays it here)"] * 2


def test_cli_table_json_csv_and_compare(tmp_path, one_thread, capsys):
    torch.manual_seed(0)
    path = record(tmp_path / "net.jsonl", Net(vocab=300, d=32).eval(), passes_of(300))
    assert main(["replay", path, "--threads", "1", "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"replay of {path} on cpu: torch {torch.__version__}, 1 thread, 3 warm-up")
    assert "5 distinct calls standing for" in out and "total ms" in out
    assert main(["replay", path, "--json", "--iterations", "5"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all({"operation", "count", "median_us"} <= set(r) for r in rows)
    assert all(r["median_us"] > 0 and "reason" not in r and r["outputs_match"] for r in rows)
    emb = next(r for r in rows if r["operation"] == "aten.embedding.default")
    assert emb["synthesised"] == {"indices": "randint[0,300) (rows of weight)"}
    a, b = tmp_path / "before.csv", tmp_path / "after.csv"
    assert main(["replay", path, "--csv", str(a)]) == 0
    assert "total ms" in capsys.readouterr().out  # the table too
    assert main(["replay", path, "--csv", str(a)]) == 2
    assert "exists; not overwritten" in capsys.readouterr().err
    assert main(["replay", path, "--csv", "--json"]) == 2
    assert "cannot both go to stdout" in capsys.readouterr().err
    assert main(["replay", path, "--csv", str(b), "--filter-op", "linear|embedding"]) == 0
    capsys.readouterr()
    with open(a) as f:
        ra = list(csv.DictReader(f))
    assert {"operation", "inputs", "args", "count", "median_us", "p10_us", "p90_us", "total_us",
            "reason"} <= set(ra[0])
    assert sum(int(r["count"]) for r in ra) == scan(path).calls
    assert main(["replay", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    n_b = len(open(b).read().splitlines()) - 1
    assert f"{n_b} calls replayed in both" in out and "speed-up" in out
    assert f"only in A: {len(ra) - n_b}, only in B: 0" in out
    # one-line errors
    assert main(["replay", str(a)]) == 2
    assert "not a records file" in capsys.readouterr().err
    assert main(["replay", "--compare", path, str(b)]) == 2
    assert "not a replay CSV" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["replay", path, "--device", "cuda"]) == 2
        assert "--device cuda but CUDA is not available" in capsys.readouterr().err


# -- doubtful timing: the verdicts on samples and run-queue readings the tests make

def quantile(sorted_us, q):
    """The run q of the way up the sorted runs (the table's median and p90)."""
    return sorted_us[round(q * (len(sorted_us) - 1))]


@pytest.fixture
def four_cores(monkeypatch):
    """A machine of 4 cores, all of them usable: the verdicts do not depend
    on the machine the test runs on."""
    monkeypatch.setattr(noise, "cores", lambda: 4)
    monkeypatch.setattr(noise, "usable_cores", lambda: 4)


def test_spread_and_load_verdicts(four_cores, monkeypatch):
    cases = [
        [100.0] * 80 + [300.0] * 20,        # one run in five 3x: spread
        [100.0] * 95 + [5000.0] * 5,        # one in twenty preempted: p90 is the median's, no spread
        [100.0] * 85 + [199.0] * 15,        # 1.99x: below the ratio
        [2.0] * 80 + [5.0] * 20,            # 2.5x but 3 us: a tiny call's jitter, below the floor
        [15964.0] * 10,                     # every run slowed alike: no spread (the load says it)
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 30.0, 31.0],
    ]
    for samples in cases:
        s = sorted(samples)
        med, p90 = quantile(s, 0.5), quantile(s, 0.9)
        want = p90 / med >= 2.0 and p90 - med >= 10.0
        assert noise.spread(med, p90) == want, (s, med, p90)
    assert [noise.spread(quantile(sorted(c), .5), quantile(sorted(c), .9)) for c in cases] == [
        True, False, False, False, False, True]
    # busy: more threads than the cores the other runnable tasks leave free (4 - others)
    for others in range(7):
        for threads in (1, 2, 4):
            assert noise.busy(others, threads) == (threads > max(4 - others, 0)), (others, threads)
    assert not noise.busy(None, 64)          # no reading (not Linux): no verdict
    monkeypatch.setattr(noise, "usable_cores", lambda: 1)   # pinned to one core
    assert noise.busy(0, 2) and not noise.busy(0, 1)
    assert noise.doubts(100.0, 300.0, 3, 2) == ["busy", "spread"]
    assert noise.doubts(100.0, 150.0, 0, 1) == []


def test_a_call_doubts_its_own_runs(tmp_path, one_thread, four_cores, monkeypatch):
    """replay_call's verdict on the runs measure() returned (replaced by the
    test's) and the run queue read before and after them (stubbed)."""
    write_records(tmp_path / "mm.jsonl", [
        {"operation": "aten.mm.default", "inputs": {"self": t([16, 16]), "mat2": t([16, 16])}, "args": {},
         "outputs": {"shape": [16, 16], "dtype": "torch.float32"}}])
    call, = distinct_calls([scan(str(tmp_path / "mm.jsonl"))])
    runs = {"samples": None}
    real = timing.measure

    def measure(*a, **kw):
        _, out = real(*a, **kw)
        return sorted(runs["samples"]), out
    monkeypatch.setattr(timing, "measure", measure)

    def replay_with(samples, readings):
        runs["samples"] = samples
        it = iter(readings)
        monkeypatch.setattr(noise, "others_runnable", lambda: next(it))
        return replay_call(call, iterations=3, warmup=1)

    spread = [50.0] * 7 + [400.0] * 3
    r = replay_with(spread, [0, 0])
    s = sorted(spread)
    assert (r.median_us, r.p10_us, r.p90_us) == (quantile(s, .5), quantile(s, .1), quantile(s, .9)) == (
        50.0, 50.0, 400.0)
    assert r.timing_doubts == ["spread"] and r.others_runnable == 0 and r.threads == 1
    r = replay_with([50.0] * 10, [4, 5])      # 4 others at both ends, 4 cores, 1 thread: none free
    assert r.timing_doubts == ["busy"] and r.others_runnable == 4
    r = replay_with([50.0] * 10, [9, 0])      # one reading only: came and went
    assert r.timing_doubts == [] and r.others_runnable == 0
    r = replay_with([50.0] * 10, [None, 9])   # no reading: no verdict
    assert r.timing_doubts == [] and r.others_runnable is None


def test_replay_warns_when_its_timing_is_doubtful(tmp_path, one_thread, monkeypatch, capsys):
    """End to end: the run queue stubbed high, the table marks the calls and
    one line says why and what to do; stubbed low, nothing says busy."""
    write_records(tmp_path / "two.jsonl", [
        {"operation": "aten.mm.default", "inputs": {"self": t([32, 32]), "mat2": t([32, 32])}, "args": {},
         "outputs": {"shape": [32, 32], "dtype": "torch.float32"}},
        {"operation": "aten.relu.default", "inputs": {"self": t([64])}, "args": {},
         "outputs": {"shape": [64], "dtype": "torch.float32"}}])
    path = str(tmp_path / "two.jsonl")
    cores = noise.cores()
    # every core taken by others: busy whatever the threads; one thread already, so no --threads fix
    monkeypatch.setattr(noise, "others_runnable", lambda: cores)
    assert main(["replay", path, "--threads", "1", "--iterations", "5", "--json", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert out.count("DOUBTFUL TIMING: busy") == 2
    line, = [x for x in out.splitlines() if x.startswith("timing doubtful")]
    assert line.startswith("timing doubtful for 2 of 2 replayed calls (DOUBTFUL TIMING above): 2 busy (")
    assert f"{cores} at the median" in line and f"left 0 of this machine's {cores} cores free for 1 thread)" in line
    assert line.endswith("; replay on a quieter machine")
    rows = json.load(open(tmp_path / "a.json"))
    assert all("busy" in r["timing_doubts"] and r["others_runnable"] == cores and r["threads"] == 1 for r in rows)
    # one core left free, two threads: --threads 1 is the fix; the line goes to stderr with no table
    monkeypatch.setattr(noise, "others_runnable", lambda: cores - 1)
    assert main(["replay", path, "--threads", "2", "--iterations", "5", "--csv"]) == 0
    cap = capsys.readouterr()
    assert "timing doubtful for 2 of 2 replayed calls (timing_doubts in the CSV): 2 busy" in cap.err
    assert cap.err.rstrip().endswith("; replay with --threads 1, or on a quieter machine")
    rows = list(csv.DictReader(cap.out.splitlines()))
    assert [r["timing_doubts"].split("; ")[0] for r in rows] == ["busy", "busy"]
    assert {r["others_runnable"] for r in rows} == {str(cores - 1)} and {r["threads"] for r in rows} == {"2"}
    # a quiet machine: nothing is busy; a line appears only for a spread the JSON's own numbers show
    monkeypatch.setattr(noise, "others_runnable", lambda: 0)
    assert main(["replay", path, "--threads", "1", "--iterations", "20", "--json", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    rows = json.load(open(tmp_path / "b.json"))
    spread = sum(r["p90_us"] >= 2 * r["median_us"] and r["p90_us"] - r["median_us"] >= 10 for r in rows)
    assert "busy" not in out and all("busy" not in r["timing_doubts"] for r in rows)
    assert sum(r["timing_doubts"] == ["spread"] for r in rows) == spread
    assert ("timing doubtful" in out) == (spread > 0)


def test_the_run_queue_counts_other_processes(tmp_path):
    """The real reading, not stubbed: two processes spinning are two other
    runnable tasks (a spinning task is runnable whether on a core or
    waiting for one). Bounded: killed in finally."""
    if noise.others_runnable() is None:
        pytest.skip("no /proc/loadavg (not Linux)")
    spin = "import sys; sys.stdout.write('r'); sys.stdout.flush()\nwhile True: pass"
    procs = []
    try:
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE))
        for p in procs:
            assert p.stdout.read(1) == b"r"   # spinning now
        readings = []
        deadline = time.monotonic() + 5       # a CPU quota may throttle them off the run queue a while
        while time.monotonic() < deadline and not (readings and readings[-1] >= 2):
            readings.append(noise.others_runnable())
            time.sleep(0.01)
        assert readings[-1] >= 2, readings
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_demo_files_replay(tmp_path, one_thread, capsys):
    assert main(["demo", "--dir", str(tmp_path), "--decode-steps", "2", "--steps", "2"]) == 0
    capsys.readouterr()
    for name in ("llm_shapes.jsonl", "diffusion_shapes.jsonl"):
        src, results = replay_file(str(tmp_path / name), iterations=5)
        assert_faithful(src, results, all_replayed=False)
        done = [r for r in results if r.reason is None]
        assert len(done) > 0.9 * len(results)
        # what is not replayed: the KV cache's writes into its slices, the noise
        assert {r.reason.split(" (")[0].split(":")[0] for r in results if r.reason} <= {
            "in-place on a view", "random op"}


def test_transformers_model_replays(tmp_path, one_thread):
    pytest.importorskip("transformers")
    from helpers import PassPerForward, tiny_lm
    model = tiny_lm("llama")
    ids = torch.randint(1, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    prof = ShapeProfiler(str(tmp_path / "llama.jsonl"), args=True, dedupe=True)
    hooks = PassPerForward(model, prof)
    try:
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=5, do_sample=False, attention_mask=torch.ones_like(ids))
    finally:
        hooks.remove()
        prof.close()
    src, results = replay_file(prof.path, iterations=5)
    assert_faithful(src, results)
    assert any(r.call.operation == "aten.scaled_dot_product_attention.default" for r in results)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_replay(tmp_path):
    torch.manual_seed(0)
    model = Net().eval().cuda()
    passes = [x.cuda() for x in passes_of()]
    path = record(tmp_path / "cuda.jsonl", model, passes)
    src, results = replay_file(path)
    assert_faithful(src, results)
    assert {r.device for r in results} == {"cuda:0"}
    assert_time_within_2x(path, results, model, passes)
    # a CPU recording replayed on the GPU, and back
    cpu_path = record(tmp_path / "cpu.jsonl", Net().eval(), passes_of())
    src, results = replay_file(cpu_path, target="cuda")
    assert_faithful(src, results)
    assert {r.device for r in results} == {"cuda:0"}
    src, results = replay_file(path, target="cpu")
    assert_faithful(src, results)
    assert {r.device for r in results} == {"cpu"}

"""Analysis people act on: true counts, the seed script's options, diff, gemm,
cost -- on files recorded for real."""
import csv
import gzip
import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import PKG_ROOT, load

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.analysis.analyze import analyze_file
from sgl_shapeprof.cli import main


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8, bias=False)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).softmax(-1)


def workload(prof, passes=6):
    """Prefill of 12 tokens, then decode steps of 1, each a few times per
    pass: plenty of repeats, two phases."""
    torch.manual_seed(0)
    net = Net()
    with torch.inference_mode():
        for i in range(passes):
            phase = "prefill" if i == 0 else "decode"
            with prof.forward_pass(phase):
                for _ in range(3):
                    net(torch.randn(2, 12 if i == 0 else 1, 16))
                torch.mm(torch.randn(5, 16), torch.randn(16, 7))


def record(tmp_path, name, dedupe, **kw):
    prof = ShapeProfiler(str(tmp_path / name), dedupe=dedupe)
    try:
        workload(prof, **kw)
    finally:
        prof.close()
    return prof


def by_signature(a):
    """(operation, inputs) -> true calls, across phases."""
    out = {}
    for s in a.signatures:
        k = (s.operation, json.dumps(s.inputs))
        out[k] = out.get(k, 0) + s.count
    return out


def test_true_counts_dedupe_on_equal_dedupe_off_and_the_summary(tmp_path, capsys):
    on = record(tmp_path, "on.jsonl", dedupe=True)
    off = record(tmp_path, "off.jsonl", dedupe=False)
    a_on, a_off = analyze_file(on.path), analyze_file(off.path)
    assert a_on.records < a_off.records / 3           # the file really is deduplicated
    assert a_on.calls == a_off.calls == a_off.records
    assert {o: v.calls for o, v in a_on.ops.items()} == {o: v.calls for o, v in a_off.ops.items()}
    assert by_signature(a_on) == by_signature(a_off)
    summary = json.load(open(on.summary_path))
    assert {o: v.calls for o, v in a_on.ops.items()} == summary["operation_counts"]
    assert a_on.calls == summary["total_operations"] + summary["dedupe_skipped_count"]
    assert main(["analyze", on.path, "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert f"{a_on.records} records standing for {a_on.calls:,} calls (deduplicated" in out
    assert ("6 forward passes logged (records from 2 of them: the other passes' calls repeat signatures "
            "written before)") in out
    linear = a_on.ops["aten.linear.default"]
    assert f"{linear.calls:>12,}" in out and linear.calls == 6 * 3 * 2


def test_seed_options(tmp_path, capsys):
    prof = record(tmp_path, "s.jsonl", dedupe=False)
    recs = load(prof.path)
    # --quick: counts from the summary, no signatures
    assert main(["analyze", prof.path, "--quick"]) == 0
    out = capsys.readouterr().out
    assert f"{len(recs):,} calls" in out and "from " in out
    # --filter-op: a plain word is a case-insensitive substring
    assert main(["analyze", prof.path, "--filter-op", "LINEAR", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [o["operation"] for o in data["operations"]] == ["aten.linear.default"]
    # --max-entries: the first N records only
    assert main(["analyze", prof.path, "--max-entries", "10", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["records"] == 10 and data["files"][0]["truncated"]
    # --min-elements: calls whose outputs have at least N elements
    assert main(["analyze", prof.path, "--min-elements", "700", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    want = sum(1 for r in recs if r["outputs"] and isinstance(r["outputs"], dict)
               and torch.Size(r["outputs"]["shape"]).numel() >= 700)
    assert data["records"] == want > 0
    # --top, --show-shapes, --max-shapes, sections on and off
    assert main(["analyze", prof.path, "--top", "2", "--show-shapes", "--max-shapes", "1"]) == 0
    out = capsys.readouterr().out
    for title in ("Most frequent operations (top 2)", "Largest operations by output elements",
                  "Shape diversity", "Summary statistics", "most common operation:"):
        assert title in out
    assert "more (--max-shapes)" in out
    assert main(["analyze", prof.path, "--no-summary", "--no-largest", "--no-diversity"]) == 0
    out = capsys.readouterr().out
    assert "Most frequent" in out
    assert "Summary statistics" not in out and "Largest" not in out and "diversity" not in out
    # --timeline: one row per record
    tl = tmp_path / "t.csv"
    assert main(["analyze", prof.path, "--timeline", str(tl)]) == 0
    rows = list(csv.DictReader(open(tl)))
    assert list(rows[0]) == ["call_id", "operation", "op_count", "output_elements", "output_shape"]
    assert [int(r["call_id"]) for r in rows] == [r["call_id"] for r in recs]
    mm = [r for r in rows if r["operation"] == "aten.mm.default"]
    assert [int(r["op_count"]) for r in mm] == list(range(1, 7))
    assert mm[0]["output_elements"] == "35" and mm[0]["output_shape"] == "[5, 7]"
    # the timeline is ours to write once: never over someone's file
    assert main(["analyze", prof.path, "--timeline", str(tl)]) == 2
    assert "exists" in capsys.readouterr().err


def test_phase_passes_and_by_phase(tmp_path, capsys):
    prof = record(tmp_path, "p.jsonl", dedupe=False)
    assert main(["analyze", prof.path, "--phase", "prefill", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["forward_passes"] == 1
    assert {s.get("phase") for o in data["operations"] for s in o["signatures"]} == {"prefill"}
    assert main(["analyze", prof.path, "--passes", "2-3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["forward_passes"] == 2
    assert data["records"] == sum(1 for r in load(prof.path) if r["forward_pass"] in (2, 3))
    assert main(["analyze", prof.path, "--by-phase", "--filter-op", "linear"]) == 0
    out = capsys.readouterr().out
    assert "By phase" in out
    assert "prefill: 3x input=[2, 12, 16] float32" in out and "decode: 15x input=[2, 1, 16] float32" in out
    assert main(["analyze", prof.path, "--passes", "x-2"]) == 2
    assert "--passes wants" in capsys.readouterr().err


def test_filter_that_finds_nothing_says_what_is_close(tmp_path, capsys):
    prof = record(tmp_path, "f.jsonl", dedupe=False)
    assert main(["analyze", prof.path, "--filter-op", "addmm"]) == 0
    out = capsys.readouterr().out
    assert "no calls match the filters (--filter-op addmm)" in out
    assert "look close: " in out and "aten.linear.default" in out and "aten.mm.default" in out


def test_inputs_that_are_not_records_files(tmp_path, capsys):
    prof = record(tmp_path, "r.jsonl", dedupe=True)
    (tmp_path / "empty").mkdir()
    cases = {
        str(tmp_path / "empty"): "no records file (*.jsonl) in folder",
        prof.summary_path: f"is a summary file, not a records file; its records file is {prof.path}",
        os.path.join(PKG_ROOT, "README.md") if os.path.exists(os.path.join(PKG_ROOT, "README.md"))
        else __file__: "is not a records file",
        str(tmp_path / "missing.jsonl"): "no such file",
    }
    rnd = tmp_path / "random.bin"
    rnd.write_bytes(bytes(range(256)) * 40)
    cases[str(rnd)] = "binary data"
    for path, says in cases.items():
        assert main(["analyze", path]) == 2, path
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
    # compressed files are read as they are, with the summary of the plain name
    gz = tmp_path / "r.jsonl.gz"
    gz.write_bytes(gzip.compress(open(prof.path, "rb").read()))
    os.unlink(prof.path)
    a = analyze_file(str(gz))
    assert a.sources[0].deduplicated and a.calls == json.load(open(prof.summary_path))["operation_counts"][
        "aten.linear.default"] + sum(v for k, v in json.load(open(prof.summary_path))["operation_counts"].items()
                                     if k != "aten.linear.default")
    zstd = pytest.importorskip("zstandard")
    zs = tmp_path / "z.jsonl.zst"
    zs.write_bytes(zstd.ZstdCompressor().compress(gzip.decompress(gz.read_bytes())))
    assert analyze_file(str(zs)).records == a.records


def test_closed_pipe_ends_quietly(tmp_path):
    prof = record(tmp_path, "b.jsonl", dedupe=False)
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    for extra in ([], ["--json"]):
        p = subprocess.Popen([sys.executable, "-m", "sgl_shapeprof", "analyze", prof.path, "--show-shapes",
                              *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        p.stdout.readline()
        p.stdout.close()  # what `| head -1` does
        err = p.stderr.read().decode()
        assert p.wait(timeout=60) == 0 and err == "", err


def test_diff_exit_status_and_json(tmp_path, capsys):
    a = record(tmp_path, "a.jsonl", dedupe=False)
    b = record(tmp_path, "b.jsonl", dedupe=True)  # the same calls, deduplicated
    assert main(["diff", a.path, b.path]) == 0
    assert "no differences" in capsys.readouterr().out
    c = record(tmp_path, "c.jsonl", dedupe=False, passes=3)
    prof = ShapeProfiler(str(tmp_path / "d.jsonl"))
    with torch.inference_mode(), prof.forward_pass("decode"):
        torch.nn.functional.linear(torch.randn(4, 16), torch.randn(48, 16))
    prof.close()
    assert main(["diff", c.path, prof.path, "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["differs"]
    only_b = [s for s in d["only_in_b"] if s["operation"] == "aten.linear.default"]
    assert [s["inputs"]["weight"]["shape"] for s in only_b] == [[48, 16]]
    assert any(s["operation"] == "aten.mm.default" for s in d["only_in_a"])
    # counts only: --shapes-only passes, a plain diff fails
    assert main(["diff", a.path, c.path]) == 1
    out = capsys.readouterr().out
    assert "Call counts per operation that changed" in out
    assert main(["diff", a.path, c.path, "--shapes-only"]) == 0


def test_several_ranks_by_glob(tmp_path, capsys):
    for rank in (0, 1):
        prof = ShapeProfiler(str(tmp_path / f"shapes.rank{rank}.jsonl"), rank=rank)
        with torch.inference_mode(), prof.forward_pass():
            torch.mm(torch.randn(4, 8), torch.randn(8, 8 * (rank + 1)))
            if rank:
                torch.relu(torch.randn(3))
        prof.close()
    assert main(["analyze", str(tmp_path / "shapes.rank*.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "rank 0" in out and "rank 1" in out
    lines = [ln.split() for ln in out.splitlines() if ln.strip()]
    assert any(ln[-1] == "aten.mm.default" and ln[-3:-1] == ["1", "1"] for ln in lines)
    assert any(ln[-1] == "aten.relu.default" and ln[-3:-1] == ["0", "1"] for ln in lines)
    assert main(["diff", str(tmp_path / "shapes.rank0.jsonl"), str(tmp_path / "shapes.rank1.jsonl")]) == 1


def test_gemm_mnk_and_flops_agree_with_flop_counter(tmp_path, capsys):
    from torch.utils.flop_counter import FlopCounterMode
    calls = [
        lambda: torch.mm(torch.randn(6, 5), torch.randn(5, 4)),
        lambda: torch.addmm(torch.randn(4), torch.randn(6, 5), torch.randn(5, 4)),
        lambda: torch.bmm(torch.randn(3, 6, 5), torch.randn(3, 5, 4)),
        lambda: torch.baddbmm(torch.randn(3, 6, 4), torch.randn(3, 6, 5), torch.randn(3, 5, 4)),
        lambda: torch.nn.functional.linear(torch.randn(2, 3, 5), torch.randn(4, 5), torch.randn(4)),
        lambda: torch.matmul(torch.randn(2, 6, 5), torch.randn(2, 5, 4)),
    ]
    prof = ShapeProfiler(str(tmp_path / "g.jsonl"))
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), prof.forward_pass():
        for f in calls:
            f()
    prof.close()
    with torch.inference_mode(), counter:
        for f in calls:
            f()
    assert main(["gemm", prof.path, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    got = {(r["operation"].split(".")[1], r["m"], r["n"], r["k"], r["batch"]) for r in rows}
    assert got == {("mm", 6, 4, 5, 1), ("addmm", 6, 4, 5, 1), ("bmm", 6, 4, 5, 3), ("baddbmm", 6, 4, 5, 3),
                   ("linear", 6, 4, 5, 1), ("matmul", 6, 4, 5, 2)}
    assert sum(r["total_flops"] for r in rows) == counter.get_total_flops()
    assert main(["gemm", prof.path, "--csv"]) == 0
    table = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert len(table) == 6 and table[0]["flops"].isdigit()


def test_custom_gemm_op(tmp_path, capsys):
    lib = torch.library.Library("sp_gemm_test", "DEF")
    lib.define("mymm(Tensor x, Tensor w) -> Tensor")
    lib.impl("mymm", lambda x, w: x @ w.t(), "CompositeExplicitAutograd")
    prof = ShapeProfiler(str(tmp_path / "c.jsonl"))
    with torch.inference_mode(), prof.forward_pass():
        torch.ops.sp_gemm_test.mymm(torch.randn(7, 5), torch.randn(3, 5))
    prof.close()
    assert main(["gemm", prof.path, "--op", "sp_gemm_test.mymm", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    mine = [r for r in rows if r["operation"] == "sp_gemm_test.mymm.default"]
    assert [(r["m"], r["n"], r["k"], r["flops"]) for r in mine] == [(7, 3, 5, 2 * 7 * 3 * 5)]
    assert main(["gemm", prof.path, "--op", "x:a"]) == 2


def test_tunableop_export(tmp_path, capsys):
    """TunableOp's untuned lines (GemmCommon.h): cuBLAS sees C^T = B^T A^T."""
    prof = ShapeProfiler(str(tmp_path / "t.jsonl"))
    with torch.inference_mode(), prof.forward_pass():
        torch.mm(torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 256, dtype=torch.bfloat16))
        torch.nn.functional.linear(torch.randn(64, 128, dtype=torch.bfloat16),
                                   torch.randn(256, 128, dtype=torch.bfloat16),
                                   torch.randn(256, dtype=torch.bfloat16))
        torch.bmm(torch.randn(8, 64, 128, dtype=torch.half), torch.randn(8, 128, 256, dtype=torch.half))
        torch.mm(torch.ones(4, 4, dtype=torch.long), torch.ones(4, 4, dtype=torch.long))
    prof.close()
    out = tmp_path / "untuned.csv"
    assert main(["gemm", prof.path, "--tunableop", str(out)]) == 0
    err = capsys.readouterr().err
    assert sorted(out.read_text().splitlines()) == sorted([
        "GemmTunableOp_BFloat16_NN,nn_256_64_128_ld_256_128_256",
        "GemmAndBiasTunableOp_BFloat16_TN,tn_256_64_128_ld_128_128_256",
        "GemmStridedBatchedTunableOp_Half_NN,nn_256_64_128_B_8_ld_256_128_256",
    ])
    assert "not exported: aten.mm.default 4x4x4: dtypes int64" in err
    assert main(["gemm", prof.path, "--tunableop", str(out)]) == 2  # never over a file


def test_cost_flops_match_flop_counter_and_roofline_bounds(tmp_path, capsys):
    from torch.utils.flop_counter import FlopCounterMode
    x = torch.randn(1, 8, 16, 16)

    def work():
        torch.nn.functional.conv2d(x, torch.randn(16, 8, 3, 3), padding=1)
        torch.mm(torch.randn(512, 512), torch.randn(512, 512))
        torch.relu(torch.randn(1 << 16))
        torch.randn(64, 64).t()
    prof = ShapeProfiler(str(tmp_path / "c.jsonl"))
    with torch.inference_mode(), prof.forward_pass():
        work()
    prof.close()
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        work()
    assert main(["cost", prof.path, "--json", "--gpu", "H100"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["operation"]: r for r in data["rows"]}
    assert sum(r["total_flops"] for r in data["rows"]) == counter.get_total_flops()
    # attention: inference_mode records the composite; its formula is torch's
    from torch.utils.flop_counter import sdpa_flop_count
    prof = ShapeProfiler(str(tmp_path / "a.jsonl"))
    with torch.inference_mode(), prof.forward_pass():
        torch.nn.functional.scaled_dot_product_attention(*(torch.randn(1, 2, 32, 16) for _ in range(3)))
    prof.close()
    assert main(["cost", prof.path, "--json", "--filter-op", "attention"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["flops_per_call"] == sdpa_flop_count((1, 2, 32, 16), (1, 2, 32, 16), (1, 2, 32, 16)) > 0
    assert rows["aten.mm.default"]["bound"] == "compute"
    assert rows["aten.relu.default"]["bound"] == "memory"
    assert rows["aten.relu.default"]["bytes_per_call"] == 2 * (4 << 16)   # read and written
    assert rows["aten.t.default"]["bytes_per_call"] == 0      # a view moves nothing
    mm = rows["aten.mm.default"]
    assert mm["est_us_per_call"] == pytest.approx(2 * 512 ** 3 / 67e12 * 1e6)
    assert main(["cost", prof.path, "--gpu", "nonsense"]) == 2
    assert "unknown --gpu 'nonsense'" in capsys.readouterr().err
    assert main(["cost", prof.path, "--peak-tflops", "100", "--bandwidth", "1", "--by-op"]) == 0
    assert "roofline on custom" in capsys.readouterr().out


def test_json_pass_counts_say_what_they_count(tmp_path, capsys):
    """A deduplicated file whose later passes held only repeats: the text says
    "3 forward passes logged (records from 1 of them ...)", and so must the JSON."""
    prof = ShapeProfiler(str(tmp_path / "d.jsonl"), dedupe=True, skip_warmup=1)
    x = torch.randn(4, 4)
    for _ in range(4):  # pass 1 is warm-up
        with prof.forward_pass():
            torch.mm(x, x)
    prof.close()
    assert {r["forward_pass"] for r in load(prof.path)} == {2}
    assert main(["analyze", prof.path]) == 0
    assert "3 forward passes logged of 4 started (records from 1 of them: the other passes' calls repeat" \
        in capsys.readouterr().out
    assert main(["analyze", prof.path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    f = data["files"][0]
    assert (f["logged_forward_passes"], f["started_forward_passes"], f["passes_with_records"]) == (3, 4, 1)
    assert f["forward_passes"] == 3  # the passes the analysis stands for: logged ones
    assert (data["logged_forward_passes"], data["passes_with_records"], data["forward_passes"]) == (3, 1, 3)
    # a filter keeps records of some passes only: forward_passes counts those
    assert main(["analyze", prof.path, "--passes", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    f = data["files"][0]
    assert (f["logged_forward_passes"], f["passes_with_records"], f["forward_passes"]) == (3, 1, 1)
    assert data["forward_passes"] == 1
    # without a summary nothing says how many passes were logged
    os.unlink(prof.summary_path)
    assert main(["analyze", prof.path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    f = data["files"][0]
    assert (f["logged_forward_passes"], f["started_forward_passes"], f["passes_with_records"],
            f["forward_passes"]) == (None, None, 1, 1)
    assert (data["logged_forward_passes"], data["forward_passes"]) == (None, 1)


def test_diff_orders_ties_by_signature_not_by_hash(tmp_path):
    """Signatures tied on operation and count (or on the change in count)
    come out in one order, by their text: before, they kept the order of a
    set of keys holding None, whose hash is its address in CPython 3.11, so
    two runs of the same command printed different tables."""
    from sgl_shapeprof.analysis.diff import diff
    from sgl_shapeprof.records.scan import scan_all

    def write(path, shapes, calls):
        with open(path, "w") as f:
            cid = 0
            for n in shapes:
                for _ in range(calls):
                    cid += 1
                    f.write(json.dumps({"call_id": cid, "forward_pass": 1, "operation": "aten.add.Tensor",
                                        "inputs": {"self": {"shape": [n], "dtype": "torch.float32"}},
                                        "outputs": {"shape": [n], "dtype": "torch.float32"}}) + "\n")
    shapes = [7, 3, 12, 1, 9, 4, 15, 2, 11, 6, 14, 5, 8, 13, 10]
    write(tmp_path / "a.jsonl", shapes, 1)
    write(tmp_path / "b.jsonl", [100 + n for n in shapes], 1)
    write(tmp_path / "c.jsonl", shapes, 2)
    a, b, c = (scan_all([str(tmp_path / f"{x}.jsonl")]) for x in "abc")
    by_text = sorted(shapes, key=lambda n: str([n]))  # the oracle: the signatures' text
    d = diff(a, b)
    assert [s.inputs["self"]["shape"][0] for s in d.only_a] == by_text
    assert [s.inputs["self"]["shape"][0] for s in d.only_b] == sorted(
        (100 + n for n in shapes), key=lambda n: str([n]))
    changed = diff(a, c).changed  # every count 1 -> 2: tied on the change
    assert [t[0].inputs["self"]["shape"][0] for t in changed] == by_text


def test_records_past_the_summary_are_said(tmp_path):
    """A process killed between a pass's records and the summary that follows
    them (about 1 ms later; SGLang SIGKILLs its workers) leaves records past
    the summary's records_bytes: analyze says how many, and that the
    summary's counts stop before them. The oracle: the lines written after
    the summary."""
    path = str(tmp_path / "killed.jsonl")
    prof = ShapeProfiler(path)
    x = torch.ones(3)
    prof.start_forward_pass("decode")
    x.add(1)
    prof.end_forward_pass()
    prof.close()
    later = [{"call_id": 2 + i, "forward_pass": 2, "phase": "decode", "operation": "aten.mul.Tensor",
              "inputs": {"self": {"shape": [3], "dtype": "torch.float32"}},
              "outputs": {"shape": [3], "dtype": "torch.float32"}} for i in range(3)]
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in later)
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", path], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"note: {len(later)} records written after its summary" in r.stdout
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", path, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert json.loads(r.stdout)["files"][0]["records_after_summary"] == len(later)
    with open(path, "rb") as f:  # the summary's own file: nothing past it
        size = f.seek(0, 2)
    with open(path, "r+b") as f:
        f.truncate(size - sum(len(json.dumps(r)) + 1 for r in later))
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", path, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert json.loads(r.stdout)["files"][0]["records_after_summary"] == 0


def _views(path, offsets):
    """aten.view of a [2, 1, 32] slice of one row buffer at each element
    offset, recorded with arguments (strides and offsets kept)."""
    prof = ShapeProfiler(path, args=True)
    buf = torch.randn(2, 1, 128)
    with prof.forward_pass("decode"):
        for at in offsets:
            buf[..., at:at + 32].view(2, 1, 2, 16)
        buf[..., :64].view(2, 1, 4, 16)  # a shape of its own: nothing to tell apart
    prof.close()
    return str(path)


def _view_lines(text):
    return [line.strip() for line in text.splitlines() if "self=[2, 1, " in line]


def test_show_shapes_tells_apart_signatures_that_print_alike(tmp_path, capsys):
    """Two views that differ only in their input's storage offset printed as
    two identical lines (issue 56): each now names its offset, and a line
    that prints like no other names nothing."""
    path = _views(tmp_path / "v.jsonl", [64, 96])
    assert main(["analyze", path, "--filter-op", "aten.view", "--show-shapes"]) == 0
    lines = _view_lines(capsys.readouterr().out)
    assert len(lines) == 3 and len(set(lines)) == 3, lines
    alike = [line for line in lines if "[2, 1, 32]" in line]
    assert sorted(line.rsplit("(", 1)[1] for line in alike) == ["self offset=64)", "self offset=96)"], alike
    (alone,) = [line for line in lines if "[2, 1, 64]" in line]
    assert not alone.endswith(")"), alone


def test_diff_shapes_only_compares_what_it_prints(tmp_path, capsys):
    """--shapes-only: signatures that print alike compare equal; a plain
    diff still tells them apart, and says by what."""
    a = _views(tmp_path / "a.jsonl", [64])
    b = _views(tmp_path / "b.jsonl", [64, 96])
    assert main(["diff", a, b, "--shapes-only", "--filter-op", "aten.view"]) == 0
    assert "no differences in signatures" in capsys.readouterr().out
    assert main(["diff", a, b, "--filter-op", "aten.view"]) == 1
    out = capsys.readouterr().out
    (only_b,) = _view_lines(out.split("Signatures only in B", 1)[1].split("\n\n")[0])
    assert only_b.endswith("(self offset=96)"), out

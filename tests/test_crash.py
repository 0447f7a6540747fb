"""Crash safety, with real kills: every completed call is on disk, and the call
in flight leaves its inputs, which the reader recovers."""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from helpers import PKG_ROOT, run_python

from sgl_shapeprof import RecordReader
from sgl_shapeprof.analysis.analyze import analyze_file
from sgl_shapeprof.render.text.analyze import print_analysis

CHILD = r'''
import os, sys, ctypes, torch
from sgl_shapeprof import ShapeProfiler
lib = torch.library.Library("crash_test", "DEF")
lib.define("hang(Tensor x) -> Tensor")
lib.define("segv(Tensor x) -> Tensor")
lib.define("abort(Tensor x) -> Tensor")
def hang(x):
    print("inside", flush=True)
    sys.stdin.readline()       # the parent kills us here
    return x
lib.impl("hang", hang, "CPU")
lib.impl("segv", lambda x: ctypes.string_at(0), "CPU")
lib.impl("abort", lambda x: os.abort(), "CPU")
prof = ShapeProfiler(sys.argv[1])
prof.start_forward_pass()
x = torch.randn(7, 3)
for i in range(int(sys.argv[3])):
    x = torch.relu(x + 1)
print("done", flush=True)
getattr(torch.ops.crash_test, sys.argv[2])(torch.ones(2, 9, dtype=torch.bfloat16))
print("survived", flush=True)
'''


def start(tmp_path, mode, n_ops):
    path = str(tmp_path / "s.jsonl")
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, PYTHONFAULTHANDLER="")
    p = subprocess.Popen([sys.executable, "-c", CHILD, path, mode, str(n_ops)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, path


def check_file(path, n_ops, op):
    reader = RecordReader(path)
    recs = list(reader)
    complete = [r for r in recs if not r.get("incomplete")]
    n = 2 * n_ops + 2  # randn, add + relu per iteration, ones
    assert len(complete) == n
    assert [r["call_id"] for r in complete] == list(range(1, n + 1))
    assert reader.report.cut_last_line
    last = reader.report.recovered
    assert last is not None and last["incomplete"] is True
    assert last["operation"] == f"crash_test.{op}.default"
    assert last["inputs"] == {"x": {"shape": [2, 9], "dtype": "torch.bfloat16"}}
    assert last["call_id"] == n + 1
    return recs


def test_sigkill_from_outside_during_a_kernel(tmp_path):
    p, path = start(tmp_path, "hang", 500)
    assert p.stdout.readline().strip() == "done"
    assert p.stdout.readline().strip() == "inside"   # the kernel is running now
    p.kill()
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL
    check_file(path, 500, "hang")
    # SIGKILL runs no handler: the summary on disk is the one of the last
    # pass end; here no pass ended, so it is the one written at open.
    summary = json.load(open(str(tmp_path / "s_summary.json")))
    assert summary["ended_by"] == "running" and summary["total_operations"] == 0


def test_sigterm_from_outside_writes_the_summary(tmp_path):
    p, path = start(tmp_path, "hang", 20)
    assert p.stdout.readline().strip() == "done"
    assert p.stdout.readline().strip() == "inside"
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGTERM   # still dies of it, as without us
    check_file(path, 20, "hang")
    summary = json.load(open(str(tmp_path / "s_summary.json")))
    assert summary["ended_by"] == "SIGTERM" and summary["total_operations"] == 42


@pytest.mark.parametrize("mode,sig", [("segv", signal.SIGSEGV), ("abort", signal.SIGABRT)])
def test_fatal_signal_inside_an_operator(tmp_path, mode, sig):
    p, path = start(tmp_path, mode, 50)
    out, err = p.communicate(timeout=120)
    assert "survived" not in out
    assert p.returncode == -sig, err
    check_file(path, 50, mode)
    # The handler trimmed the file after the cut line and wrote the summary.
    assert b"\0" not in open(path, "rb").read()
    summary = json.load(open(str(tmp_path / "s_summary.json")))
    assert summary["ended_by"] == signal.Signals(sig).name
    assert summary["total_operations"] == 102


def test_analyze_reports_the_cut_line(tmp_path, capsys):
    p, path = start(tmp_path, "segv", 5)
    p.communicate(timeout=120)
    a = analyze_file(path)
    print_analysis(a)
    out = capsys.readouterr().out
    assert "the last line was cut" in out
    assert "INCOMPLETE" in out and "crash_test.segv.default" in out
    assert "x=[2, 9] bfloat16" in out


def test_reader_on_zero_padded_file(tmp_path):
    path = tmp_path / "z.jsonl"
    good = json.dumps({"call_id": 1, "forward_pass": 1, "operation": "aten.relu.default",
                       "inputs": {}, "outputs": None})
    cut = '{"call_id": 2, "forward_pass": 1, "operation": "aten.mm.default", "inputs": {"self": {"shape": [1], "dtype": "torch.float32"}}'
    path.write_bytes((good + "\n" + cut).encode() + b"\0" * 5000)
    reader = RecordReader(path)
    recs = list(reader)
    assert [r["call_id"] for r in recs] == [1, 2]
    assert recs[1]["incomplete"] and recs[1]["outputs"] is None
    assert reader.report.zero_padding == 5000


@pytest.mark.parametrize("ext", ["", ".gz", ".zst"])
def test_reader_reads_what_the_cli_reads(tmp_path, ext):
    """RecordReader and read_records read .jsonl.gz and .jsonl.zst as the
    commands do (they once yielded 0 records from a .gz, silently)."""
    import gzip
    recs = [{"call_id": i, "forward_pass": 1, "operation": "aten.relu.default",
             "inputs": {}, "outputs": None} for i in (1, 2, 3)]
    data = "".join(json.dumps(r) + "\n" for r in recs).encode()
    if ext == ".gz":
        data = gzip.compress(data)
    elif ext == ".zst":
        zstandard = pytest.importorskip("zstandard")
        data = zstandard.ZstdCompressor().compress(data)
    path = tmp_path / f"c.jsonl{ext}"
    path.write_bytes(data)
    reader = RecordReader(path)
    assert list(reader) == recs
    assert reader.report.records == 3 and not reader.report.bad_lines
    from sgl_shapeprof import read_records
    assert read_records(str(path)) == recs
    with open(path, "rb") as f:  # an open file of compressed bytes too
        assert list(RecordReader(f)) == recs


def test_one_summary_lookup(tmp_path):
    """read_summary takes the summary or the records file beside it, and says
    why there is none with one error type (a ValueError)."""
    from sgl_shapeprof import read_summary
    from sgl_shapeprof.records.reader import SummaryError
    (tmp_path / "s_summary.json").write_text('{"total_operations": 3}')
    for p in ("s_summary.json", "s.jsonl", "s.jsonl.gz"):
        assert read_summary(tmp_path / p) == {"total_operations": 3}
    with pytest.raises(SummaryError, match="no summary beside it"):
        read_summary(tmp_path / "t.jsonl")
    (tmp_path / "u_summary.json").write_text("[1]")
    with pytest.raises(ValueError, match="not a summary"):
        read_summary(tmp_path / "u_summary.json")
    (tmp_path / "v_summary.json").write_text("{")
    with pytest.raises(SummaryError, match="unreadable"):
        read_summary(tmp_path / "v.jsonl")


FULL_DISK = r'''
import json, resource, signal, sys, torch
from sgl_shapeprof import ShapeProfiler
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # growing the file then fails with EFBIG, like a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (3 << 20, 3 << 20))
prof = ShapeProfiler(sys.argv[1])
x = torch.ones(4, 4)
with prof.forward_pass():
    for i in range(40000):                        # ~9 MB of records: more than the limit
        x = torch.add(x, 1.0 / (i + 1))
print(float(x.sum()))                              # the model's result, unaffected
prof.close()
'''


def check_full_disk_run(r, path, reason, at_least):
    """The host ran on with its own result, one line said why profiling
    stopped, and the records written before it are whole and numbered."""
    assert r.returncode == 0, f"the host died ({r.returncode}): {r.stderr[-2000:]}"
    expected = torch.ones(4, 4)
    for i in range(40000):
        expected = torch.add(expected, 1.0 / (i + 1))
    assert float(r.stdout.strip()) == float(expected.sum())
    lines = [ln for ln in r.stderr.splitlines() if "sgl_shapeprof" in ln]
    assert len(lines) == 1 and reason in lines[0] and "profiling stopped" in lines[0], r.stderr
    reader = RecordReader(str(path))
    recs = list(reader)
    assert at_least < len(recs) < 40000 and not reader.report.bad_lines
    assert [x["call_id"] for x in recs] == list(range(1, len(recs) + 1))
    return recs


def test_full_disk_is_reported_once_and_the_model_runs_on(tmp_path):
    path = tmp_path / "full.jsonl"
    recs = check_full_disk_run(run_python(FULL_DISK, args=(path,)), path, "File too large", 5000)
    summary = json.load(open(tmp_path / "full_summary.json"))
    assert summary["profiler_failed"] is True and summary["total_operations"] == len(recs)


FULL_AT = r'''
import resource, signal, sys, torch
from sgl_shapeprof import ShapeProfiler
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # past the limit: EFBIG, like a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
prof = ShapeProfiler(sys.argv[1])
x = torch.ones(4, 4)
with prof.forward_pass():
    for i in range(40000):
        x = torch.add(x, 1.0 / (i + 1))
print(float(x.sum()))
prof.close()
'''


def test_no_room_for_summary_nor_records_is_one_line(tmp_path):
    """Full from the start (no room even for the summary written at open):
    one line says that the records stopped and that the summary could not
    be written either; the model runs on."""
    path = tmp_path / "full.jsonl"
    r = run_python(FULL_AT, args=(path, 64))
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "sgl_shapeprof" in ln]
    assert len(lines) == 1, r.stderr
    assert "cannot grow records file" in lines[0] and "profiling stopped, records kept: 0" in lines[0]
    assert f"nor could the summary file {tmp_path / 'full_summary.json'} be written: File too large" in lines[0]
    assert not (tmp_path / "full_summary.json").exists() and path.read_bytes() == b""


def test_a_nearly_full_disk_is_filled_before_recording_stops(tmp_path):
    """Room for less than one growth step (1 MiB): the records take the room
    there is (the limit is the oracle), whole lines, before recording stops."""
    path = tmp_path / "near.jsonl"
    limit = 1_000_000
    r = run_python(FULL_AT, args=(path, limit))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "sgl_shapeprof" in ln]
    assert len(lines) == 1 and "profiling stopped" in lines[0], r.stderr
    reader = RecordReader(str(path))
    recs = list(reader)
    assert not reader.report.bad_lines and [x["call_id"] for x in recs] == list(range(1, len(recs) + 1))
    assert 0.9 * limit < path.stat().st_size <= limit, path.stat().st_size
    assert json.load(open(tmp_path / "near_summary.json"))["total_operations"] == len(recs)


FULL_EXT2 = r'''
import sys, torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler(sys.argv[1])
x = torch.ones(4, 4)
with prof.forward_pass():
    for i in range(40000):                        # ~9 MB of records on a 2 MiB file system
        x = torch.add(x, 1.0 / (i + 1))
print(float(x.sum()))
prof.close()
'''


@pytest.fixture
def full_ext2(tmp_path):
    """A 2 MiB ext2 file system (no fallocate there), loop-mounted."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext2") or not os.path.exists("/dev/loop-control"):
        pytest.skip("needs root, mkfs.ext2 and loop devices")
    image, mnt = tmp_path / "ext2.img", tmp_path / "mnt"
    image.write_bytes(b"\0" * (2 << 20))
    mnt.mkdir()
    subprocess.run(["mkfs.ext2", "-q", "-F", str(image)], check=True, capture_output=True)
    r = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot loop-mount: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_full_disk_without_fallocate_is_an_error_not_a_sigbus(full_ext2):
    path = full_ext2 / "full.jsonl"
    check_full_disk_run(run_python(FULL_EXT2, args=(path,)), path, "No space left", 1000)

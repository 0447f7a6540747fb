"""The records file's cap (SHAPEPROF_MAX_MB, issue 40 point 4): recording
stops before a record would pass it, the file keeps whole records, the
summary and one log line say so; in every way in (the API, the variable,
`record`, a request); the default also stays below a quarter of a
RAM-backed filesystem's free space."""
import json
import os
import subprocess
import sys

import pytest
import torch

from helpers import PKG_ROOT
from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.recording.on_request import OnRequestProfiler

CAP_MB = 0.02  # 20,971 bytes: a few passes of the workload below


def _workload(prof, passes=40):
    x = torch.randn(8, 8)
    for i in range(passes):
        with prof.forward_pass("decode"):
            for _ in range(10):
                x = torch.mm(x, x).clamp(-1, 1) + i


def _summary(path):
    with open(str(path).replace(".jsonl", "_summary.json")) as f:
        return json.load(f)


def _lines(path):
    with open(path, "rb") as f:
        return f.read().splitlines(keepends=True)


def test_cap_stops_recording_with_whole_records_that_are_the_truth(tmp_path, capfd):
    capped, free = tmp_path / "capped.jsonl", tmp_path / "free.jsonl"
    for path, cap in ((capped, CAP_MB), (free, 0)):
        prof = ShapeProfiler(str(path), max_mb=cap)
        _workload(prof)
        prof.close()
    cap_bytes = int(CAP_MB * 2 ** 20)
    got, whole = _lines(capped), _lines(free)
    size = os.path.getsize(capped)
    assert 0 < size <= cap_bytes
    # the oracle: the same run without a cap. What was written is exactly
    # its first records, each a whole line; it stopped near the cap (the
    # core reserves a record's upper bound before writing it: a few KiB)
    assert got == whole[:len(got)] and len(got) < len(whole)
    assert all(line.endswith(b"\n") and json.loads(line) for line in got)
    assert size > cap_bytes - 4096
    s = _summary(capped)
    assert s["stopped_at_cap"] is True and s["profiler_failed"] is False
    assert s["max_records_bytes"] == cap_bytes and s["records_bytes"] == size
    assert s["total_operations"] == len(got)
    assert _summary(free)["max_records_bytes"] is None and _summary(free)["stopped_at_cap"] is False
    err = capfd.readouterr().err
    said = [ln for ln in err.splitlines() if "reached its cap" in ln]
    assert len(said) == 1 and str(capped) in said[0] and "SHAPEPROF_MAX_MB" in said[0], err
    # analyze says it plainly
    out = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(capped)],
                         capture_output=True, text=True, cwd=PKG_ROOT)
    assert out.returncode == 0, out.stderr
    assert "WARNING: recording stopped at the records file's cap" in out.stdout


def _mount_type(path):
    """The filesystem type /proc/mounts gives for the longest mount point
    above path (an oracle apart from the core's statfs)."""
    path, best, kind = os.path.realpath(path), "", None
    with open("/proc/mounts") as f:
        for line in f:
            point, fstype = line.split()[1], line.split()[2]
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
                best, kind = point, fstype
    return kind


def test_the_default_cap_and_none(tmp_path):
    prof = ShapeProfiler(str(tmp_path / "d.jsonl"))
    prof.close()
    cap = _summary(tmp_path / "d.jsonl")["max_records_bytes"]
    if _mount_type(tmp_path) in ("tmpfs", "ramfs"):
        st = os.statvfs(tmp_path)
        assert cap <= min(2 ** 30, st.f_bavail * st.f_frsize // 4 + 2 ** 20)
    else:
        assert cap == 2 ** 30
    prof = ShapeProfiler(str(tmp_path / "n.jsonl"), max_mb=0)
    prof.close()
    assert _summary(tmp_path / "n.jsonl")["max_records_bytes"] is None


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "big", True])
def test_a_bad_cap_is_refused_in_one_line(tmp_path, bad):
    with pytest.raises(ValueError, match=r"^max_mb=.* must be a size in MiB"):
        ShapeProfiler(str(tmp_path / "x.jsonl"), max_mb=bad)
    assert not os.listdir(tmp_path)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A RAM-backed filesystem of 8 MiB (root only)."""
    point = tmp_path / "ram"
    point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(point)], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)])


def test_on_a_ram_filesystem_the_default_stays_below_a_quarter_of_its_free_space(small_tmpfs):
    path = small_tmpfs / "r.jsonl"
    st = os.statvfs(small_tmpfs)
    quarter = st.f_bavail * st.f_frsize // 4
    prof = ShapeProfiler(str(path))
    x = torch.randn(4, 4)
    with prof.forward_pass():  # more than 2 MiB of records: it stops at the cap
        for _ in range(20000):
            x = x + 1
    prof.close()
    s = _summary(path)
    assert s["max_records_bytes"] == quarter
    assert s["stopped_at_cap"] is True and os.path.getsize(path) <= quarter
    # an explicit cap is the user's: taken as given
    prof = ShapeProfiler(str(small_tmpfs / "e.jsonl"), max_mb=5)
    prof.close()
    assert _summary(small_tmpfs / "e.jsonl")["max_records_bytes"] == 5 * 2 ** 20


SCRIPT = """
import torch
from sgl_shapeprof import from_env
prof = from_env()
x = torch.randn(8, 8)
for i in range(40):
    with prof.forward_pass("decode"):
        for _ in range(10):
            x = torch.mm(x, x).clamp(-1, 1) + i
prof.close()
"""


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHAPEPROF", "SGLANG_PROFILE_SHAPES"))}
    env.update(PYTHONPATH=PKG_ROOT, **kw)
    return env


@pytest.mark.parametrize("spelling", ["SHAPEPROF_MAX_MB", "SGLANG_PROFILE_SHAPES_MAX_MB"])
def test_the_variable(tmp_path, spelling):
    out = tmp_path / "v.jsonl"
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       env=_env(SHAPEPROF="1", SHAPEPROF_FILE=str(out), **{spelling: str(CAP_MB)}))
    assert r.returncode == 0, r.stderr
    s = _summary(out)
    assert s["stopped_at_cap"] and s["max_records_bytes"] == int(CAP_MB * 2 ** 20)
    assert r.stderr.count("reached its cap") == 1, r.stderr


def test_a_bad_variable_is_one_line_and_profiling_is_off(tmp_path):
    out = tmp_path / "b.jsonl"
    r = subprocess.run([sys.executable, "-c", SCRIPT.replace("prof.close()", "print(prof)")],
                       capture_output=True, text=True,
                       env=_env(SHAPEPROF="1", SHAPEPROF_FILE=str(out), SHAPEPROF_MAX_MB="lots"))
    assert r.returncode != 0 or "None" in r.stdout
    said = [ln for ln in r.stderr.splitlines() if "SHAPEPROF_MAX_MB='lots'" in ln]
    assert len(said) == 1 and "profiling is off" in said[0], r.stderr
    assert not out.exists()


def test_record_max_mb(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT.replace("from_env()", "from_env()  # record sets the variables"))
    out = tmp_path / "r.jsonl"
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "record", "-o", str(out), "--max-mb",
                        str(CAP_MB), "--", sys.executable, str(script)],
                       capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _summary(out)["stopped_at_cap"] is True
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "record", "-o", str(out), "--max-mb", "-3",
                        "--", sys.executable, str(script)], capture_output=True, text=True, env=_env())
    assert r.returncode == 2 and "--max-mb='-3' must be a size in MiB" in r.stderr


def test_on_request(tmp_path):
    prof = OnRequestProfiler(output_dir=str(tmp_path), control=False, max_mb=CAP_MB)
    path = prof.request(passes=40)
    _workload(prof)
    prof.stop()
    s = _summary(path)
    assert s["stopped_at_cap"] is True and os.path.getsize(path) <= CAP_MB * 2 ** 20

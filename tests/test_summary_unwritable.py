"""A records file that can be written beside a summary that cannot: the
records are kept, and one line says the summary could not be written.

Once per profiler, whichever write fails first (sp_open's "running"
snapshot, the flusher's, close's), on stderr:

    sgl_shapeprof: cannot write summary file <summary path>: <strerror>; recording goes on without it

Tests run as root, so a read-only folder does not stop a write. Two causes
that do: a summary name longer than NAME_MAX (255 bytes) beside a records
name that fits, and a directory where the summary goes.
"""
import errno
import os
import time

import pytest
import torch
from helpers import load, run_python

import sgl_shapeprof
from sgl_shapeprof import ShapeProfiler

NAME_MAX = 255
TAIL = "_summary.json"


def message(summary: str, err: int) -> str:
    return (f"sgl_shapeprof: cannot write summary file {summary}: {os.strerror(err)}; "
            "recording goes on without it")


def unwritable_summary(tmp_path, cause):
    """(records path, summary path, errno) with a summary that cannot be written."""
    if cause == "name too long":
        stem = "s" * (NAME_MAX - len(TAIL) + 1)  # the summary's name is 256 bytes
        path = tmp_path / f"{stem}.jsonl"
        assert len(path.name) <= NAME_MAX < len(stem + TAIL)
        err = errno.ENAMETOOLONG
    else:
        path = tmp_path / "d.jsonl"
        (tmp_path / f"d{TAIL}").mkdir()  # a directory in the summary's place
        err = errno.EISDIR
    summary = str(path)[: -len(".jsonl")] + TAIL
    return path, summary, err


def workload(prof, passes=3):
    x = torch.randn(4, 4)
    for _ in range(passes):
        with prof.forward_pass():
            torch.mm(x, x)
            x.exp()
        time.sleep(0.02)  # the flusher tries its "running" snapshot after each pass end


CAUSES = ["name too long", "directory in the way"]


@pytest.mark.parametrize("cause", CAUSES)
def test_records_are_kept_and_one_line_says_why_there_is_no_summary(tmp_path, capfd, cause):
    path, summary, err = unwritable_summary(tmp_path, cause)
    prof = ShapeProfiler(str(path))  # today: OSError "cannot write summary file ...", nothing recorded
    assert prof.summary_path == summary
    workload(prof)
    prof.close()
    recs = load(path)
    assert [(r["forward_pass"], r["operation"]) for r in recs] == [
        (p, op) for p in (1, 2, 3) for op in ("aten.mm.default", "aten.exp.default")]
    assert prof.stats()["records"] == 6
    lines = capfd.readouterr().err.splitlines()
    assert lines == [message(summary, err)], lines  # once: not again at each pass end, nor at close
    if cause == "name too long":
        assert sorted(os.listdir(tmp_path)) == [path.name]  # no summary, no temporary file left
    else:
        assert os.listdir(summary) == []  # the directory is as it was
        assert sorted(os.listdir(tmp_path)) == sorted([path.name, os.path.basename(summary)])


@pytest.mark.parametrize("cause", CAUSES)
def test_from_env_records_and_exit_says_it_once(tmp_path, cause):
    """SGLang's way in, and the summary written at exit (no close() by the
    program): the records are there, the line is said once."""
    path, summary, err = unwritable_summary(tmp_path, cause)
    code = (
        "import time, torch, sgl_shapeprof\n"
        "prof = sgl_shapeprof.from_env()\n"
        "assert prof is not None, 'profiling is off'\n"
        "x = torch.randn(4, 4)\n"
        "for _ in range(3):\n"
        "    with prof.forward_pass():\n"
        "        torch.mm(x, x)\n"
        "    time.sleep(0.02)\n")
    r = run_python(code, {"SGLANG_PROFILE_SHAPES": "1", "SGLANG_PROFILE_SHAPES_FILE": str(path),
                          "SGLANG_PROFILE_SHAPES_DEDUPE": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [message(summary, err)], r.stderr
    assert [(x["forward_pass"], x["operation"]) for x in load(path)] == [(1, "aten.mm.default")]


def test_a_summary_name_that_fits_is_written(tmp_path, capfd):
    """A summary name of 245-255 bytes is a good name, but the temporary
    file it is written through (open_tmp_beside in csrc/core/sp_summary.c:
    the summary's name + ".<pid>.<seq>.tmp") is longer than NAME_MAX, so
    today the open fails with "File name too long" for the summary."""
    stem = "s" * (NAME_MAX - len(TAIL))  # the summary's name is exactly 255 bytes
    path = tmp_path / f"{stem}.jsonl"
    prof = ShapeProfiler(str(path))
    workload(prof, passes=1)
    prof.close()
    assert capfd.readouterr().err == ""
    assert sgl_shapeprof.read_summary(prof.summary_path)["total_operations"] == 2
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, stem + TAIL])

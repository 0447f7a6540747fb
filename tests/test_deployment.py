"""Every worker of a deployment told apart: its identity in the summary,
file names that never collide (SGLang's spelling), selection along each
dimension, and the analysis over a folder of every node's files. The real
servers' state is read in tests/sglang/test_sglang_engine.py and tests/vllm/;
here workers are given."""
import json
import os
import shutil

import pytest
import torch
from helpers import load, sglang_trace_name

from sgl_shapeprof import ShapeProfiler, Worker
from sgl_shapeprof.cli import main
from sgl_shapeprof.recording import env as env_mod
from sgl_shapeprof.recording.config import ConfigError, read_env, records_path_for

PP2 = dict(tp_size=1, pp_size=2)


@pytest.mark.parametrize("sizes", [(1, 1, 1), (1, 2, 1), (2, 1, 1), (2, 2, 2), (1, 1, 4)])
def test_names_follow_sglang(sizes):
    dp_size, pp_size, ep_size = sizes
    for dp in range(dp_size):
        for pp in range(pp_size):
            for ep in range(ep_size):
                w = Worker(tp_rank=1, tp_size=2, dp_rank=dp, dp_size=dp_size, pp_rank=pp, pp_size=pp_size,
                           ep_rank=ep, ep_size=ep_size)
                assert w.name == sglang_trace_name(1, dp, pp, ep, dp_size, pp_size, ep_size)


def test_file_names_never_collide_and_placeholders():
    workers = [Worker(tp_rank=t, tp_size=2, pp_rank=p, pp_size=2, dp_rank=d, dp_size=2)
               for t in range(2) for p in range(2) for d in range(2)]
    names = {records_path_for("out/shapes.jsonl", w, several=True) for w in workers}
    assert len(names) == 8 and os.path.join("out", "shapes.TP-1-DP-0-PP-1.jsonl") in names
    # one TP rank profiled, but two stages: still two names
    assert records_path_for("s.jsonl", Worker(pp_rank=1, **PP2), several=False) == "s.TP-0-PP-1.jsonl"
    # TP alone: as before
    assert records_path_for("s.jsonl", Worker(tp_rank=3, tp_size=4), several=True) == "s.rank3.jsonl"
    assert records_path_for("s.jsonl", Worker(tp_rank=3, tp_size=4), several=False) == "s.jsonl"
    w = Worker(tp_rank=1, tp_size=2, pp_rank=1, pp_size=2, host="n1")
    assert records_path_for("d/{host}/{worker}-{tp}-{pp}-{dp}-{ep}-{rank}.jsonl", w, several=True) == \
        "d/n1/TP-1-PP-1-1-1-0-0-1.jsonl"


@pytest.mark.parametrize("setting,chosen", [
    ({}, {(0, 0), (0, 1)}),                                                   # RANK=0 of every stage
    ({"SGLANG_PROFILE_SHAPES_WORKERS": "pp=1"}, {(0, 1)}),
    ({"SGLANG_PROFILE_SHAPES_WORKERS": "tp=*,pp=0"}, {(0, 0), (1, 0)}),
    ({"SGLANG_PROFILE_SHAPES_RANK": "all"}, {(0, 0), (0, 1), (1, 0), (1, 1)}),
    ({"SHAPEPROF_WORKERS": "tp=1-1"}, {(1, 0), (1, 1)}),
])
def test_selection(setting, chosen):
    cfg = read_env(dict({"SGLANG_PROFILE_SHAPES": "1"}, **setting))
    got = {(t, p) for t in range(2) for p in range(2)
           if cfg.profiles(Worker(tp_rank=t, tp_size=2, pp_rank=p, pp_size=2))}
    assert got == chosen


@pytest.mark.parametrize("setting,says", [
    ({"SGLANG_PROFILE_SHAPES_WORKERS": "pp"}, "'pp' must be DIM=RANKS"),
    ({"SGLANG_PROFILE_SHAPES_WORKERS": "xx=1"}, "'xx=1' must be DIM=RANKS"),
    ({"SGLANG_PROFILE_SHAPES_WORKERS": "pp=3-1"}, "pp='3-1' must be *, a rank or a range A-B"),
    ({"SGLANG_PROFILE_SHAPES_WORKERS": "tp=0", "SGLANG_PROFILE_SHAPES_RANK": "1"}, "both choose TP ranks"),
])
def test_bad_selection_says_what(setting, says):
    with pytest.raises(ConfigError) as e:
        read_env(dict({"SGLANG_PROFILE_SHAPES": "1"}, **setting))
    assert says in str(e.value) and "\n" not in str(e.value)


def run_stage(tmp_path, worker, monkeypatch, **env):
    """One worker of a deployment, made the way the integrations make it."""
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(tmp_path / "shapes.jsonl"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(env_mod, "_env_profiler", None)
    prof = env_mod.from_env(worker=worker)
    if prof is None:
        return None
    x = torch.ones(2, 4 + worker.pp_rank)
    with prof.forward_pass("decode"):
        torch.relu(x)
    prof.close()
    return prof


def test_summary_states_the_worker(tmp_path, monkeypatch):
    w = Worker(tp_rank=0, pp_rank=1, pp_size=2, dp_rank=1, dp_size=2, host="node1", source="test")
    prof = run_stage(tmp_path, w, monkeypatch)
    assert os.path.basename(prof.path) == "shapes.TP-0-DP-1-PP-1.jsonl"
    s = json.load(open(prof.summary_path))
    assert s["worker"] == {"tp_rank": 0, "tp_size": 1, "pp_rank": 1, "pp_size": 2, "dp_rank": 1, "dp_size": 2,
                           "ep_rank": 0, "ep_size": 1, "host": "node1", "pid": os.getpid(), "source": "test"}
    assert Worker.from_json(s["worker"]) == w
    assert list(s)[:2] == ["rank", "worker"]
    with pytest.raises(TypeError):
        ShapeProfiler(tmp_path / "x.jsonl", worker={"tp_rank": 0})


def test_two_nodes_gathered_and_analyzed(tmp_path, monkeypatch, capsys):
    """PP=2 over two 'nodes', each writing its own folder; gathered into one
    (nothing overwritten), analyzed together: labelled by worker, in stage
    order; a missing stage and a doubled claim are said."""
    for pp in (1, 0):
        (tmp_path / f"node{pp}").mkdir()
        run_stage(tmp_path / f"node{pp}", Worker(pp_rank=pp, host=f"node{pp}", **PP2), monkeypatch)
    gathered = tmp_path / "gathered"
    for pp in (0, 1):
        shutil.copytree(tmp_path / f"node{pp}", gathered / f"node{pp}")
    files = sorted(p.name for p in gathered.rglob("*.jsonl"))
    assert files == ["shapes.TP-0-PP-0.jsonl", "shapes.TP-0-PP-1.jsonl"]
    assert main(["analyze", str(gathered)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "TP 0/1, PP 0/2 on node0" in lines[0] and "TP 0/1, PP 1/2 on node1" in lines[1]
    assert "deployment PP=2: 2 worker files (TP-0-PP-0, TP-0-PP-1)" in out and "no file" not in out
    assert main(["analyze", str(gathered), "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert [f["label"] for f in a["files"]] == ["TP-0-PP-0", "TP-0-PP-1"]
    assert [f["worker"]["pp_rank"] for f in a["files"]] == [0, 1]
    assert a["inventory"] == ["deployment PP=2: 2 worker files (TP-0-PP-0, TP-0-PP-1)"]
    # stage 1 alone: stage 0 has no file, said in each command's header
    # (on stderr beside machine-readable output)
    for cmd in ("gemm", "cost", "tune"):
        extra = ["--device", "NVIDIA_H100_80GB_HBM3", "--configs", str(tmp_path)] if cmd == "tune" else []
        assert main([cmd, str(gathered / "node1")] + extra) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[:2] == ["deployment PP=2: 1 worker file (TP-0-PP-1)", "PP stage 0 of 2: no file"], (cmd, out)
    assert main(["gemm", str(gathered / "node1"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert isinstance(json.loads(out), list) and "sgl-shapeprof gemm: PP stage 0 of 2: no file" in err
    for cmd in ("cost", "tune"):
        extra = ["--device", "NVIDIA_H100_80GB_HBM3", "--configs", str(tmp_path)] if cmd == "tune" else []
        assert main([cmd, str(gathered / "node1"), "--json"] + extra) == 0
        assert json.loads(capsys.readouterr().out)["inventory"][1] == "PP stage 0 of 2: no file"
    # diff: each side's files by worker
    assert main(["diff", str(gathered / "node0"), str(gathered / "node1")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "A: PP stage 1 of 2: no file" in lines and "B: PP stage 0 of 2: no file" in lines, lines
    a, b = (next(ln for ln in lines if ln.startswith(side) and ".jsonl" in ln) for side in ("A: ", "B: "))
    assert "shapes.TP-0-PP-0.jsonl (TP-0-PP-0)" in a and "shapes.TP-0-PP-1.jsonl (TP-0-PP-1)" in b, lines
    # report: the inventory and each file's worker in its header
    pytest.importorskip("plotly")
    html = tmp_path / "r.html"
    assert main(["report", str(gathered / "node1"), "-o", str(html)]) == 0
    capsys.readouterr()
    page = html.read_text()
    assert "PP stage 0 of 2: no file" in page and "worker TP 0/1, PP 1/2 on node1" in page
    # two files that claim the same worker
    shutil.copy(gathered / "node1" / "shapes.TP-0-PP-1.jsonl", gathered / "node0" / "shapes.TP-0-PP-1.jsonl")
    shutil.copy(gathered / "node1" / "shapes.TP-0-PP-1_summary.json",
                gathered / "node0" / "shapes.TP-0-PP-1_summary.json")
    assert main(["analyze", str(gathered)]) == 0
    out = capsys.readouterr().out
    assert "WARNING: 2 files claim to be TP-0-PP-1" in out
    recs = load(gathered / "node0" / "shapes.TP-0-PP-0.jsonl")
    assert recs[0]["inputs"]["self"]["shape"] == [2, 4]


def test_a_disaggregated_deployments_prefill_and_decode_workers_are_told_apart(tmp_path, monkeypatch, capsys):
    # srtctl profiles one prefill and one decode worker: both TP rank 0, on
    # a shared folder. Their files must not collide, their summaries say
    # the role, and analyze inventories the two deployments apart (no
    # "two files claim the same worker").
    made = {}
    for role in ("decode", "prefill"):
        w = Worker(tp_rank=0, tp_size=2, role=role, host=f"{role}-node", source="test")
        prof = run_stage(tmp_path, w, monkeypatch)
        made[role] = prof
        s = json.load(open(prof.summary_path))
        assert s["worker"]["role"] == role and Worker.from_json(s["worker"]) == w
    assert {os.path.basename(p.path) for p in made.values()} == {"shapes.prefill-TP-0.jsonl",
                                                                 "shapes.decode-TP-0.jsonl"}
    unknown = Worker.from_json({"tp_rank": 1, "tp_size": 2, "role": "encode"})  # a role this reader does not know
    assert unknown is not None and unknown.role is None and (unknown.tp_rank, unknown.tp_size) == (1, 2)
    assert main(["analyze", str(tmp_path), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "prefill deployment TP=2: 1 worker file (prefill-TP-0)" in out
    assert "decode deployment TP=2: 1 worker file (decode-TP-0)" in out
    assert "claim" not in out
    assert out.index("shapes.prefill-TP-0.jsonl") < out.index("shapes.decode-TP-0.jsonl")  # prefill first
    assert "prefill worker, TP 0/2 on prefill-node" in out

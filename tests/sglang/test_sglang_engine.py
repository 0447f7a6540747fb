"""SGLang 0.5.23's real engine, end to end, on CPU with tiny random models
(tests/sglang_env: `make test-sglang` sets up torch 2.14.1, SGLang and a
placeholder sgl_kernel). Both ways in (the zero-edit start-up hook, and
SGLang's own files patched with patches/), LLM at TP=1 and TP=2 over gloo,
and the diffusion runtime with deduplication. SGLang ends every run by
SIGKILLing its workers: the files must still be exact and agree."""
import glob
import json
import os
import subprocess
import sys

import pytest
from helpers import PKG_ROOT, ROOT, needs_sglang, read_run, sglang_trace_name
from sglang_engine_helpers import (ENV_DIR, OVERLAY, PROBE, SGLANG_VERSION, STUBS, WORKERS, assert_patched_and_compiling,
                                   outputs_last_dim, workers_said_by_sglang, zero_edit_hook_installed)

pytestmark = needs_sglang(SGLANG_VERSION)


def run(script, args, tmp_path, way, patched_tree=None, parallel_dir=None, **profile_env):
    """Runs one of tests/sglang_env's drivers with SGLANG_PROFILE_SHAPES=1;
    parallel_dir: each worker writes there what SGLang's get_parallel() says."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_PROFILE_SHAPES")}
    paths = [STUBS, PKG_ROOT]
    if parallel_dir is not None:
        paths.append(PROBE)
        env["SGLENV_PARALLEL"] = str(parallel_dir)
    if way == "patched":
        paths.insert(0, OVERLAY)
        env["SHAPEPROF_PATCHED_TREE"] = str(patched_tree)
    elif not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update({"SGLANG_PROFILE_SHAPES": "1", "SGLANG_PROFILE_SHAPES_FILE": str(tmp_path / "shapes.jsonl")})
    env.update({f"SGLANG_PROFILE_SHAPES_{k.upper()}": str(v) for k, v in profile_env.items()})
    r = subprocess.run([sys.executable, os.path.join(ENV_DIR, script), *map(str, args)],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return r


def qkv_rows(records, out_features, hidden=64):
    """Per pass: the row counts of the QKV projection's input (one per layer):
    aten.mm(x, W.t()) as SGLang runs it on CPU, or aten.linear(x, W)."""
    rows = {}
    for r in records:
        ins = r["inputs"]
        if r["operation"] == "aten.mm.default":
            x, w, want = ins.get("self"), ins.get("mat2"), [hidden, out_features]
        elif r["operation"] == "aten.linear.default":
            x, w, want = ins.get("input"), ins.get("weight"), [out_features, hidden]
        else:
            continue
        if w and x and w["shape"] == want and x["shape"][-1] == hidden:
            rows.setdefault((r["forward_pass"], r["phase"]), []).append(x["shape"][0])
    return rows


def run_command_setup(**extra_env):
    """For `sgl-shapeprof run` on SGLang's CPU engine: the environment (the
    start-up hook's, not this process's profiling settings) and the
    --engine-arg pairs, as a list of arguments. Skips without the hook."""
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    env.update({"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "SGLANG_NCCL_SO_PATH": "/nonexistent/libnccl.so.2", "PYTHONPATH": os.pathsep.join([STUBS, PKG_ROOT]),
                **extra_env})
    engine = {"device": "cpu", "attention_backend": "torch_native", "sampling_backend": "pytorch",
              "disable_cuda_graph": "true", "dtype": "bfloat16", "mem_fraction_static": "0.05",
              "max_total_tokens": "2048", "context_length": "256", "skip_server_warmup": "true",
              "random_seed": "0"}
    return env, [x for k, v in engine.items() for x in ("--engine-arg", f"{k}={v}")]


@pytest.mark.parametrize("way", ["zero-edit", "patched"])
def test_llm_tp1_extend_and_decode(models, patched_tree, tmp_path, way):
    run("run_llm.py", [models / "tiny-llama", "--json", tmp_path / "out.json"], tmp_path, way, patched_tree)
    out = json.load(open(tmp_path / "out.json"))
    records, summary = read_run(tmp_path / "shapes.jsonl")
    assert summary["rank"] == 0 and summary["dedupe_enabled"] is False
    assert {"extend", "decode"} <= set(summary["phase_passes"])
    rows = qkv_rows(records, out_features=64 + 2 * 32)   # 4 heads x 16 + 2 x (2 kv heads x 16)
    extend = {k: v for k, v in rows.items() if k[1] == "extend"}
    decode = {k: v for k, v in rows.items() if k[1] == "decode"}
    assert extend and decode, sorted(rows)
    for per_layer in rows.values():
        assert len(per_layer) == 2 and len(set(per_layer)) == 1   # 2 layers, same rows
    # extend: the prompts' tokens; decode: one row per running request
    assert sum(v[0] for v in extend.values()) == sum(o["prompt_tokens"] for o in out)
    assert {v[0] for v in decode.values()} <= {1, len(out)} and max(v[0] for v in decode.values()) == len(out)
    decode_steps = sum(o["completion_tokens"] for o in out) - len(out)   # the first token comes from extend
    assert sum(v[0] for v in decode.values()) == decode_steps


def test_llm_tp2_one_rank_logs_its_all_reduce(models, tmp_path):
    run("run_llm.py", [models / "tiny-llama", "--tp", "2", "--json", tmp_path / "out.json"], tmp_path,
        "zero-edit", rank=1)
    assert sorted(os.listdir(tmp_path)) == ["out.json", "shapes.jsonl", "shapes_summary.json"]
    records, summary = read_run(tmp_path / "shapes.jsonl")
    assert summary["rank"] == 1
    assert any("all_reduce" in op or "allreduce" in op for op in summary["operation_counts"]), \
        sorted(summary["operation_counts"])
    # this rank's half of the heads: QKV is 64 -> 64 here, and so is the MLP's
    # down projection (128 / 2 -> 64): 2 layers x 2 GEMMs of the same rows
    rows = qkv_rows(records, out_features=(64 + 2 * 32) // 2)
    assert rows and all(len(v) == 4 and len(set(v)) == 1 for v in rows.values()), rows
    out = json.load(open(tmp_path / "out.json"))
    assert sum(v[0] for k, v in rows.items() if k[1] == "extend") == sum(o["prompt_tokens"] for o in out)
    assert {v[0] for k, v in rows.items() if k[1] == "decode"} <= {1, len(out)}


def test_llm_tp2_all_ranks_decode_only(models, tmp_path):
    run("run_llm.py", [models / "tiny-llama", "--tp", "2"], tmp_path, "zero-edit", rank="all",
        phases="decode")
    files = sorted(glob.glob(str(tmp_path / "shapes.rank*.jsonl")))
    assert [os.path.basename(f) for f in files] == ["shapes.rank0.jsonl", "shapes.rank1.jsonl"]
    for rank, f in enumerate(files):
        records, summary = read_run(f)
        assert summary["rank"] == rank
        assert records and {r["phase"] for r in records} == {"decode"}
        assert set(summary["phase_passes"]) == {"decode"}


@pytest.mark.parametrize("dim", ["pp", "dp"])
def test_llm_pp2_dp2_each_worker_says_which_it_is(models, tmp_path, dim):
    """PP=2 and DP=2 on SGLang's CPU engine: one file per worker, named as
    SGLang names its own traces, each summary stating the worker that SGLang's
    get_parallel() says the process is (the oracle, read by test code in each
    worker). Each pipeline stage holds its own layers: the embedding only on
    the first, the logits projection (to the vocabulary, 1024) only on the
    last; each replica holds both."""
    par = tmp_path / "par"
    par.mkdir()
    run("run_llm.py", [models / "tiny-llama", f"--{dim}", "2"], tmp_path, "zero-edit", parallel_dir=par)
    said = workers_said_by_sglang(par)
    assert len(said) == 2
    files = sorted(glob.glob(str(tmp_path / "shapes.*.jsonl")))
    want = sorted(f"shapes.{sglang_trace_name(s['tp_rank'], s['dp_rank'], s['pp_rank'], s['moe_ep_rank'], s['num_dp_ranks'], s['pp_size'], s['moe_ep_size'])}.jsonl"
                  for s in said.values())
    assert [os.path.basename(f) for f in files] == want == (
        ["shapes.TP-0-PP-0.jsonl", "shapes.TP-0-PP-1.jsonl"] if dim == "pp" else
        ["shapes.TP-0-DP-0.jsonl", "shapes.TP-0-DP-1.jsonl"])
    for f in files:
        records, summary = read_run(f)
        w = summary["worker"]
        s = said[w["pid"]]
        assert (w["tp_rank"], w["tp_size"], w["pp_rank"], w["pp_size"], w["dp_size"], w["ep_rank"], w["ep_size"]) == \
            (s["tp_rank"], s["tp_size"], s["pp_rank"], s["pp_size"], s["num_dp_ranks"], s["moe_ep_rank"],
             s["moe_ep_size"])
        # without DP SGLang's dp_rank is None; the summary says 0 of 1
        assert w["dp_rank"] == (s["dp_rank"] if s["num_dp_ranks"] > 1 else 0)
        assert w["source"] == "sglang get_parallel()"
        embeds = [r for r in records if r["operation"] == "aten.embedding.default"]
        logits = outputs_last_dim(records, 1024)
        first, last = w["pp_rank"] == 0, w["pp_rank"] == w["pp_size"] - 1
        assert bool(embeds) == first and bool(logits) == last, (f, len(embeds), len(logits))
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(tmp_path), "--top", "1"],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    names = [os.path.basename(f)[len("shapes."):-len(".jsonl")] for f in files]
    assert f"deployment {dim.upper()}=2: 2 worker files ({', '.join(names)})" in r.stdout
    assert "no file" not in r.stdout and "claim" not in r.stdout


def test_llm_tp2_ep2_moe_workers_and_a_failing_expert_call(models, tmp_path):
    """Expert parallel 2 (TP=2) with a tiny Qwen2-MoE: each file named as
    SGLang names its traces (TP-0-EP-0, TP-1-EP-1), each summary's EP rank
    SGLang's get_parallel().moe_ep_rank in that process. SGLang 0.5.23's CPU
    engine fails this layout by itself (its CPU top-k scatters the -1 that
    EP gives experts held elsewhere: 'index -1 is out of bounds'); the
    failing call is recorded with its inputs on the rank that raised it."""
    par = tmp_path / "par"
    par.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_PROFILE_SHAPES")}
    env.update({"PYTHONPATH": os.pathsep.join([STUBS, PKG_ROOT, PROBE]), "SGLENV_PARALLEL": str(par),
                "SGLANG_PROFILE_SHAPES": "1", "SGLANG_PROFILE_SHAPES_RANK": "all",
                "SGLANG_PROFILE_SHAPES_FILE": str(tmp_path / "shapes.jsonl")})
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    r = subprocess.run([sys.executable, os.path.join(ENV_DIR, "run_llm.py"), str(models / "tiny-qwen2moe"),
                        "--tp", "2", "--ep", "2"], capture_output=True, text=True, env=env, cwd=str(tmp_path),
                       timeout=900)
    failed = r.returncode != 0
    assert not failed or "index -1 is out of bounds" in r.stdout + r.stderr, (r.stdout + r.stderr)[-5000:]
    said = workers_said_by_sglang(par)
    names = sorted(os.path.basename(f) for f in glob.glob(str(tmp_path / "shapes.*.jsonl")))
    assert names == ["shapes.TP-0-EP-0.jsonl", "shapes.TP-1-EP-1.jsonl"] == sorted(
        f"shapes.{sglang_trace_name(s['tp_rank'], s['dp_rank'], s['pp_rank'], s['moe_ep_rank'], s['num_dp_ranks'], s['pp_size'], s['moe_ep_size'])}.jsonl"
        for s in said.values())
    errors = []
    for name in names:
        # a worker that raised exits through its atexit close, or is killed first
        ended = json.load(open(tmp_path / name.replace(".jsonl", "_summary.json")))["ended_by"]
        assert ended in ("close", "running")
        records, summary = read_run(tmp_path / name, ended_by=ended)
        w = summary["worker"]
        assert (w["ep_rank"], w["ep_size"], w["tp_rank"]) == (said[w["pid"]]["moe_ep_rank"], 2,
                                                             said[w["pid"]]["tp_rank"])
        errors += [x for x in records if "error" in x]
    if failed:
        assert any(e["operation"] == "aten.scatter_.value" and "index -1 is out of bounds" in
                   e["error"]["error_message"] for e in errors), errors


def free_ports(n, apart=100):
    """n free ports at least `apart` from each other (SGLang takes several
    ports upwards of the one it is given)."""
    import socket
    out = []
    for _ in range(500):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + apart < 65000 and all(abs(port - p) >= apart for p in out):
            out.append(port)
            if len(out) == n:
                return out
    raise RuntimeError("no free ports")


def test_two_nodes_pp2_on_loopback_gathered_and_analyzed(models, tmp_path):
    """A real two-node launch (--nnodes 2, each node its own process on
    loopback, each writing its own folder, as on two machines): each stage
    names itself after SGLang's get_parallel() in its process; the folders
    gathered into one lose nothing; analyze labels both and misses none.
    Node 1's workers stop when node 0 shuts the deployment down (a
    ShutdownReq, or their connection reset), or are killed here after two
    minutes: SGLang leaves that to the launcher ("the orchestrator's kill
    timeout is the backstop"); its exit status is not checked, and its
    summary is the one of a close or of the last snapshot."""
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    par = tmp_path / "par"
    par.mkdir()
    init, *ports = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    env.update({"PYTHONPATH": os.pathsep.join([STUBS, PKG_ROOT, PROBE]), "SGLENV_PARALLEL": str(par),
                "SGLANG_PROFILE_SHAPES": "1"})
    procs = []
    for node in (0, 1):
        folder = tmp_path / f"node{node}"
        folder.mkdir()
        node_env = dict(env, SGLANG_PROFILE_SHAPES_FILE=str(folder / "shapes.jsonl"),
                        SGLANG_CPU_OMP_THREADS_BIND=str(node % (os.cpu_count() or 1)))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(ENV_DIR, "run_llm.py"), str(models / "tiny-llama"), "--pp", "2",
             "--nnodes", "2", "--node-rank", str(node), "--dist-init-addr", f"127.0.0.1:{init}",
             "--port", str(ports[node])], env=node_env, cwd=str(folder),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True))
    try:
        out0, _ = procs[0].communicate(timeout=600)
        assert procs[0].returncode == 0, out0[-5000:]
        try:
            procs[1].communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pass  # killed below, as a launcher would
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    said = workers_said_by_sglang(par)
    assert sorted(s["pp_rank"] for s in said.values()) == [0, 1]
    gathered = tmp_path / "gathered"
    for node in (0, 1):
        files = sorted(os.listdir(tmp_path / f"node{node}"))
        assert files == [f"shapes.TP-0-PP-{node}.jsonl", f"shapes.TP-0-PP-{node}_summary.json"], files
        ended = json.load(open(tmp_path / f"node{node}" / files[1]))["ended_by"]
        assert ended == "running" or node == 1 and ended == "close", ended
        records, summary = read_run(tmp_path / f"node{node}" / files[0], ended_by=ended)
        assert summary["worker"]["pp_rank"] == said[summary["worker"]["pid"]]["pp_rank"] == node
        assert records
        (gathered / f"node{node}").mkdir(parents=True)
        for f in files:  # "x": gathering never overwrites
            with open(tmp_path / f"node{node}" / f, "rb") as src, open(gathered / f"node{node}" / f, "xb") as dst:
                dst.write(src.read())
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(gathered), "--top", "3"],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "TP 0/1, PP 0/2" in lines[0] and "TP 0/1, PP 1/2" in lines[1], r.stdout[:1000]
    assert lines[2] == "deployment PP=2: 2 worker files (TP-0-PP-0, TP-0-PP-1)"
    assert "no file" not in r.stdout and "claim" not in r.stdout
    print(r.stdout[:600])


def test_run_command_tp2_pp2_sets_what_the_cpu_engine_needs(models, tmp_path):
    """sgl-shapeprof run --tp 2 --pp 2 on SGLang's CPU engine with none of
    its per-worker settings given: run sets the OpenMP core groups and a KV
    budget per worker and says so, all four workers record (each call
    timed: --time), and the analysis covers the deployment."""
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF", "SGLANG_CPU_OMP_THREADS_BIND"))}
    env.update({"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "SGLANG_NCCL_SO_PATH": "/nonexistent/libnccl.so.2",
                "PYTHONPATH": os.pathsep.join([STUBS, PKG_ROOT])})
    engine = {"device": "cpu", "attention_backend": "torch_native", "sampling_backend": "pytorch",
              "disable_cuda_graph": "true", "dtype": "bfloat16", "context_length": "256",
              "skip_server_warmup": "true", "random_seed": "0", "mem_fraction_static": "0.05"}
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "sglang", "--model-path",
                        str(models / "tiny-llama"), "--tp", "2", "--pp", "2", "--prompts", "2", "--max-tokens", "3",
                        "--time", "-o", "run", *[x for k, v in engine.items() for x in ("--engine-arg", f"{k}={v}")]],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "SGLANG_CPU_OMP_THREADS_BIND=" in r.stderr and "max_total_tokens=4096 per worker" in r.stderr
    names = sorted(os.path.basename(f) for f in glob.glob(str(tmp_path / "run" / "shapes*.jsonl")))
    assert names == [f"shapes.TP-{t}-PP-{p}.jsonl" for t in (0, 1) for p in (0, 1)]
    for name in names:   # --time: every worker's calls timed
        records, _ = read_run(tmp_path / "run" / name)
        assert records and all(rec["time_us"] >= 0 for rec in records), name
    assert "deployment TP=2, PP=2: 4 worker files (TP-0-PP-0, TP-1-PP-0, TP-0-PP-1, TP-1-PP-1)" in r.stdout


def test_run_command_tp2(models, tmp_path):
    """sgl-shapeprof run --server sglang at TP=2: the real engine with
    profiling on every rank (the start-up hook), the prompts, the analysis
    of each rank's file; the model folder given relative to the caller's."""
    env, engine = run_command_setup(SGLANG_CPU_OMP_THREADS_BIND="0|1")
    model = os.path.relpath(models / "tiny-llama", tmp_path)
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "sglang", "--model-path", model,
                        "--tp", "2", "--prompts", "3", "--max-tokens", "6", "-o", "run",
                        *engine],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    out = json.load(open(tmp_path / "run" / "outputs.json"))["outputs"]
    assert [n for _, n in out] == [6, 6, 6]
    for rank in (0, 1):
        path = tmp_path / "run" / f"shapes.rank{rank}.jsonl"
        records, summary = read_run(path)   # SGLang SIGKILLs its workers: ended_by running
        assert summary["rank"] == rank
        assert f"{path}: {len(records):,} records, {summary['logged_forward_passes']} forward passes logged, " \
               f"ended by running, rank {rank}\n" in r.stdout
        # this rank's half of the heads; extend: the prompts' tokens, decode: one row per request and step
        rows = qkv_rows(records, out_features=(64 + 2 * 32) // 2)
        assert sum(v[0] for k, v in rows.items() if k[1] == "extend") == sum(p for p, _ in out)
        assert sum(v[0] for k, v in rows.items() if k[1] == "decode") == sum(n - 1 for _, n in out)


@pytest.mark.parametrize("way", ["zero-edit", "patched"])
def test_diffusion_deduplicated(models, patched_tree, tmp_path, way):
    run("run_diffusion.py", [models / "tiny-sd", "--steps", "3", "--out", tmp_path / "images"], tmp_path, way,
        patched_tree)
    records, summary = read_run(tmp_path / "shapes.jsonl", ended_by="close")
    assert summary["dedupe_enabled"] is True and summary["dedupe_skipped_count"] > 0
    assert "generate" in summary["phase_passes"]
    convs = [r for r in records if r["operation"] == "aten.convolution.default"
             or r["operation"] == "aten.conv2d.default"]
    assert convs
    # deduplicated: each written signature (docs/FORMAT.md) is distinct
    sigs = [json.dumps([r["operation"], r["inputs"], r["outputs"], r.get("phase"), r.get("graph")],
                       sort_keys=True) for r in records if "error" not in r]
    assert len(sigs) == len(set(sigs))
    # the UNet ran once per step: its convolutions were observed more often than written
    conv_op = convs[0]["operation"]
    assert summary["operation_counts"][conv_op] > sum(r["operation"] == conv_op for r in records)


def test_patches_apply_to_the_installed_sglang(patched_tree):
    assert_patched_and_compiling(patched_tree, WORKERS.values())


def test_zero_edit_hook_is_in_the_wheel_install():
    # In the SGLang venv sgl_shapeprof is installed from a wheel (not editable):
    # the start-up hook must have landed in site-packages with it.
    if os.path.realpath(PKG_ROOT) == os.path.realpath(ROOT):
        pytest.skip("editable install: the hook is installed with `sgl-shapeprof hook install`")
    assert zero_edit_hook_installed()


def test_run_command_workload_and_step_window(models, tmp_path):
    """run --num-prompts/--isl/--osl/--concurrency/--start-step/--stop-step on
    the real engine: requests of exactly the input length asked, each
    generating exactly the output length, at most `concurrency` at once, and
    only the window of passes asked recorded. The oracle is the request:
    8 requests of 16 tokens, 4 at once, so each wave's extend pass holds
    4 x 16 rows and its decode passes 4; passes [1, 9) of the 10 it runs."""
    env, engine = run_command_setup()
    prompts, isl, osl, concurrency, start, stop = 8, 16, 5, 4, 1, 9
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "sglang", "--model-path",
                        str(models / "tiny-llama"), "--num-prompts", str(prompts), "--isl", str(isl), "--osl", str(osl),
                        "--concurrency", str(concurrency), "--start-step", str(start), "--stop-step", str(stop),
                        "-o", "run", *engine],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert f"{prompts} requests of {isl} random tokens x {osl} tokens, at most {concurrency} at once" in r.stderr
    out = json.load(open(tmp_path / "run" / "outputs.json"))["outputs"]
    assert out == [[isl, osl]] * prompts  # the engine's own counts
    records, summary = read_run(tmp_path / "run" / "shapes.rank0.jsonl")
    assert summary["logged_forward_passes"] == stop - start
    rows = qkv_rows(records, out_features=64 + 2 * 32)
    assert len(rows) == stop - start  # every pass in the window, no other
    for (_, phase), per_layer in rows.items():
        assert per_layer == [concurrency * isl if phase == "extend" else concurrency] * 2, (phase, per_layer)
    assert {p for _, p in rows} == {"extend", "decode"}


def test_run_spec_runs_one_profile_per_role_of_a_srtctl_job(models, tmp_path):
    """run --spec on the real engine, a disaggregated srtctl job file: a
    profile per role, each its own window into its own folder (srtctl's
    layout). The oracle is the job file: 8 requests of 16 tokens, 4 at once,
    5 tokens each; the prefill role served its share (prompt and first token:
    its window holds extend passes of 4 x 16 rows only), the decode role
    passes [1, 5): the second to fifth, which decode 4 rows each."""
    env, engine = run_command_setup()
    (tmp_path / "job.yaml").write_text(
        "name: tiny-1p1d\nmodel: {path: tiny, container: latest}\n"
        "resources: {gpu_type: h200, prefill_nodes: 1, decode_nodes: 1, prefill_workers: 1, decode_workers: 1}\n"
        "profiling:\n  type: shapes\n  prefill: {start_step: 0, stop_step: 2}\n  decode: {start_step: 1, stop_step: 5}\n"
        "benchmark: {type: sa-bench, isl: 16, osl: 5, concurrencies: 4x64}\n")
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--spec", "job.yaml", "--concurrency", "4",
                        "--model-path", str(models / "tiny-llama"), "--num-prompts", "8", "-o", "profiles",
                        *engine],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert sorted(os.listdir(tmp_path / "profiles")) == ["decode", "prefill"]
    out = json.load(open(tmp_path / "profiles" / "prefill" / "outputs.json"))["outputs"]
    assert out == [[16, 1]] * 8  # the engine's own counts: a prefill worker's share
    records, summary = read_run(tmp_path / "profiles" / "prefill" / "shapes.rank0.jsonl")
    rows = qkv_rows(records, out_features=64 + 2 * 32)
    assert summary["logged_forward_passes"] == 2 and len(rows) == 2
    assert all(phase == "extend" and per_layer == [4 * 16] * 2 for (_, phase), per_layer in rows.items()), rows
    out = json.load(open(tmp_path / "profiles" / "decode" / "outputs.json"))["outputs"]
    assert out == [[16, 5]] * 8
    records, summary = read_run(tmp_path / "profiles" / "decode" / "shapes.rank0.jsonl")
    rows = qkv_rows(records, out_features=64 + 2 * 32)
    assert summary["logged_forward_passes"] == 4 and len(rows) == 4
    assert all(phase == "decode" and per_layer == [4] * 2 for (_, phase), per_layer in rows.items()), rows
    # tune names the decode batch size that ran: the four eager passes of 4 requests
    assert summary["eager_sizes"] == {"decode": {"4": 4}}
    tune = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "tune", "profiles/decode", "--device", "NVIDIA_H200",
                           "--cuda-graph-bs"], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert tune.returncode == 0, tune.stderr
    assert "real decode batch sizes, 4 decode passes (4 eager, 0 graph replays): 4:4" in tune.stdout
    assert "--cuda-graph-bs covering 95% of them: 4\n" in tune.stdout


def test_run_concurrency_with_dp_is_shared_by_the_replicas(models, tmp_path):
    """run --dp 2 --concurrency 4: N in flight in all, as a client's
    concurrency means it. Each replica runs its own scheduler, whose limit
    (max_running_requests) is its own, so each gets 4 / 2. The oracle is the
    request: every prompt's 16 rows once across the replicas, no decode pass
    of a replica above 2 rows, and 2 in its steady state."""
    env, engine = run_command_setup()
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "sglang", "--model-path",
                        str(models / "tiny-llama"), "--dp", "2", "--num-prompts", "8", "--isl", "16", "--osl", "5",
                        "--concurrency", "4", "-o", "run",
                        *engine],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "at most 4 at once (2 in each replica)" in r.stderr
    assert json.load(open(tmp_path / "run" / "outputs.json"))["outputs"] == [[16, 5]] * 8
    files = sorted(glob.glob(str(tmp_path / "run" / "shapes.*.jsonl")))
    assert [os.path.basename(f) for f in files] == ["shapes.TP-0-DP-0.jsonl", "shapes.TP-0-DP-1.jsonl"]
    extend_rows = 0
    for f in files:
        records, summary = read_run(f)
        rows = qkv_rows(records, out_features=64 + 2 * 32)
        extend_rows += sum(v[0] for (_, phase), v in rows.items() if phase == "extend")
        decode = [v[0] for (_, phase), v in rows.items() if phase == "decode"]
        assert decode and max(decode) == 2, rows
        assert max(int(b) for b in summary["eager_sizes"]["decode"]) == 2
    assert extend_rows == 8 * 16
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "sglang", "--model-path", "m",
                        "--dp", "2", "--concurrency", "3"], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode == 2 and r.stderr == ("sgl-shapeprof run: --concurrency 3 with --dp 2: each replica runs at "
                                              "most concurrency/dp requests (its own scheduler's limit): give a "
                                              "multiple of 2\n")


def test_run_concurrency_without_num_prompts_keeps_it_in_flight_through_the_window(models, tmp_path):
    """run --concurrency 4 without --num-prompts: enough requests to keep 4
    in flight up to --stop-step (cli/run/window.py's prompts_in_flight), where the
    default 3 ran every decode pass at 3. The oracle is the request: 5
    tokens each, so the waves of 4 are passes 1-5, 6-10 and 11-15, and the
    window [3, 12) reaches into the third: 12 requests, and every decode
    pass in it runs 4 rows, its last (pass 12, in the third wave) included."""
    env, engine = run_command_setup()
    isl, osl, concurrency, start, stop = 24, 5, 4, 3, 12
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "sglang", "--model-path",
                        str(models / "tiny-llama"), "--isl", str(isl), "--osl", str(osl), "--concurrency",
                        str(concurrency), "--start-step", str(start), "--stop-step", str(stop), "-o", "run", *engine],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert f"12 requests of {isl} random tokens x {osl} tokens, at most {concurrency} at once" in r.stderr
    assert json.load(open(tmp_path / "run" / "outputs.json"))["outputs"] == [[isl, osl]] * 12
    records, summary = read_run(tmp_path / "run" / "shapes.rank0.jsonl")
    assert summary["logged_forward_passes"] == stop - start
    rows = qkv_rows(records, out_features=64 + 2 * 32)
    assert sorted(p for p, _ in rows) == list(range(start + 1, stop + 1)), sorted(rows)
    decode = {p: v for (p, phase), v in rows.items() if phase == "decode"}
    assert decode and all(v == [concurrency] * 2 for v in decode.values()), rows
    assert stop in decode  # the window's last pass: the third wave still decodes 4
    for (_, phase), v in rows.items():
        assert phase == "decode" or (v[0] % isl == 0 and v[0] <= concurrency * isl), rows

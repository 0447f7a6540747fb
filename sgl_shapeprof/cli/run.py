"""`sgl-shapeprof run`: one command per server -- start its offline engine with
profiling on (every worker: TP x PP x DP), send the workload (the prompts, or
requests of exactly --isl random tokens, --osl tokens each, at most
--concurrency at once), record the window of passes asked (--start-step,
--stop-step), shut it down, analyze every worker's file together."""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from typing import Optional

from ..integrations.registry import servers
from . import analyze
from .common import fail


def add_parser(sub: "argparse._SubParsersAction") -> None:
    r = sub.add_parser("run", help="run a server's engine on a few prompts with profiling on, then analyze "
                                   "every rank's file")
    names = servers()
    r.add_argument("--server", required=True, choices=names, help=f"the engine: {' or '.join(names)}")
    r.add_argument("--model-path", required=True, metavar="M", help="the model (a folder or a hub name)")
    r.add_argument("--tp", type=int, default=1, metavar="N", help="tensor parallel size (default 1)")
    r.add_argument("--pp", type=int, default=1, metavar="N", help="pipeline parallel size (default 1)")
    r.add_argument("--dp", type=int, default=1, metavar="N", help="data parallel size (default 1)")
    r.add_argument("--prompts", "--num-prompts", dest="prompts", type=int, default=3, metavar="N",
                   help="requests sent (default 3)")
    r.add_argument("--max-tokens", "--osl", dest="max_tokens", type=int, default=50, metavar="N",
                   help="tokens generated per request, exactly (end of sequence ignored; default 50)")
    r.add_argument("--isl", type=int, metavar="N",
                   help="each request N random tokens long (default: a few short text prompts)")
    r.add_argument("--concurrency", type=int, metavar="N",
                   help="at most N requests running at once (the engine's own limit: SGLang's "
                        "max_running_requests, vLLM's max_num_seqs); default the engine's")
    r.add_argument("--start-step", type=int, metavar="N",
                   help="skip the first N forward passes (warm-up): record from pass N+1 (default 0); with "
                        "--url on SGLang, SGLang's own start_step (the server's forward count)")
    r.add_argument("--stop-step", type=int, metavar="N",
                   help="record up to pass N: stop-step - start-step passes in all (default: to the end)")
    r.add_argument("--url", metavar="URL",
                   help="drive a server started elsewhere (armed: SGLANG_PROFILE_SHAPES=on_request) instead of "
                        "starting an engine: shapes asked through its /start_profile, the workload sent to it")
    r.add_argument("--api-key", metavar="KEY", help="the server's API key (--url), sent as a bearer token")
    r.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="an argument of vllm.LLM / sglang.Engine (VALUE read as JSON if it parses: "
                        "dtype=float32, enforce_eager=true); repeatable")
    r.add_argument("--dedupe", action="store_true", help="write each signature once")
    r.add_argument("-o", "--output-dir", default="shapeprof-run", metavar="DIR",
                   help="where the records files and engine.log go (default shapeprof-run)")
    r.set_defaults(func=run)


def _engine_args(pairs) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise fail(f"--engine-arg {pair!r} must be KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def _analyze(paths: list) -> None:
    parser = argparse.ArgumentParser(prog="sgl-shapeprof")
    analyze.add_parser(parser.add_subparsers())
    analyze.run(parser.parse_args(["analyze", *paths, "--top", "10", "--no-diversity"]))


def _window(start, stop) -> dict:
    """The recorder's settings for a window of forward passes [start, stop)."""
    from ..recording import config
    if start is not None and start < 0:
        raise fail(f"--start-step {start}: must be at least 0")
    if stop is not None and stop <= (start or 0):
        raise fail(f"--stop-step {stop}: must be greater than --start-step ({start or 0})")
    out = {}
    if start:
        out[config.ENV_SKIP_WARMUP] = str(start)
    if stop is not None:
        out[config.ENV_LOG_N_PASSES] = str(stop - (start or 0))
    return out


def progress(out_dir: str, total: Optional[int]) -> str:
    """'recorded 12/50 passes': the most any worker's summary snapshot says
    it logged (each worker's runs as the engine steps)."""
    logged = 0
    for path in glob.glob(os.path.join(glob.escape(out_dir), "shapes*_summary.json")):
        try:
            with open(path) as f:
                n = json.load(f).get("logged_forward_passes")
        except (OSError, ValueError, AttributeError):
            continue  # being rewritten: the next look reads it
        if isinstance(n, int) and n > logged:
            logged = n
    return f"recorded {logged}{f'/{total}' if total else ''} pass{'es' if (total or logged) != 1 else ''}"


def _wait(child: subprocess.Popen, out_dir: str, total: Optional[int], err) -> int:
    """The engine's exit status; meanwhile, on a terminal, its progress in
    one line that rewrites itself."""
    live = hasattr(err, "isatty") and err.isatty()
    shown = ""
    while True:
        try:
            rc = child.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if live:
                line = progress(out_dir, total)
                if line != shown:
                    err.write(f"\r{line} ")
                    err.flush()
                    shown = line
    if live and shown:
        err.write(f"\r{progress(out_dir, total)}\n")
    return rc


def run(args: argparse.Namespace) -> int:
    for option in ("tp", "pp", "dp", "prompts", "max_tokens", "isl", "concurrency"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise fail(f"--{option.replace('_', '-')} {value}: must be at least 1")
    window = _window(args.start_step, args.stop_step)
    if args.url:
        return run_remote(args)
    if args.api_key:
        raise fail("--api-key goes with --url (a server started elsewhere)")
    out_dir = os.path.abspath(args.output_dir)
    # the engine runs in out_dir: a local folder given relative to here must still be found
    model = os.path.abspath(args.model_path) if os.path.exists(args.model_path) else args.model_path
    spec = {"server": args.server, "model_path": model, "tp": args.tp, "pp": args.pp, "dp": args.dp,
            "prompts": args.prompts, "max_tokens": args.max_tokens, "isl": args.isl,
            "engine_args": _engine_args(args.engine_arg), "output": os.path.join(out_dir, "outputs.json")}
    from ..integrations.engines import engine
    server = engine(args.server)
    if args.concurrency is not None:
        given = spec["engine_args"].get(server.CONCURRENCY_ARG)
        if given is not None and given != args.concurrency:
            raise fail(f"--concurrency {args.concurrency} and --engine-arg {server.CONCURRENCY_ARG}={given} "
                       f"disagree: give one")
        spec["engine_args"][server.CONCURRENCY_ARG] = args.concurrency
    why = server.refuse(spec)
    if why:
        raise fail(why)
    os.makedirs(out_dir, exist_ok=True)
    stale = glob.glob(os.path.join(glob.escape(out_dir), "shapes*.jsonl"))
    if stale:
        raise fail(f"{out_dir} already holds {os.path.basename(stale[0])}: give another --output-dir")
    from ..recording import config
    settings = {config.ENV_ENABLE: "1", config.ENV_RANK: "all", config.ENV_DEDUPE: "1" if args.dedupe else "0",
                config.ENV_FILE: os.path.join(out_dir, "shapes.jsonl"), **window}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(config.ENV_ENABLE) and not k.startswith(config.neutral_name(config.ENV_ENABLE) + "_")
           and k != config.neutral_name(config.ENV_ENABLE)}
    env.update({config.neutral_name(k): v for k, v in settings.items()})
    for line in server.prepare(spec, env):
        print(f"sgl-shapeprof run: {line}", file=sys.stderr)
    with open(os.path.join(out_dir, "run.json"), "w") as f:
        json.dump(spec, f)
    log_path = os.path.join(out_dir, "engine.log")
    layout = ", ".join(f"{k}={v}" for k, v in (("TP", args.tp), ("PP", args.pp), ("DP", args.dp))
                       if v > 1 or k == "TP")
    load = (f"{args.prompts} requests of {args.isl} random tokens" if args.isl else f"{args.prompts} prompts") + \
        f" x {args.max_tokens} tokens" + (f", at most {args.concurrency} at once" if args.concurrency else "")
    # passes are numbered from 1 in the records, warm-up included
    steps = "" if not window else (f"; recording passes {(args.start_step or 0) + 1} to "
                                   f"{args.stop_step if args.stop_step is not None else 'the end'}")
    print(f"running {args.server} on {args.model_path} ({layout}, {load}{steps}); engine log: {log_path}",
          file=sys.stderr)
    total = (args.stop_step - (args.start_step or 0)) if args.stop_step is not None else None
    with open(log_path, "w") as log:
        child = subprocess.Popen([sys.executable, "-m", "sgl_shapeprof.integrations.engines",
                                  os.path.join(out_dir, "run.json")], stdout=log, stderr=subprocess.STDOUT,
                                 env=env, cwd=out_dir)
        try:
            rc = _wait(child, out_dir, total, sys.stderr)
        except BaseException:  # interrupted (Ctrl-C): the engine does not outlive run
            child.terminate()  # its engine.shutdown() ends the server's processes
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            raise
    if rc != 0:
        with open(log_path, errors="replace") as f:
            tail = f.read()[-3000:]
        sys.stderr.write(tail)
        raise fail(f"the {args.server} engine exited with status {rc} (its log: {log_path})")
    files = sorted(glob.glob(os.path.join(glob.escape(out_dir), "shapes*.jsonl")))
    if not files:
        raise fail(f"the {args.server} engine ran but recorded nothing{server.NOT_RECORDED_HINT}; "
                   f"its log: {log_path}")
    _analyze([out_dir])  # together, in worker order: each file labelled, the deployment inventoried
    return 0


# run --url without --concurrency: every request at once, up to this many
URL_CONCURRENCY = 256


def run_remote(args: argparse.Namespace) -> int:
    """run --url: a server started elsewhere, asked for SHAPES over the
    window, sent the workload, its window closed; the files its reply names
    analyzed where they are on this machine."""
    import importlib

    from ..integrations.engines import workload
    from ..integrations.registry import seam
    where = seam(args.server).REMOTE
    for option, default in (("tp", 1), ("pp", 1), ("dp", 1), ("engine_arg", []), ("dedupe", False)):
        if getattr(args, option) != default:
            raise fail(f"--{option.replace('_', '-')}: the server at --url is started already (it is its own)")
    remote = importlib.import_module(where)
    out_dir = os.path.abspath(args.output_dir)
    os.makedirs(out_dir, exist_ok=True)
    model = os.path.abspath(args.model_path) if os.path.exists(args.model_path) else args.model_path
    try:
        # a running server keeps earlier prompts in its prefix cache: fresh ids each run
        prompts = workload({"prompts": args.prompts, "isl": args.isl, "model_path": model,
                            "seed": int.from_bytes(os.urandom(4), "little")})
    except Exception as e:  # no transformers here, a model folder it cannot read
        raise fail(f"--isl: cannot read the vocabulary size of {args.model_path} ({type(e).__name__}: "
                   f"{str(e).splitlines()[0] if str(e) else ''})")
    from ..integrations.http_client import printable
    try:
        reply, files = remote.start(args.url, args.api_key, out_dir, args.start_step, args.stop_step)
        sys.stderr.write(printable(reply) + "\n")
        try:
            sent = [0]
            live = sys.stderr.isatty()

            def done(n: int) -> None:
                sent[0] += n
                if live:
                    sys.stderr.write(f"\rsent {sent[0]}/{len(prompts)} requests ")
                    sys.stderr.flush()
            outputs = remote.generate(args.url, args.api_key, prompts, args.max_tokens,
                                      args.concurrency or min(len(prompts), URL_CONCURRENCY), done)
            if live:
                sys.stderr.write("\n")
        finally:  # a request that failed, an interrupt: the server's window is closed all the same
            remote.stop(args.url, args.api_key)
    except remote.RemoteError as e:
        raise fail(str(e))
    with open(os.path.join(out_dir, "outputs.json"), "w") as f:
        json.dump({"outputs": outputs}, f)
    local = []
    for p in files:  # paths the reply named, or patterns of them (glob)
        found = sorted(glob.glob(p)) if "*" in p else [p] if os.path.exists(p) else []
        local += found
        if not found and "*" not in p:
            print(f"sgl-shapeprof run: {p} is on the server's machine, not here", file=sys.stderr)
    if local:
        _analyze(local)
    return 0

"""run without --url: the engine started here (a child process), every
worker recording the window, supervised (its progress on a terminal; an
interrupt ends it), then every worker's file analyzed together."""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from typing import Optional

from ...integrations.registry import seam
from ...records.reader import SUMMARY_SUFFIX
from .. import analyze
from ..common import fail
from .window import too_few, window_settings

# the records files run asks for: shapes.jsonl, each worker's named from it
# (shapes_tp0.jsonl, ...; recording/selection.py), each summary beside it
RECORDS_STEM, RECORDS_EXT = "shapes", ".jsonl"


def engine_args(pairs) -> dict:
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


def analyze_files(paths: list) -> None:
    parser = argparse.ArgumentParser(prog="sgl-shapeprof")
    analyze.add_parser(parser.add_subparsers())
    analyze.run(parser.parse_args(["analyze", *paths, "--top", "10", "--no-diversity"]))


def progress(out_dir: str, total: Optional[int]) -> str:
    """'recorded 12/50 passes': the most any worker's summary snapshot says
    it logged (each worker's runs as the engine steps)."""
    logged = 0
    for path in glob.glob(os.path.join(glob.escape(out_dir), f"{RECORDS_STEM}*{SUMMARY_SUFFIX}")):
        try:
            with open(path) as f:
                n = json.load(f).get("logged_forward_passes")
        except (OSError, ValueError, AttributeError):
            continue  # being rewritten: the next look reads it
        if isinstance(n, int) and n > logged:
            logged = n
    return f"recorded {logged}{f'/{total}' if total else ''} pass{'es' if (total or logged) != 1 else ''}"


def wait(child: subprocess.Popen, out_dir: str, total: Optional[int], err) -> int:
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


def refuse_unrunnable(server: str, model_path: str, given_as: str = "--model-path") -> None:
    """A local run: a model folder that cannot be read, or a server this
    Python cannot import, refused in one line before anything is created
    (the engine child would end in a traceback)."""
    from ...integrations.engines import model_folder_problem, not_installed
    why = model_folder_problem(model_path)
    if why:
        raise fail(f"{given_as} {why}")
    why = not_installed(server)
    if why:
        raise fail(f"--server {server}: {why}")


def refuse_records_in(out_dir: str) -> None:
    """A folder that holds records already is not run into (its files would mix)."""
    stale = glob.glob(os.path.join(glob.escape(out_dir), f"{RECORDS_STEM}*{RECORDS_EXT}"))
    if stale:
        raise fail(f"{out_dir} already holds {os.path.basename(stale[0])}: give another --output-dir")


def run_local(args: argparse.Namespace) -> int:
    """Starts the engine, sends the workload, records the window; analyzes."""
    window = window_settings(args.start_step, args.stop_step)
    out_dir = os.path.abspath(args.output_dir)
    # the engine runs in out_dir: a local folder given relative to here must still be found
    model = os.path.abspath(args.model_path) if os.path.exists(args.model_path) else args.model_path
    spec = {"server": args.server, "model_path": model, "tp": args.tp, "pp": args.pp, "dp": args.dp,
            "prompts": args.prompts, "max_tokens": args.max_tokens, "isl": args.isl,
            "engine_args": engine_args(args.engine_arg), "output": os.path.join(out_dir, "outputs.json")}
    from ...integrations.engines import engine
    server = engine(args.server)
    concurrency_arg = seam(args.server).concurrency_arg
    if args.concurrency is not None:
        # the engine's limit is each data-parallel replica's (its own
        # scheduler), and the replicas take the requests in turn: N in
        # flight in all is N/dp in each
        if args.concurrency % args.dp:
            raise fail(f"--concurrency {args.concurrency} with --dp {args.dp}: each replica runs at most "
                       f"concurrency/dp requests (its own scheduler's limit): give a multiple of {args.dp}")
        per_replica = args.concurrency // args.dp
        given = spec["engine_args"].get(concurrency_arg)
        if given is not None and given != per_replica:
            raise fail(f"--concurrency {args.concurrency} and --engine-arg {concurrency_arg}={given} "
                       f"disagree: give one")
        spec["engine_args"][concurrency_arg] = per_replica
    why = server.refuse(spec)
    if why:
        raise fail(why)
    refuse_records_in(out_dir)
    refuse_unrunnable(args.server, args.model_path)
    if args.concurrency:  # (a count run chose itself is never too few)
        too_few(args.prompts, args.concurrency, args.max_tokens, args.start_step, args.stop_step)
    os.makedirs(out_dir, exist_ok=True)
    from ...recording import config
    settings = {config.ENV_ENABLE: "1", config.ENV_RANK: "all", config.ENV_DEDUPE: "1" if args.dedupe else "0",
                config.ENV_TIME: "1" if args.time else "0",
                config.ENV_FILE: os.path.join(out_dir, RECORDS_STEM + RECORDS_EXT), **window}
    env = config.child_environ(settings, keep_others=False)  # run decides them all
    for line in server.prepare(spec, env):
        print(f"sgl-shapeprof run: {line}", file=sys.stderr)
    with open(os.path.join(out_dir, "run.json"), "w") as f:
        json.dump(spec, f)
    log_path = os.path.join(out_dir, "engine.log")
    layout = ", ".join(f"{k}={v}" for k, v in (("TP", args.tp), ("PP", args.pp), ("DP", args.dp))
                       if v > 1 or k == "TP")
    load = (f"{args.prompts} requests of {args.isl} random tokens" if args.isl else f"{args.prompts} prompts") + \
        f" x {args.max_tokens} token{'s' if args.max_tokens != 1 else ''}" + \
        (f", at most {args.concurrency} at once" if args.concurrency else "") + \
        (f" ({args.concurrency // args.dp} in each replica)" if args.concurrency and args.dp > 1 else "")
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
            rc = wait(child, out_dir, total, sys.stderr)
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
    files = sorted(glob.glob(os.path.join(glob.escape(out_dir), f"{RECORDS_STEM}*{RECORDS_EXT}")))
    if not files:
        raise fail(f"the {args.server} engine ran but recorded nothing{server.NOT_RECORDED_HINT}; "
                   f"its log: {log_path}")
    analyze_files([out_dir])  # together, in worker order: each file labelled, the deployment inventoried
    return 0

"""run --url: a server started elsewhere, armed: each worker asked for
shapes over its window through /start_profile, the workload sent to the
server, every window closed; the files that are on this machine analyzed."""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from ...integrations.registry import seam
from ..common import fail
from .local import analyze_files
from .window import too_few

# run --url without --concurrency: every request at once, up to this many
URL_CONCURRENCY = 256


def workload_prompts(args: argparse.Namespace) -> list:
    """The workload for a running server: fresh token ids each run (its
    prefix cache keeps earlier prompts, which would shorten their prefill)."""
    from ...integrations.engines import workload
    model = os.path.abspath(args.model_path) if os.path.exists(args.model_path) else args.model_path
    try:
        return workload({"prompts": args.prompts, "isl": args.isl, "model_path": model,
                         "seed": int.from_bytes(os.urandom(4), "little")})
    except Exception as e:  # no transformers here, a model folder it cannot read
        raise fail(f"--isl: cannot read the vocabulary size of {args.model_path} ({type(e).__name__}: "
                   f"{str(e).splitlines()[0] if str(e) else ''})")


def drive(args: argparse.Namespace, arms: list) -> list:
    """Arms each worker [(url, output folder, start, stop)] through its
    /start_profile, sends the workload to --url, closes every window
    armed (also when a request fails or the run is interrupted: a server
    is never left recording); the files each reply names, per arm."""
    import importlib

    from ...integrations.http_client import printable
    remote = importlib.import_module(seam(args.server).remote)
    prompts = workload_prompts(args)
    armed, files = [], []
    try:
        try:
            for url, out_dir, start, stop in arms:
                os.makedirs(out_dir, exist_ok=True)
                reply, named = remote.start(url, args.api_key, out_dir, start, stop, time=args.time)
                armed.append(url)
                files.append(named)
                sys.stderr.write(printable(reply) + "\n")
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
        finally:  # a request that failed, an interrupt: the servers' windows are closed all the same
            for url in armed:
                remote.stop(url, args.api_key)
    except remote.RemoteError as e:
        raise fail(str(e))
    for _, out_dir, _, _ in arms:
        with open(os.path.join(out_dir, "outputs.json"), "w") as f:
            json.dump({"outputs": outputs}, f)
    return files


def local_files(named: list) -> list:
    """The files (or patterns) a reply named that are on this machine."""
    local = []
    for p in named:
        found = sorted(glob.glob(p)) if "*" in p else [p] if os.path.exists(p) else []
        local += found
        if not found and "*" not in p:
            print(f"sgl-shapeprof run: {p} is on the server's machine, not here", file=sys.stderr)
    return local


def started_elsewhere(args: argparse.Namespace) -> None:
    """--url: what starting an engine takes is refused (the server is its own)."""
    for option, default in (("tp", 1), ("pp", 1), ("dp", 1), ("engine_arg", []), ("dedupe", False)):
        if getattr(args, option) != default:
            raise fail(f"--{option.replace('_', '-')}: the server at --url is started already (it is its own)")


def run_remote(args: argparse.Namespace) -> int:
    """run --url: a server started elsewhere, asked for SHAPES over the
    window, sent the workload, its window closed; the files its reply names
    analyzed where they are on this machine."""
    started_elsewhere(args)
    if args.concurrency:
        too_few(args.prompts, args.concurrency, args.max_tokens, args.start_step, args.stop_step)
    (named,) = drive(args, [(args.url, os.path.abspath(args.output_dir), args.start_step, args.stop_step)])
    local = local_files(named)
    if local:
        analyze_files(local)
    return 0

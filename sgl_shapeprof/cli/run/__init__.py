"""`sgl-shapeprof run`: one command per server -- start its offline engine with
profiling on (every worker: TP x PP x DP), send the workload (the prompts, or
requests of exactly --isl random tokens, --osl tokens each, at most
--concurrency at once), record the window of passes asked (--start-step,
--stop-step), shut it down, analyze every worker's file together. Or drive
a running server (--url), or run the profiles a srtctl job file asks for
(--spec), one per role.

One module per mode: local.py (an engine started here), remote.py (--url),
spec.py (--spec); window.py: the window and the requests that fill it."""
from __future__ import annotations

import argparse

from ...integrations import srtctl
from ...integrations.registry import seam, servers
from ..common import fail
from .local import run_local
from .remote import run_remote
from .spec import run_spec
from .window import MAX_TOKENS, PROMPTS, prompts_in_flight, window_settings


def add_parser(sub: "argparse._SubParsersAction") -> None:
    r = sub.add_parser("run", help="run a server's engine on a few prompts with profiling on, then analyze "
                                   "every rank's file")
    seams = [seam(n) for n in servers()]
    names = [s.name for s in seams]
    limits = ", ".join(f"{s.display_name}'s {s.concurrency_arg}" for s in seams)
    r.add_argument("--server", choices=names,
                   help=f"the engine: {' or '.join(names)} (with --spec, default its backend.type)")
    r.add_argument("--model-path", metavar="M",
                   help="the model (a folder or a hub name; with --spec, default its model.path if that is a "
                        "folder here)")
    r.add_argument("--tp", type=int, default=1, metavar="N", help="tensor parallel size (default 1)")
    r.add_argument("--pp", type=int, default=1, metavar="N", help="pipeline parallel size (default 1)")
    r.add_argument("--dp", type=int, default=1, metavar="N", help="data parallel size (default 1)")
    r.add_argument("--prompts", "--num-prompts", dest="prompts", type=int, metavar="N",
                   help=f"requests sent (default {PROMPTS}; with --concurrency C, enough to keep C in flight "
                        f"through the window; with --spec at least {srtctl.DEFAULT_NUM_PROMPTS}, as srtctl's "
                        "profiling script sends)")
    r.add_argument("--max-tokens", "--osl", dest="max_tokens", type=int, metavar="N",
                   help=f"tokens generated per request, exactly (end of sequence ignored; default {MAX_TOKENS})")
    r.add_argument("--isl", type=int, metavar="N",
                   help="each request N random tokens long (default: a few short text prompts)")
    r.add_argument("--concurrency", type=int, metavar="N",
                   help=f"at most N requests running at once (the engine's own limit: {limits}); default the "
                        "engine's")
    r.add_argument("--start-step", type=int, metavar="N",
                   help="skip the first N forward passes (warm-up): record from pass N+1 (default 0); with "
                        "--url on SGLang, SGLang's own start_step (the server's forward count)")
    r.add_argument("--stop-step", type=int, metavar="N",
                   help="record up to pass N: stop-step - start-step passes in all (default: to the end)")
    r.add_argument("--url", metavar="URL",
                   help="drive a server started elsewhere (armed: SGLANG_PROFILE_SHAPES=on_request) instead of "
                        "starting an engine: shapes asked through its /start_profile, the workload sent to it")
    r.add_argument("--api-key", metavar="KEY", help="the server's API key (--url), sent as a bearer token")
    r.add_argument("--spec", metavar="JOB.yaml",
                   help="run the profiles a srtctl job file's profiling: section asks for (type: shapes): one per "
                        "role, its window and traffic, into DIR/prefill, DIR/decode or DIR/agg (docs/traffic.md)")
    r.add_argument("--worker-url", action="append", default=[], metavar="ROLE=URL",
                   help="with --spec and --url: a worker's own server, asked for shapes over its role's window "
                        "(prefill=URL, decode=URL; repeatable); --url is then where the traffic goes (the router)")
    r.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                   help=f"an argument of {' / '.join(s.engine_api for s in seams)} (VALUE read as JSON if it parses: "
                        "dtype=float32, enforce_eager=true); repeatable")
    r.add_argument("--dedupe", action="store_true", help="write each signature once")
    r.add_argument("--time", action="store_true",
                   help="time each recorded call (as SHAPEPROF_TIME=1 does; with --url, the request asks for it: "
                        "docs/time.md)")
    r.add_argument("-o", "--output-dir", default="shapeprof-run", metavar="DIR",
                   help="where the records files and engine.log go (default shapeprof-run)")
    r.set_defaults(func=run)


def _positive(args: argparse.Namespace) -> None:
    for option in ("tp", "pp", "dp", "prompts", "max_tokens", "isl", "concurrency"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise fail(f"--{option.replace('_', '-')} {value}: must be at least 1")


def run(args: argparse.Namespace) -> int:
    _positive(args)
    if args.spec:
        return run_spec(args)
    if args.worker_url:
        raise fail("--worker-url goes with --spec and --url (a disaggregated deployment's workers)")
    if not args.server:
        raise fail("--server is required (or --spec, whose backend.type names it)")
    if not args.model_path:
        raise fail("--model-path is required")
    args.max_tokens = args.max_tokens or MAX_TOKENS
    window_settings(args.start_step, args.stop_step)
    if args.api_key and not args.url:
        raise fail("--api-key goes with --url (a server started elsewhere)")
    if not args.prompts:
        args.prompts = PROMPTS if args.concurrency is None else \
            prompts_in_flight(args.concurrency, args.max_tokens, args.start_step, args.stop_step)
    return run_remote(args) if args.url else run_local(args)

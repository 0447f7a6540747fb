"""`sgl-shapeprof request`: ask a running process armed with SGLANG_PROFILE_SHAPES=on_request to record passes."""
from __future__ import annotations

import argparse
import os

from .common import fail


def add_parser(sub: "argparse._SubParsersAction") -> None:
    q = sub.add_parser("request", help="ask a running process armed with SGLANG_PROFILE_SHAPES=on_request "
                                        "to record passes (or --stop, --status)")
    q.add_argument("pid", type=int, help="the process (each TP rank's scheduler, for SGLang)")
    q.add_argument("--passes", type=int, default=10, metavar="N", help="logged passes to record (0: until --stop)")
    q.add_argument("--phases", metavar="A,B", help="only passes with these phase labels")
    q.add_argument("--skip", type=int, default=0, metavar="N", help="passes to let by first")
    q.add_argument("-o", "--output", help="records file (default: shapes-<time>-rank<N>.jsonl in its folder)")
    q.add_argument("--stop", action="store_true", help="end the running request; its files are complete")
    q.add_argument("--status", action="store_true", help="what the process is doing")
    q.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds to wait for the answer")
    q.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..recording.on_request import RequestError, send
    if args.stop:
        msg = {"action": "stop"}
    elif args.status:
        msg = {"action": "status"}
    else:
        msg = {"action": "start", "passes": args.passes, "skip": args.skip,
               "phases": args.phases, "output": os.path.abspath(args.output) if args.output else None}
    try:
        reply = send(args.pid, msg, timeout=args.timeout)
    except (RequestError, OSError) as e:
        raise fail(str(e)) from None
    if reply is None:
        raise fail(f"process {args.pid} did not answer within {args.timeout:g} s: it takes "
                                "requests at forward-pass starts, and only when started with "
                                "SGLANG_PROFILE_SHAPES=on_request (the request stays until it is taken)")
    print(f"pid {args.pid}: {reply.get('message')}")
    return 0 if reply.get("ok") else 1

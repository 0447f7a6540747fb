"""`sgl-shapeprof request`: ask a running process armed with SGLANG_PROFILE_SHAPES=on_request to record passes."""
from __future__ import annotations

import argparse
import os
from typing import Optional, Tuple

from ..recording.switch import ARMED, ENV_ENABLE, ON_REQUEST, env_setting, neutral_name, parse_switch
from .common import count, fail


def add_parser(sub: "argparse._SubParsersAction") -> None:
    q = sub.add_parser("request", help="ask a running process armed with SGLANG_PROFILE_SHAPES=on_request "
                                        "to record passes (or --stop, --status)")
    q.add_argument("pid", type=int, help="the process (each TP rank's scheduler, for SGLang)")
    q.add_argument("--passes", type=count, default=10, metavar="N", help="logged passes to record (0: until --stop)")
    q.add_argument("--phases", metavar="A,B", help="only passes with these phase labels")
    q.add_argument("--skip", type=count, default=0, metavar="N", help="passes to let by first")
    q.add_argument("-o", "--output", help="records file (default: shapes-<time>-rank<N>.jsonl in its folder)")
    q.add_argument("--time", action="store_true",
                   help="time each recorded call (as SHAPEPROF_TIME=1 does; docs/time.md)")
    q.add_argument("--nvtx", action="store_true",
                   help="an NVTX range per recorded call, for nsys (as SHAPEPROF_NVTX=1 does)")
    q.add_argument("--stop", action="store_true", help="end the running request; its files are complete")
    q.add_argument("--status", action="store_true", help="what the process is doing")
    q.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds to wait for the answer")
    q.set_defaults(func=run)


def _environ(pid: int) -> Optional[dict]:
    """Process pid's environment as it was started, or None when it cannot
    be read or was overwritten by a process title (setproctitle, as vLLM's
    EngineCore and workers do)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    if not data or data.startswith(b"\0"):  # a title's padding, maybe old pieces after it: not the environment
        return None
    return dict(i.split("=", 1) for i in data.decode(errors="replace").split("\0") if "=" in i) or None


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def started_with(pid: int) -> Optional[Tuple[int, str, str]]:
    """(process, spelling, value): the switch in the environment process
    pid was started with, else in its nearest ancestor's that can be read
    (a child inherits it); value "" when unset. None when none can be read."""
    for _ in range(8):
        if pid <= 1:
            return None
        environ = _environ(pid)
        if environ is not None:
            return (pid, *(env_setting(ENV_ENABLE, environ) or (neutral_name(ENV_ENABLE), "")))
        pid = _parent(pid)
    return None


def _why_no_answer(pid: int) -> str:
    arm = f"{neutral_name(ENV_ENABLE)}={ON_REQUEST}"
    found = started_with(pid)
    if found is not None and parse_switch(found[2]) != ARMED:
        # not refused outright: a script can make an OnRequestProfiler itself
        where, name, value = found
        switch = f"{name}={value!r}" if value.strip() else f"{name} unset"
        started = "it was started" if where == pid else f"it was started from process {where}"
        return (f"{started} with {switch}, not {arm}, so it takes no requests unless it made an "
                f"OnRequestProfiler itself")
    return (f"it takes requests at forward-pass starts, in the process that runs the model (for vLLM: each "
            f"VLLM::Worker, or VLLM::EngineCore where there is none; not the API server), and only when "
            f"started with {arm}")


def run(args: argparse.Namespace) -> int:
    from ..recording.mailbox import send
    from ..recording.requests import RequestError
    if args.stop:
        msg = {"action": "stop"}
    elif args.status:
        msg = {"action": "status"}
    else:
        msg = {"action": "start", "passes": args.passes, "skip": args.skip,
               "phases": args.phases, "output": os.path.abspath(args.output) if args.output else None,
               "time": True if args.time else None, "nvtx": True if args.nvtx else None}
    try:
        reply = send(args.pid, msg, timeout=args.timeout)
    except (RequestError, OSError) as e:
        raise fail(str(e)) from None
    if reply is None:
        raise fail(f"process {args.pid} did not answer within {args.timeout:g} s: {_why_no_answer(args.pid)} "
                   "(the request stays until it is taken)")
    print(f"pid {args.pid}: {reply.get('message')}")
    return 0 if reply.get("ok") else 1

"""`sgl-shapeprof record`: profile a Python script."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import List

from .common import count, fail


def add_parser(sub: "argparse._SubParsersAction") -> None:
    r = sub.add_parser("record", help="profile a Python script: record [-o FILE] -- python script.py ARGS")
    r.add_argument("-o", "--output", default="shapes.jsonl", help="records file (default shapes.jsonl)")
    r.add_argument("--dedupe", action="store_true", help="write each signature once")
    r.add_argument("--skip-warmup", type=count, default=0, metavar="N", help="passes not logged first")
    r.add_argument("--log-n-passes", type=count, default=0, metavar="N", help="logged passes at most (0: all)")
    r.add_argument("--args", action="store_true",
                   help="record every argument, strides and devices too (what `replay` needs)")
    r.add_argument("--max-mb", type=_max_mb, default=None, metavar="MB",
                   help="the records file's cap in MiB (default 1024; 0: none): recording stops before "
                        "a record would pass it, and the summary says so")
    r.add_argument("--sync", action="store_true",
                   help="wait for the device after each recorded CUDA call, so that an asynchronous kernel "
                        "failure is the error of the call that launched it (debugging; slow)")
    r.add_argument("--time", action="store_true",
                   help="measure each recorded call's wall time (records' time_us; with --dedupe, per "
                        "signature count, total, min, median and max in the summary)")
    r.add_argument("--kernels", action="store_true",
                   help="--time, and each recorded call's GPU kernels through CUPTI (name, grid, block, device "
                        "time) in FILE_kernels.jsonl beside the records; refused in one line without a CUDA "
                        "device or under torch.profiler (docs/time.md)")
    r.add_argument("--nvtx", action="store_true",
                   help="an NVTX range per recorded call, named by its operation and input shapes: under nsys "
                        "each kernel sits under the shapes that launched it")
    r.add_argument("command", nargs=argparse.REMAINDER, help="-- python script.py ARGS")
    r.set_defaults(func=run)


def _max_mb(value: str) -> float:
    from ..recording.config import ConfigError, parse_max_mb
    try:
        mb = parse_max_mb("--max-mb", value)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if mb is None:
        raise argparse.ArgumentTypeError("--max-mb needs a size in MiB (0: no cap)")
    return mb


def run(args: argparse.Namespace) -> int:
    cmd: List[str] = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise fail("give the command after --, e.g. sgl-shapeprof record -o shapes.jsonl -- python script.py")
    exe = os.path.basename(cmd[0])
    if exe.endswith(".py"):
        target = cmd
    elif exe.startswith("python"):
        target = cmd[1:]
        if not target:
            raise fail("python needs a script, -m module or -c code")
    else:
        raise fail(f"{cmd[0]!r} is not a Python command; record runs "
                   "'python script.py ...', 'python -m module ...' or 'script.py ...'")
    out = os.path.abspath(args.output)
    if not os.path.isdir(os.path.dirname(out)):
        raise fail(f"directory of {args.output} does not exist")
    from ..recording import config
    try:
        config.env_rank()  # the program's own rank variables: a bad one is said here, once
    except config.ConfigError as e:
        raise fail(str(e)) from None
    settings = {
        config.ENV_ENABLE: "1",
        config.ENV_FILE: out,
        config.ENV_DEDUPE: "1" if args.dedupe else "0",
        config.ENV_SKIP_WARMUP: str(args.skip_warmup),
        config.ENV_LOG_N_PASSES: str(args.log_n_passes),
        config.ENV_ARGS: "1" if args.args else "0",
        config.ENV_SYNC: "1" if args.sync else "0",
        config.ENV_TIME: config.KERNELS if args.kernels else "1" if args.time else "0",
        config.ENV_NVTX: "1" if args.nvtx else "0",
    }
    if args.max_mb is not None:
        settings[config.ENV_MAX_MB] = repr(args.max_mb)
    env = config.child_environ(settings)  # the user's other variables of ours kept
    python = cmd[0] if exe.startswith("python") else sys.executable
    python = shutil.which(python) or python
    argv = [python, "-m", "sgl_shapeprof.recording.program", *target]
    sys.stdout.flush()
    os.execve(python, argv, env)  # the script gets this process: pid, signals, exit code
    return 0  # not reached

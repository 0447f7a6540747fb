"""python -m sgl_shapeprof.recording.program SCRIPT|-m MODULE|-c CODE ARGS

Runs a Python program under the profiler that `sgl-shapeprof record` set up
in the environment. The whole run is one forward pass, until the program marks
passes itself (through sgl_shapeprof.from_env(), which returns this same
profiler): its first start_forward_pass() ends the implicit pass.
"""
import os
import runpy
import sys

from .env import from_env, resolve_rank
from .config import ENV_RANK, ConfigError
from .switch import neutral_name


def main() -> None:
    argv = sys.argv[1:]
    if not argv:
        sys.exit("usage: python -m sgl_shapeprof.recording.program SCRIPT|-m MODULE|-c CODE [ARGS]")
    # This process is the one to profile, whatever its rank; the program's
    # own from_env() calls then get this same profiler.
    try:
        os.environ[neutral_name(ENV_RANK)] = str(resolve_rank())
        os.environ.pop(ENV_RANK, None)
    except ConfigError:
        pass  # from_env() says which variable is bad, and profiling is off
    prof = from_env()
    if prof is not None:
        prof._start_implicit_pass()
    try:
        if argv[0] == "-m" and len(argv) > 1:
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c" and len(argv) > 1:
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = list(argv)
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
    finally:
        if prof is not None:
            prof.end_forward_pass()
            prof.close()


if __name__ == "__main__":
    main()

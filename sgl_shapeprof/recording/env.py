"""The profiler the environment variables ask for (SHAPEPROF_* or
SGLANG_PROFILE_SHAPES_*): from_env(), one per process and records file, and
this process's rank.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Optional

from .config import (DEFAULT_FILE, ENV_ENABLE, ENV_FILE, ENV_LOG_N_PASSES, ENV_PHASES, ENV_SKIP_WARMUP,
                     ConfigError, env_rank, read_env)
from .messages import say, say_once
from .switch import env_setting
from .on_request import OnRequestProfiler
from .profiler import ShapeProfiler, check_count
from ..records.worker import Worker

_env_profiler: Optional[ShapeProfiler] = None
_env_lock = threading.Lock()


def env_profiler() -> Optional[ShapeProfiler]:
    """The profiler from_env() made in this process (an OnRequestProfiler
    with SGLANG_PROFILE_SHAPES=on_request) while it is open, else None."""
    p = _env_profiler
    return p if p is not None and not p.closed else None


def resolve_rank(rank: Optional[int] = None) -> int:
    """rank, else $RANK, else $LOCAL_RANK, else torch.distributed's rank, else 0."""
    if rank is not None:
        return check_count("rank", rank)
    r = env_rank()
    if r is not None:
        return r
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return 0


# Settings a request gives for itself (passes, phases, skip): with
# SGLANG_PROFILE_SHAPES=on_request these variables are not used.
_NOT_ARMED = (ENV_SKIP_WARMUP, ENV_LOG_N_PASSES, ENV_PHASES)


def _armed_from_env(rank: int, worker: Worker, dedupe: bool, path: str, args: bool = False,
                    sync: bool = False, max_mb: Optional[float] = None, time: bool = False,
                    nvtx: bool = False):
    """SGLANG_PROFILE_SHAPES=on_request: one armed profiler per process and
    rank; requests write beside SGLANG_PROFILE_SHAPES_FILE's folder unless
    they name a file."""
    global _env_profiler
    with _env_lock:
        current = _env_profiler
        if isinstance(current, OnRequestProfiler) and not current.closed and current.worker == worker:
            return current
        _env_profiler = OnRequestProfiler(rank=rank, dedupe=dedupe, args=args, sync=sync, time=time, nvtx=nvtx,
                                          output_dir=os.path.dirname(os.path.abspath(path)), worker=worker,
                                          max_mb=max_mb)
        file = env_setting(ENV_FILE)
        if file is not None:
            _env_profiler.output_dir_from = "{}={!r}".format(*file)
        unused = ["{}={!r}".format(*s) for s in map(env_setting, _NOT_ARMED) if s and s[1].strip()]
        if unused:
            say_once("armed-unused", f"{', '.join(unused)}: not used with {ENV_ENABLE}=on_request "
                                      "(each request gives its own passes, phases and skip)")
        return _env_profiler


def from_env(rank: Optional[int] = None, dedupe_default: bool = False, worker: Optional[Worker] = None):
    """The profiler SGLang's env vars ask for, or None.

    worker: which worker of the deployment this process is, as the server
    sees it; rank: the rank SGLANG_PROFILE_SHAPES_RANK selects (default: the
    worker's TP rank; without a worker, this process's rank: resolve_rank).

    SGLANG_PROFILE_SHAPES=on_request gives an OnRequestProfiler (armed,
    recording only when asked; the same pass API). None when
    SGLANG_PROFILE_SHAPES is not 1 or on_request, when this process's rank is not
    profiled, or when a setting is bad (one line on stderr says which). Within
    a process, calls for the same records file return the same profiler.
    """
    global _env_profiler
    try:
        cfg = read_env()
        if not cfg.enabled:
            return None
        if worker is None:
            worker = Worker(tp_rank=resolve_rank(rank))
        r = worker.tp_rank if rank is None else check_count("rank", rank)
        if not cfg.profiles(worker, r):
            return None
        path = cfg.path_for(worker, r)
        dedupe = dedupe_default if cfg.dedupe is None else cfg.dedupe
        if cfg.on_request:
            return _armed_from_env(r, worker, dedupe, path, cfg.args, cfg.sync, cfg.max_mb, cfg.time, cfg.nvtx)
        with _env_lock:
            current = _env_profiler
            if current is not None and not current.closed and \
                    os.path.abspath(current.path) == os.path.abspath(path):
                return current
            _env_profiler = ShapeProfiler(
                path, rank=r, skip_warmup=cfg.skip_warmup, log_n_passes=cfg.log_n_passes,
                dedupe=dedupe, phases=cfg.phases, args=cfg.args, sync=cfg.sync, time=cfg.time, nvtx=cfg.nvtx,
                worker=worker,
                max_mb=cfg.max_mb, phases_from=(env_setting(ENV_PHASES) or (ENV_PHASES,))[0])
            return _env_profiler
    except (ConfigError, ValueError, TypeError, ImportError) as e:
        say(f"{e}; profiling is off")
    except OSError as e:  # the records file: name the variable that chose it
        file = env_setting(ENV_FILE)
        where = ("{}={!r}: ".format(*file) if file is not None
                 else f"{ENV_FILE} unset (default {DEFAULT_FILE!r}): ")
        say(f"{where}{e}; profiling is off")
    except Exception as e:  # the host must start anyway
        say(f"cannot start profiling ({type(e).__name__}: {e}); profiling is off")
    return None

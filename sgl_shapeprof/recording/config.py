"""Configuration from the environment variables (each read under its neutral
spelling, SHAPEPROF_*, or SGLang's, SGLANG_PROFILE_SHAPES_*: switch.py).

Every bad value becomes a ConfigError whose message is one line naming the
variable and the value; from_env() prints it and leaves profiling off.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import FrozenSet, Mapping, Optional, Tuple

from .switch import ARMED, ENV_ENABLE, OFF, ON_REQUEST, PHASE_ALIASES, env_setting, neutral_name, parse_switch
from ..records.worker import Worker
from .selection import SelectionError, has_placeholder, parse_selection, placeholders, selects

ENV_RANK = "SGLANG_PROFILE_SHAPES_RANK"
ENV_WORKERS = "SGLANG_PROFILE_SHAPES_WORKERS"
ENV_FILE = "SGLANG_PROFILE_SHAPES_FILE"
ENV_SKIP_WARMUP = "SGLANG_PROFILE_SHAPES_SKIP_WARMUP"
ENV_LOG_N_PASSES = "SGLANG_PROFILE_SHAPES_LOG_N_PASSES"
ENV_DEDUPE = "SGLANG_PROFILE_SHAPES_DEDUPE"
ENV_PHASES = "SGLANG_PROFILE_SHAPES_PHASES"
ENV_ARGS = "SGLANG_PROFILE_SHAPES_ARGS"
ENV_SYNC = "SGLANG_PROFILE_SHAPES_SYNC"
ENV_TIME = "SGLANG_PROFILE_SHAPES_TIME"
ENV_NVTX = "SGLANG_PROFILE_SHAPES_NVTX"
ENV_ROCTX_LIBRARY = "SGLANG_PROFILE_SHAPES_ROCTX_LIBRARY"
ENV_CUPTI_LIBRARY = "SGLANG_PROFILE_SHAPES_CUPTI_LIBRARY"
KERNELS = "kernels"  # time's value for each call's GPU kernels too (CUPTI)
ENV_MAX_MB = "SGLANG_PROFILE_SHAPES_MAX_MB"

DEFAULT_FILE = "shapes.jsonl"
_PHASE_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class ConfigError(ValueError):
    """A bad setting; str() is one line that names it."""



@dataclass(frozen=True)
class EnvConfig:
    enabled: bool
    ranks: Optional[FrozenSet[int]]  # None = every rank
    path: str
    skip_warmup: int
    log_n_passes: int
    dedupe: Optional[bool]  # None = the caller's default
    phases: Optional[FrozenSet[str]]
    on_request: bool = False  # armed: records nothing until a request
    args: bool = False  # record every argument, strides and devices too (replay)
    sync: bool = False  # wait for the device after each recorded call (debugging)
    workers: Optional[dict] = None  # SGLANG_PROFILE_SHAPES_WORKERS: ranks per dimension (selection.py)
    max_mb: Optional[float] = None  # the records file's cap (None: the default; 0: none)
    time: "bool | str" = False  # each recorded call's wall time (FORMAT.md: time_us); KERNELS: and its GPU kernels
    nvtx: bool = False  # an NVTX range per recorded call (nsys sees the shapes)

    def profiles_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def profiles(self, worker: Worker, rank: Optional[int] = None) -> bool:
        """Its rank is selected (SGLANG_PROFILE_SHAPES_RANK: the TP rank,
        or the rank the server integration gives; or tp= in
        SGLANG_PROFILE_SHAPES_WORKERS), and so are its other ranks."""
        sel = self.workers or {}
        if "tp" not in sel and not self.profiles_rank(worker.tp_rank if rank is None else rank):
            return False
        return selects(sel, worker)

    def path_for_rank(self, rank: int) -> str:
        return self.path_for(Worker(tp_rank=rank))

    def path_for(self, worker: Worker, rank: Optional[int] = None) -> str:
        sel = self.workers or {}
        tp = sel["tp"] if "tp" in sel else self.ranks
        return records_path_for(self.path, worker, several=tp is None or len(tp) > 1, rank=rank)


def ours(name: str) -> bool:
    """A variable of ours, in either spelling (the switch or one of its settings)."""
    neutral = neutral_name(ENV_ENABLE)
    return name.startswith(ENV_ENABLE) or name == neutral or name.startswith(neutral + "_")


def child_environ(settings: Mapping[str, str], keep_others: bool = True,
                  environ: Optional[Mapping[str, str]] = None) -> dict:
    """The environment of a child process profiled with `settings` (ENV_*
    name -> value), the one place it is built (`record`, `run`): this
    process's, each setting under its neutral spelling, its SGLang
    spelling dropped. keep_others: the user's other variables of ours go
    with it (`record`: a script's own SHAPEPROF_RANK, say); else every other
    one of ours is dropped (`run` decides them all)."""
    env = os.environ if environ is None else environ
    out = {k: v for k, v in env.items() if k not in settings and (keep_others or not ours(k))}
    out.update({neutral_name(k): v for k, v in settings.items()})
    return out


def records_path_for_rank(path: str, rank: int, several: bool) -> str:
    return records_path_for(path, Worker(tp_rank=rank), several)


def records_path_for(path: str, worker: Worker, several: bool, rank: Optional[int] = None) -> str:
    """The records file of one worker.

    Placeholders ({rank}: rank, by default the TP rank; {tp}, {pp}, {dp},
    {ep}, {worker}, {host}: selection.py) are filled in. Otherwise, when the deployment has
    several workers along PP, DP or EP, the worker's name goes before the
    extension (shapes.TP-0-PP-1.jsonl: SGLang's spelling); when it has
    only TP ranks and several are profiled, ".rank<N>" does
    (shapes.rank1.jsonl); a single profiled rank writes the path as given.
    Two workers never share a file.
    """
    rank = worker.tp_rank if rank is None else rank
    if has_placeholder(path):
        return placeholders(path, worker, rank)
    if not several and not worker.several:
        return path
    head, tail = os.path.split(path)
    stem, ext = os.path.splitext(tail)
    if not stem:  # ".jsonl" alone
        stem, ext = ext, ""
    return os.path.join(head, f"{stem}.{worker.label(rank)}{ext}")


INT_MAX = 2 ** 63 - 1  # the core counts in 64-bit integers


def _int(name: str, value: str) -> int:
    try:
        n = int(value.strip(), 10)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer") from None
    if n < 0:
        raise ConfigError(f"{name}={value!r} must not be negative")
    if n > INT_MAX:
        raise ConfigError(f"{name}={value!r} is too large (at most {INT_MAX})")
    return n


# torch's own variables, read for this process's rank when none is given
# (torchrun and most launchers set them): RANK first, then LOCAL_RANK.
TORCH_RANK_VARS = ("RANK", "LOCAL_RANK")


def env_rank(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """This process's rank from $RANK, else $LOCAL_RANK; None when neither is
    set. A bad value is a ConfigError naming the variable and its value."""
    env = os.environ if environ is None else environ
    for name in TORCH_RANK_VARS:
        value = env.get(name, "")
        if value.strip():
            try:
                return _int(name, value)
            except ConfigError as e:
                raise ConfigError(f"{e} (read as this process's rank)") from None
    return None


def parse_max_mb(name: str, value: object) -> Optional[float]:
    """A records file's cap in MiB: a number, 0 for none; None when not
    given (the default cap: profiler.py). ConfigError in one line."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        mb = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        mb = float("nan")
    if isinstance(value, bool) or not (0 <= mb < 2 ** 43):  # nan and inf fail too
        raise ConfigError(f"{name}={value!r} must be a size in MiB: a number, 0 for no cap")
    return mb


def _flag(name: str, value: str) -> bool:
    v = value.strip()
    if v in ("1",):
        return True
    if v in ("0", ""):
        return False
    raise ConfigError(f"{name}={value!r} must be 0 or 1")


def parse_time(name: str, value: str) -> "bool | str":
    """0, 1 (each call's wall time) or "kernels" (and its GPU kernels)."""
    v = value.strip()
    if v.lower() == KERNELS:
        return KERNELS
    if v in ("0", "1", ""):
        return v == "1"
    raise ConfigError(f"{name}={value!r} must be 0, 1 or {KERNELS}")


def cupti_library(environ: Optional[Mapping[str, str]] = None) -> Optional[Tuple[str, str]]:
    """(the spelling read, the CUPTI library it names), or None: the one
    beside torch's CUDA (recording/kernels.py)."""
    found = _Settings(os.environ if environ is None else environ).get(ENV_CUPTI_LIBRARY)
    return found if found and found[1].strip() else None


def parse_ranks(value: str, name: str = ENV_RANK) -> Optional[FrozenSet[int]]:
    """"0", "0,2", or "all" (None: every rank)."""
    v = value.strip()
    if v.lower() == "all":
        return None
    parts = [p for p in v.split(",")]
    if not v or any(not p.strip() for p in parts):
        raise ConfigError(f"{name}={value!r} must be a rank, a comma list of ranks, or 'all'")
    return frozenset(_int(name, p) for p in parts)


def phase_filter(phases, name: str = ENV_PHASES) -> Optional[FrozenSet[str]]:
    """The labels a phase filter selects -- from "decode,extend" or a list --
    with prefill/extend aliasing each other; None when it selects every pass.
    The one parser for SGLANG_PROFILE_SHAPES_PHASES and ShapeProfiler(phases=)."""
    if phases is None:
        return None
    parts = phases.split(",") if isinstance(phases, str) else [str(p) for p in phases]
    parts = [p.strip() for p in parts]
    if not any(parts):
        return None
    for p in parts:
        if not _PHASE_RE.match(p):
            raise ConfigError(f"{name}={phases!r}: phase {p!r} must be letters, digits, '_', '.' or '-'")
    return frozenset(parts + [PHASE_ALIASES[p] for p in parts if p in PHASE_ALIASES])


def parse_phases(value: str, name: str = ENV_PHASES) -> Optional[FrozenSet[str]]:
    return phase_filter(value, name)


class _Settings:
    """The variables of one environment, each under the spelling it is set
    in (a bad value's message names that one)."""

    def __init__(self, environ: Mapping[str, str]):
        self.env = environ

    def get(self, name: str) -> Optional[tuple]:
        """(spelling, value) as env_setting reads it; two that disagree are an error."""
        found = env_setting(name, self.env)
        if found is not None:
            other = name if found[0] != name else neutral_name(name)
            value = (self.env.get(other) or "").strip()
            if value and value != found[1].strip():
                raise ConfigError(f"{found[0]}={found[1]!r} and {other}={self.env[other]!r} disagree: "
                                  f"set one of them")
        return found

    def number(self, name: str) -> int:
        found = self.get(name)
        return _int(*found) if found and found[1].strip() else 0

    def flag(self, name: str) -> Optional[bool]:
        found = self.get(name)
        return _flag(*found) if found and found[1].strip() else None


def roctx_library(environ: Optional[Mapping[str, str]] = None) -> Optional[Tuple[str, str]]:
    """(the spelling read, the rocTX library it names: ranges through rocTX
    on any torch), or None: rocTX on a ROCm build of torch only, from its
    own search (profiler.py)."""
    found = _Settings(os.environ if environ is None else environ).get(ENV_ROCTX_LIBRARY)
    return found if found and found[1].strip() else None


def read_env(environ: Optional[Mapping[str, str]] = None) -> EnvConfig:
    """Reads and checks every variable; raises ConfigError on the first bad one."""
    env = _Settings(os.environ if environ is None else environ)
    found = env.get(ENV_ENABLE)
    switch = found[1] if found else "0"
    state = parse_switch(switch)
    if state is None:
        raise ConfigError(f"{found[0] if found else ENV_ENABLE}={switch!r} must be 0, 1 or {ON_REQUEST}")
    enabled, on_request = state != OFF, state == ARMED
    rank = env.get(ENV_RANK)
    ranks = parse_ranks(rank[1], rank[0]) if rank else frozenset({0})
    chosen = env.get(ENV_WORKERS)
    try:
        workers = parse_selection(chosen[1], chosen[0]) if chosen else None
    except SelectionError as e:
        raise ConfigError(str(e)) from None
    if workers and "tp" in workers and rank and rank[1].strip():
        raise ConfigError(f"{rank[0]}={rank[1]!r} and {chosen[0]}={chosen[1]!r} both choose TP ranks: "
                          f"set one of them")
    file = env.get(ENV_FILE)
    path = file[1] if file else DEFAULT_FILE
    if not path.strip():
        raise ConfigError(f"{file[0]}={path!r} is empty")
    skip = env.number(ENV_SKIP_WARMUP)
    limit = env.number(ENV_LOG_N_PASSES)
    dedupe = env.flag(ENV_DEDUPE)
    phases_set = env.get(ENV_PHASES)
    phases = parse_phases(phases_set[1], phases_set[0]) if phases_set else None
    args = bool(env.flag(ENV_ARGS))
    sync = bool(env.flag(ENV_SYNC))
    found = env.get(ENV_TIME)
    timed = parse_time(*found) if found else False
    nvtx = bool(env.flag(ENV_NVTX))
    cap = env.get(ENV_MAX_MB)
    max_mb = parse_max_mb(*cap) if cap else None
    return EnvConfig(enabled, ranks, path, skip, limit, dedupe, phases, on_request, args, sync, workers, max_mb,
                     timed, nvtx)

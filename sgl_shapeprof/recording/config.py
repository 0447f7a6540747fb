"""Configuration from SGLang's environment variables.

Every bad value becomes a ConfigError whose message is one line naming the
variable and the value; from_env() prints it and leaves profiling off.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import FrozenSet, Mapping, Optional

from .switch import ARMED, ENV_ENABLE, OFF, ON_REQUEST, PHASE_ALIASES, parse_switch

ENV_RANK = "SGLANG_PROFILE_SHAPES_RANK"
ENV_FILE = "SGLANG_PROFILE_SHAPES_FILE"
ENV_SKIP_WARMUP = "SGLANG_PROFILE_SHAPES_SKIP_WARMUP"
ENV_LOG_N_PASSES = "SGLANG_PROFILE_SHAPES_LOG_N_PASSES"
ENV_DEDUPE = "SGLANG_PROFILE_SHAPES_DEDUPE"
ENV_PHASES = "SGLANG_PROFILE_SHAPES_PHASES"
ENV_ARGS = "SGLANG_PROFILE_SHAPES_ARGS"
ENV_SYNC = "SGLANG_PROFILE_SHAPES_SYNC"

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

    def profiles_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def path_for_rank(self, rank: int) -> str:
        return records_path_for_rank(self.path, rank, several=self.ranks is None or len(self.ranks) > 1)


def records_path_for_rank(path: str, rank: int, several: bool) -> str:
    """The records file of one rank.

    "{rank}" in the path is replaced by the rank. Otherwise, when several ranks
    are profiled, ".rank<N>" goes before the extension (shapes.jsonl ->
    shapes.rank1.jsonl), so two ranks never share a file; a single profiled
    rank writes the path as given.
    """
    if "{rank}" in path:
        return path.replace("{rank}", str(rank))
    if not several:
        return path
    head, tail = os.path.split(path)
    stem, ext = os.path.splitext(tail)
    if not stem:  # ".jsonl" alone
        stem, ext = ext, ""
    return os.path.join(head, f"{stem}.rank{rank}{ext}")


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


def _flag(name: str, value: str) -> bool:
    v = value.strip()
    if v in ("1",):
        return True
    if v in ("0", ""):
        return False
    raise ConfigError(f"{name}={value!r} must be 0 or 1")


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


def read_env(environ: Optional[Mapping[str, str]] = None) -> EnvConfig:
    """Reads and checks every variable; raises ConfigError on the first bad one."""
    env = os.environ if environ is None else environ
    switch = env.get(ENV_ENABLE, "0")
    state = parse_switch(switch)
    if state is None:
        raise ConfigError(f"{ENV_ENABLE}={switch!r} must be 0, 1 or {ON_REQUEST}")
    enabled, on_request = state != OFF, state == ARMED
    ranks = parse_ranks(env[ENV_RANK]) if ENV_RANK in env else frozenset({0})
    path = env.get(ENV_FILE, DEFAULT_FILE)
    if not path.strip():
        raise ConfigError(f"{ENV_FILE}={path!r} is empty")
    skip = _int(ENV_SKIP_WARMUP, env[ENV_SKIP_WARMUP]) if env.get(ENV_SKIP_WARMUP, "").strip() else 0
    limit = _int(ENV_LOG_N_PASSES, env[ENV_LOG_N_PASSES]) if env.get(ENV_LOG_N_PASSES, "").strip() else 0
    dedupe = _flag(ENV_DEDUPE, env[ENV_DEDUPE]) if env.get(ENV_DEDUPE, "").strip() else None
    phases = parse_phases(env.get(ENV_PHASES, ""))
    args = _flag(ENV_ARGS, env[ENV_ARGS]) if env.get(ENV_ARGS, "").strip() else False
    sync = _flag(ENV_SYNC, env[ENV_SYNC]) if env.get(ENV_SYNC, "").strip() else False
    return EnvConfig(enabled, ranks, path, skip, limit, dedupe, phases, on_request, args, sync)

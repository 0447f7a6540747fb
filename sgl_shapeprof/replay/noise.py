"""Replay's noise: whether a call's timing can be trusted, from what replay
itself measures.

Two signals, each cheap:
- spread: the call's own runs. A run slowed by another task (preempted, or
  one of its threads waiting for a core at a barrier) takes a scheduler time
  slice longer, not a few per cent, so when one run in ten takes twice the
  median or more (and at least SPREAD_FLOOR_US more: below that it is the
  timer's and the interpreter's own jitter around a call of a few
  microseconds), the median is one draw of a mix that the machine's load
  decides, and the next replay's will differ.
- busy: the run queue read just before and just after the call's timed runs
  (/proc/loadavg's 4th field, "runnable/total": the kernel's nr_running,
  every task runnable on any CPU at that instant, this process's own
  included, so they are subtracted: /proc/self/task/*/stat in state R).
  When other tasks stay runnable at both readings and leave fewer free cores
  than the threads the call runs on, its threads share cores with them, and
  a parallel operator waits at each barrier for the one off its core (a
  conv2d of 83 us on 1 thread took 16,013 us on 2, on a 2-core VM where 2
  other tasks ran: docs/replay.md). All of a call's runs can be slowed
  alike, which its spread does not see.
"""
from __future__ import annotations

import os
from typing import List, Optional

SPREAD = 2.0             # p90 over the median, at or above which the runs are doubted
SPREAD_FLOOR_US = 10.0   # ... when p90 is also this much above the median


def _own_runnable() -> int:
    """This process's tasks in state R (running or waiting for a core)."""
    n = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                text = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        n += text[text.rindex(")") + 2] == "R"  # "pid (comm) state ...": comm may hold spaces and ')'
    return n


def others_runnable() -> Optional[int]:
    """Tasks of other processes runnable now, on the whole machine; None where
    the kernel does not say (no /proc/loadavg: not Linux)."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(running - _own_runnable(), 0)


def cores() -> int:
    """The machine's cores: the run queue counts tasks on all of them."""
    return os.cpu_count() or 1


def usable_cores() -> int:
    """The cores this process may run on (taskset, cgroup cpusets)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return cores()


def free_cores(others: int) -> int:
    """Cores left to this process while `others` other tasks are runnable."""
    return max(min(usable_cores(), cores() - others), 0)


def spread(median_us: float, p90_us: float) -> bool:
    """One run in ten (p90) at least SPREAD times the median, and at least
    SPREAD_FLOOR_US above it."""
    return p90_us >= SPREAD * median_us and p90_us - median_us >= SPREAD_FLOOR_US


def busy(others: Optional[int], threads: int) -> bool:
    """More threads than the cores the other runnable tasks leave free."""
    return others is not None and threads > free_cores(others)


def doubts(median_us: float, p90_us: float, others: Optional[int], threads: int) -> List[str]:
    """Why a call's timing is doubtful: "busy", "spread", or nothing."""
    return [why for why, yes in (("busy", busy(others, threads)), ("spread", spread(median_us, p90_us))) if yes]


"""run's window of passes, and how many requests keep it full."""
from __future__ import annotations

import sys
from typing import Optional

from ..common import fail

# without --spec: the requests sent (without --concurrency), the tokens each generates
PROMPTS = 3
MAX_TOKENS = 50


def prompts_in_flight(concurrency: int, osl: int, start: Optional[int], stop: Optional[int]) -> int:
    """The requests that keep `concurrency` of them in flight through the
    window: up to pass `stop`, or without one, through one request's life
    past the warm-up (start + osl).

    Every request is given to the engine at once, and it runs `concurrency`
    of them, refilling a slot from the queue as its request finishes. A
    request holds its slot for at least osl passes: its prefill pass makes
    its first token, each decode pass one more. So k requests through one
    slot keep it busy through pass k * osl at least, and ceil(last / osl)
    per slot keep every slot busy through pass `last`. What breaks the
    lockstep only lengthens a request's stay, never shortens it: a wave's
    requests reaching the scheduler over a few passes, a prefill chunked
    over several, another slot's prefill pass that decodes nothing else;
    so no wave is added for safety (the engine runs every request to its
    end: one more wave is osl passes more after the window). With --dp
    each replica runs concurrency/dp slots and takes every dp-th request
    (SGLang's round robin), so the count is the same in all. Not covered:
    a pass that makes several tokens of a request (speculative decoding),
    which needs more (--num-prompts).
    """
    last = stop if stop is not None else (start or 0) + osl
    return concurrency * -(-last // osl)


def too_few(given: int, concurrency: int, osl: int, start: Optional[int], stop: Optional[int],
             role: str = "") -> None:
    """One line when --num-prompts cannot keep --concurrency in flight
    through the window (a note: a run may mean to record the drain)."""
    need = prompts_in_flight(concurrency, osl, start, stop)
    if given < need:
        last = stop if stop is not None else (start or 0) + osl
        print(f"sgl-shapeprof run: {role}--num-prompts {given} is too few to keep {concurrency} requests in flight "
              f"through pass {last} ({need} would: {concurrency} for every {osl} passes, a request's --osl); "
              f"the window's last passes run fewer", file=sys.stderr)


def window_settings(start, stop) -> dict:
    """The recorder's settings for a window of forward passes [start, stop):
    the passes before the window are skipped (the recorder's SKIP_WARMUP
    setting counts the passes it lets by, warm-up or not), then
    stop - start are logged."""
    from ...recording import config
    if start is not None and start < 0:
        raise fail(f"--start-step {start}: must be at least 0")
    if stop is not None and stop <= (start or 0):
        raise fail(f"--stop-step {stop}: must be greater than --start-step ({start or 0})")
    out = {}
    if start:
        out[config.ENV_SKIP_WARMUP] = str(start)
    if stop is not None:
        out[config.ENV_LOG_N_PASSES] = str(stop - (start or 0))
    return out

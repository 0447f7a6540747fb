"""Replay: run each distinct recorded call again (files recorded with
arguments) and time it.

- calls.py: the distinct calls of scanned records, and whether each can be
  replayed faithfully (check);
- inputs.py: a call's inputs built from its record (build);
- timing.py: each call run and timed (replay, replay_call);
- noise.py: whether a call's timing can be trusted (its runs' spread, the
  machine's run queue against its threads);
- output.py: two replays compared (their CSVs; the table, CSV and JSON of
  one are render/'s).
"""
from .calls import Call, NotReplayable, Replayed, check, distinct_calls, resolve
from .inputs import Built, build
from .output import compare, read_csv
from .timing import default_max_bytes, measure, replay, replay_call

__all__ = ["Call", "NotReplayable", "Replayed", "check", "distinct_calls", "resolve", "Built", "build",
           "compare", "read_csv", "default_max_bytes", "measure", "replay", "replay_call"]

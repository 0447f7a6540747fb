"""Replay: run each distinct recorded call again (files recorded with
arguments) and time it.

- calls.py: the distinct calls of scanned records, and whether each can be
  replayed faithfully (check);
- inputs.py: a call's inputs built from its record (build);
- timing.py: each call run and timed (replay, replay_call);
- output.py: the results as a table, CSV or JSON, and two replays compared.
"""
from .calls import Call, NotReplayable, Replayed, check, distinct_calls, resolve
from .inputs import Built, build
from .output import as_json, compare, print_table, read_csv, write_csv
from .timing import default_max_bytes, measure, replay, replay_call

__all__ = ["Call", "NotReplayable", "Replayed", "check", "distinct_calls", "resolve", "Built", "build",
           "as_json", "compare", "print_table", "read_csv", "write_csv", "default_max_bytes", "measure",
           "replay", "replay_call"]

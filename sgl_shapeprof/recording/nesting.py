"""A thread's open pass, and the one place the rules for a pass begun while
another is open are written (ShapeProfiler and OnRequestProfiler follow
them through nest()):

- begun by the same front inside its open pass: part of it (NESTED; its
  end ends nothing);
- start_forward_pass() while the pass that an earlier start_forward_pass()
  began is open, not nested: that pass ends first, said once (UNENDED); a
  forward that raised between start and end must not swallow the passes
  after it;
- `sgl-shapeprof record`'s whole-run pass (implicit): the program's first
  pass replaces it (BEGIN);
- begun by another front inside an open pass: refused, said once
  (REFUSED): one thread logs into one file at a time, the outer pass goes on.

What is recorded follows the native module's per-thread pass (the C core's
t_pass, which also ends any open pass at a begin); this state only counts
the nesting that a front answers without a native call.
"""
from __future__ import annotations

import threading

from .messages import say_once

BEGIN, NESTED, UNENDED, REFUSED = "begin", "nested", "unended", "refused"


class OpenPass:
    """This thread's pass of one front: found with one thread-local read,
    then plain attributes."""
    __slots__ = ("owner", "depth", "plain", "logged", "implicit", "target", "kept")

    def __init__(self) -> None:
        self.owner = None      # the front whose pass this is
        self.depth = 0         # open passes (nesting); 0: none
        self.plain = False     # the open pass was begun by start_forward_pass()
        self.logged = False
        self.implicit = False  # the open pass is `record`'s whole-run one
        self.target = None     # OnRequestProfiler: the ShapeProfiler its pass went to
        self.kept = None       # OnRequestProfiler: (keeper, depth) of a capture kept inside an unrecorded pass

    def opened(self, owner, logged: bool, plain: bool, target=None) -> None:
        self.owner, self.depth, self.logged, self.plain, self.implicit, self.target, self.kept = (
            owner, 1, logged, plain, False, target, None)


class Passes:
    """Per-thread open passes: tls.state is this thread's OpenPass once here()
    made it (the hot path reads it directly)."""

    def __init__(self) -> None:
        self.tls = threading.local()

    def here(self) -> OpenPass:
        try:
            return self.tls.state
        except AttributeError:
            st = self.tls.state = OpenPass()
            return st


def nest(st: OpenPass, owner, plain: bool) -> str:
    """What a pass that owner begins now is, with st (depth > 0) open on
    this thread; a NESTED pass is counted in st."""
    if st.owner is owner:
        if st.implicit:
            st.implicit = False
            st.depth = 0
            return BEGIN
        if st.depth == 1 and st.plain and plain:
            say_once("unended", "start_forward_pass() while the pass it started on this thread is "
                                "still open (no end_forward_pass() after it): that pass ends here")
            return UNENDED
        st.depth += 1
        return NESTED
    other = st.owner
    if other is not None and not other.closed:
        say_once("nested", f"a pass of {other!r} is open on this thread: a pass of {owner!r} "
                           f"inside it is not logged (one file per thread at a time)")
        return REFUSED
    st.depth = 0
    return BEGIN

"""Profiling on request: a server armed at start-up records nothing until it
is asked, then records the next N forward passes into a file of their own.

    prof = OnRequestProfiler(rank=0)            # SGLANG_PROFILE_SHAPES=on_request
    with prof.forward_pass("decode"): ...       # the server's passes, as usual
    prof.request(passes=10, phases=["decode"])  # from any thread: at the next pass start
    prof.stop()                                 # ends it early; returns the records path

From outside the process (scripts and servers we do not integrate with):
`sgl-shapeprof request PID --passes 10` writes a request file that the armed
process looks for at pass starts and answers with a reply file
(mailbox.py).
"""
from __future__ import annotations

import os
import threading
from time import strftime
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Union

from ..records.worker import Worker
from .config import phase_filter
from .kept_captures import KeptCapture, KeptCaptures
from .mailbox import Mailbox, answer, unlink_quietly
from .nesting import NESTED, UNENDED, Passes, nest
from .profiler import PassContext, ShapeProfiler
from .requests import RequestError, request_count
from ..records.phases import BY_STAGE
from .switch import same_phase


FREE_NAMES = 1000  # .1 ... .999 tried before a request is refused


def _names(path: str) -> Iterable[str]:
    """path, then path with .1, .2, ... before its extension: a request
    never writes an earlier request's file."""
    yield path
    stem, ext = os.path.splitext(path)
    for n in range(1, FREE_NAMES):
        yield f"{stem}.{n}{ext}"


@dataclass
class Request:
    passes: int = 0                        # logged passes (0: until stop)
    phases: Optional[frozenset] = None     # only passes with these labels
    per_phase: bool = False                # `passes` of each phase (SGLang's profile_by_stage)
    output: str = ""
    skip: int = 0                          # passes let by before recording starts
    done_phases: Dict[str, int] = field(default_factory=dict)
    profiler: Optional[ShapeProfiler] = None  # its file, open since the request was taken
    adopted: Dict[int, KeptCapture] = field(default_factory=dict)  # the kept captures its file holds
    time: Optional[bool] = None            # its calls timed (None: the armed profiler's setting)
    nvtx: Optional[bool] = None            # NVTX ranges (None: the armed profiler's setting)


class OnRequestProfiler(PassContext):
    """Armed: records nothing until request(); the same pass API as ShapeProfiler."""

    def __init__(self, rank: int = 0, dedupe: bool = False, output_dir: Optional[str] = None,
                 control: bool = True, args: bool = False, sync: bool = False, time: bool = False,
                 nvtx: bool = False,
                 worker: Optional[Worker] = None, max_mb: Optional[float] = None):
        self.rank = rank
        self.max_mb = max_mb  # each request's records file's cap (ShapeProfiler's max_mb)
        self.worker = worker  # which worker of the deployment: names and summaries say it
        self.dedupe = dedupe
        self.args = args
        self.sync = sync
        self.time = time  # each request's calls are timed (ShapeProfiler's time)
        self.nvtx = nvtx  # and have NVTX ranges (ShapeProfiler's nvtx)
        self.output_dir = output_dir or os.getcwd()
        self._lock = threading.Lock()
        self._pending: Optional[Request] = None
        self._active: Optional[ShapeProfiler] = None
        self._req: Optional[Request] = None
        self._passes = Passes()  # per thread: its open pass, and the ShapeProfiler it went to
        self._closed = False
        self.mailbox: Optional[Mailbox] = Mailbox() if control else None
        self.finished: List[str] = []      # records files of finished requests
        self.output_dir_from: Optional[str] = None  # the setting that chose output_dir, for messages
        # graph captures (a server's start-up), kept for the requests that replay them
        self.captures = KeptCaptures(dedupe=self.dedupe, args=self.args, max_mb=max_mb)

    # -- requests (any thread) --------------------------------------------
    def request(self, passes: int = 0, phases: Union[str, Iterable[str], None] = None,
                output: Optional[str] = None, skip: int = 0, per_phase: bool = False,
                time: Optional[bool] = None, nvtx: Optional[bool] = None) -> str:
        """Records the next `passes` forward passes (0: until stop()), from
        the next pass start on; returns the records file it writes. The file
        is created here (a name of its own, never through a symbolic link,
        a regular file): a bad value, a taken name or an unwritable folder
        is a RequestError now, and a refused request creates nothing. time,
        nvtx: this request's calls timed, with NVTX ranges (None: as the
        profiler was armed)."""
        if self._closed:
            raise RequestError("this profiler is closed")
        request_count("passes", passes)
        request_count("skip", skip)
        if per_phase and not passes:
            raise RequestError("per_phase needs a number of passes")
        selected = phase_filter(phases, "phases")
        if output is None:
            output = os.path.join(self.output_dir, f"shapes-{strftime('%Y%m%d-%H%M%S')}"
                                                   f"-{self.worker_name()}.jsonl")
            chosen = self.output_dir_from
        else:
            chosen = None
        output = os.path.abspath(output)
        if not os.path.isdir(os.path.dirname(output)):
            raise RequestError(f"cannot write {output}: its directory does not exist"
                               + (f" ({chosen} chose it; or name the output)" if chosen else ""))
        with self._lock:
            if self._active is not None or self._pending is not None:
                busy = self._active.path if self._active is not None else self._pending.output
                raise RequestError(f"a request is already recording into {busy}; stop it first")
            req = Request(passes, selected, per_phase, output, skip, time=time, nvtx=nvtx)
            req.profiler = self._create(req)
            req.output = req.profiler.path
            self._pending = req
        return req.output

    def _create(self, req: Request) -> ShapeProfiler:
        """The request's profiler, its file created under the first free name."""
        for path in _names(req.output):
            try:
                return ShapeProfiler(
                    path, rank=self.rank, dedupe=self.dedupe, args=self.args, sync=self.sync,
                    time=self.time if req.time is None else req.time,
                    nvtx=self.nvtx if req.nvtx is None else req.nvtx,
                    worker=self.worker, skip_warmup=req.skip,
                    log_n_passes=0 if req.per_phase else req.passes,
                    phases=sorted(req.phases) if req.phases else None,
                    max_mb=self.max_mb, exclusive=True)
            except FileExistsError:
                continue
            except (OSError, ValueError) as e:
                raise RequestError(f"cannot record into {path}: {e}") from None
        raise RequestError(f"cannot record into {req.output}: it and {FREE_NAMES - 1} numbered names "
                           f"beside it exist")

    def worker_name(self) -> str:
        """rank<N>, or SGLang's TP-0-PP-1 where the deployment has PP, DP
        or EP workers: part of every file name this profiler chooses."""
        return (self.worker or Worker(tp_rank=self.rank)).label(self.rank)

    def stop(self) -> Optional[str]:
        """Ends the current request (or a pending one, whose file then holds
        no pass); its files are complete when this returns. The records
        path, or None if none ran."""
        with self._lock:
            act, self._active, self._req = self._active, None, None
            pending, self._pending = self._pending, None
        if act is None and pending is not None:
            act = pending.profiler
        if act is None:
            return None
        act.close()  # safe while another thread is inside a pass: logging ends there
        self.finished.append(act.path)
        return act.path

    def cancel(self, output: Optional[str] = None) -> Optional[str]:
        """Takes back a request no pass has started yet (another worker
        refused the same request): its files are removed, as if it had
        never been taken. Only the one writing `output`, when given. The
        records path it had, or None."""
        with self._lock:
            pending = self._pending
            if pending is None or pending.profiler is None or output not in (None, pending.output):
                return None
            self._pending = None
        prof = pending.profiler
        prof.close()
        for path in (prof.path, prof.summary_path):
            unlink_quietly(path)  # ours: created by this request (exclusive)
        return prof.path

    def status(self) -> dict:
        with self._lock:
            if self._active is not None:
                st = self._active.stats()
                return {"state": "recording", "records_file": self._active.path,
                        "logged_passes": st["logged_passes"], "records": st["records"]}
            if self._pending is not None:
                return {"state": "pending", "records_file": self._pending.output}
        return {"state": "armed" if not self._closed else "closed", "finished": list(self.finished)}

    # -- passes (the model's thread) ----------------------------------------
    # A pass goes to the running request's ShapeProfiler, or to none, as a
    # whole: the outermost begin chooses it (a pass boundary) and every pass
    # nested in it goes to the same one, begun and ended there too (its own
    # nesting rules then apply: nesting.py).
    def begin_pass(self, phase: Optional[str], plain: bool) -> bool:
        st = self._passes.here()
        if st.depth:
            how = nest(st, self, plain)
            if how is NESTED:
                prof = st.target
                return prof.begin_pass(phase, False) if prof is not None else False
            if how is UNENDED:
                self.end_forward_pass()
        if self.mailbox is not None:
            self.mailbox.poll(lambda data: answer(self, data))
        prof = self._profiler_for(phase)
        st.opened(self, False, plain, prof)
        return prof.begin_pass(phase, False) if prof is not None else False

    def reopen_forward_pass(self) -> bool:
        prof = self._enter()
        return prof.reopen_forward_pass() if prof is not None else False

    def begin_capture(self, key: int, phase: Optional[str]) -> bool:
        """A graph capture is recorded apart and kept (kept_captures.py),
        request or not: a request's file holds it once a pass of the
        request replays the graph. Inside this thread's open pass it is part
        of that pass, as with ShapeProfiler."""
        st = self._passes.here()
        if st.depth and (st.target is not None or st.kept is not None):
            st.depth += 1  # part of the request's pass (or of the capture kept around it)
            prof = st.target
            return prof.begin_capture(key, phase) if prof is not None else False
        keeper = self.captures.keeper(key, phase)
        if st.depth:  # inside a pass no request records (armed, idle): kept all the same
            st.depth += 1
            st.kept = (keeper, st.depth) if keeper is not None else None
        else:
            st.opened(self, False, False, keeper)
        if keeper is None:
            return False
        logged = keeper.begin_capture(key, phase)
        if not logged:  # the keeper failed (said): nothing to keep
            if st.kept is not None:
                st.kept = None
            else:
                st.target = None
            keeper.end_forward_pass()
            self.captures.discard(keeper)
        return logged

    def _enter(self) -> Optional[ShapeProfiler]:
        """A reopened pass or a capture: part of this thread's open pass, or
        one of its own with the running request (no request taken here)."""
        st = self._passes.here()
        if st.depth:
            st.depth += 1
        else:
            st.opened(self, False, False, self._active)
        return st.target

    def graph_replayed(self, key: int, n: int = 1, real: Optional[int] = None) -> bool:
        """Counts the replays in the running request; its first replay of
        a graph there writes the graph's kept capture into its file."""
        act, req = self._active, self._req
        if act is None or not act.graph_replayed(key, n, real):
            return False
        if req is not None:
            kept = self.captures.get(key)
            if kept is not None and req.adopted.get(key) is not kept:  # first, or captured again
                req.adopted[key] = kept
                self.captures.adopt(act, kept)
        return True

    def pass_size(self, size: int) -> bool:
        act = self._active
        return act.pass_size(size) if act is not None else False

    def end_forward_pass(self) -> None:
        st = self._passes.here()
        if not st.depth:
            return
        if st.kept is not None and st.kept[1] == st.depth:  # the end of a capture kept inside a pass
            keeper, st.kept = st.kept[0], None
            st.depth -= 1
            keeper.end_forward_pass()
            self.captures.ended(keeper)
            return
        st.depth -= 1
        prof = st.target
        if not st.depth:
            st.target = st.owner = None
        if prof is None:
            return
        prof.end_forward_pass()
        if not st.depth:
            if self.captures.owns(prof):
                self.captures.ended(prof)
            else:
                self._maybe_finish(prof)

    def close(self) -> None:
        self._closed = True
        self.stop()
        self.captures.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def logging(self) -> bool:
        act = self._active
        return act is not None and act.logging

    @property
    def path(self) -> Optional[str]:
        """The records file being written, if a request is running."""
        act = self._active
        return act.path if act is not None else None

    def __repr__(self) -> str:
        return f"<OnRequestProfiler rank={self.rank} {self.status()['state']}>"

    # -- internals ------------------------------------------------------------
    def _profiler_for(self, phase: Optional[str]) -> Optional[ShapeProfiler]:
        """The profiler this pass goes to: the running request's, or a
        pending one's, started now (a pass boundary)."""
        started = None
        with self._lock:
            if self._active is None and self._pending is not None:
                started, self._pending = self._pending, None
                self._active, self._req = started.profiler, started
            act, req = self._active, self._req
        if started is not None:  # the graphs the server has, used in the window or not
            self.captures.list_in(started.profiler)
        if act is not None and req is not None and req.per_phase:
            label = phase or ""
            if req.done_phases.get(label, 0) >= req.passes:
                return None  # this phase has its passes
            if req.phases is None or label in req.phases:
                req.done_phases[label] = req.done_phases.get(label, 0) + 1
        return act

    def _maybe_finish(self, prof: ShapeProfiler) -> None:
        """After a pass: closes the request's file once it has its passes."""
        req = self._req
        if req is None or self._active is not prof or not req.passes:
            return
        if req.per_phase:
            wanted = req.phases or set(BY_STAGE)
            # prefill and extend name one phase
            have = {p for p, n in req.done_phases.items() if n >= req.passes}
            done = all(any(same_phase(p, h) for h in have) for p in wanted)
        else:
            done = prof.stats()["logged_passes"] >= req.passes
        if done:
            with self._lock:
                if self._active is not prof:
                    return
                self._active, self._req = None, None
            prof.close()
            self.finished.append(prof.path)

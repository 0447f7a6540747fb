"""ShapeProfiler: the passes, the records file, the native module behind them
(from_env() and resolve_rank() are in env.py).

Nothing here may disturb the host program: after construction, every method
swallows its own failures (reported once on stderr) and profiling goes off.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import weakref
from typing import ContextManager, Iterable, Optional, Union

from ..on_import import imported_before
from . import kernels
from .config import ENV_ROCTX_LIBRARY, INT_MAX, KERNELS, parse_max_mb, phase_filter, roctx_library
from .switch import neutral_name
from .messages import say, say_once
from .nesting import NESTED, REFUSED, OpenPass, Passes, nest
from .doors import PASS_DOORS, passes_began, passes_ended, watch_passes
from .pauses import pause_while_compiling, pause_while_printing
from ..records.worker import Worker

PathLike = Union[str, "os.PathLike[str]"]

_open_profilers: "weakref.WeakSet[ShapeProfiler]" = weakref.WeakSet()


_passes = Passes()
_tls = _passes.tls
_here = _passes.here


def check_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if value > INT_MAX:  # the core counts in 64-bit integers
        raise ValueError(f"{name} must be at most {INT_MAX}, got {value}")
    return value


class PassContext:
    """forward_pass() and capture_graph() over the pass contract every
    profiler implements: begin_pass(phase, plain) and begin_capture(key,
    phase) open this thread's pass and return whether it is logged (plain:
    begun by start_forward_pass(), see nesting.py); end_forward_pass() ends
    it. start_forward_pass(phase) is begin_pass(phase, True)."""

    def start_forward_pass(self, phase: Optional[str] = None) -> bool:
        """Starts a forward pass on this thread; True if it is logged.

        Inside a with-block pass of this profiler on this thread it is part of
        that pass (its end ends nothing). While a pass that start_forward_pass()
        began here is open, that pass ends first (said once): a forward that
        raised between start and end must not swallow the passes after it.
        A pass of another profiler inside it is refused (False, said once):
        one thread logs into one file at a time, and the outer pass keeps
        logging (nesting.py)."""
        return self.begin_pass(phase, True)

    def begin_pass(self, phase: Optional[str], plain: bool) -> bool:
        raise NotImplementedError

    def begin_capture(self, key: int, phase: Optional[str]) -> bool:
        raise NotImplementedError

    def end_forward_pass(self) -> None:
        raise NotImplementedError

    def forward_pass(self, phase: Optional[str] = None) -> ContextManager[bool]:
        """with profiler.forward_pass("decode") as logged: ...

        Blocks nest: a pass begun inside an open one (a with-block or a
        start_forward_pass() on this thread) is part of it."""
        return _Pass(self, phase)

    def capture_graph(self, key: int, phase: Optional[str] = "decode") -> ContextManager[bool]:
        """with profiler.capture_graph(batch_size): capture the graph here

        Records the calls made while a graph (a CUDA graph, say) is captured:
        every replay of the graph repeats exactly them, without the
        dispatcher. key names the graph (SGLang: the padded batch size);
        replays are counted with graph_replayed(key). The records carry
        "forward_pass": 0 and "graph": key. A capture is not a forward pass:
        it counts neither as one nor against skip_warmup/log_n_passes; the
        phase filter applies. Warm-up runs before the capture belong outside
        the block (they would be counted twice), and a key names one graph:
        a graph captured again under the same key counts each call once per
        capture and replay (give a new graph a new key)."""
        return _Capture(self, key, phase)


class _Pass:
    """The with-block of forward_pass(): a class, not a contextlib
    generator, which would cost a microsecond per pass; no bound method or
    argument tuple made per pass either (a server enters one per forward).
    The pass begins at the with, as a generator's would."""
    __slots__ = ("_profiler", "_phase")

    def __init__(self, profiler, phase) -> None:
        self._profiler = profiler
        self._phase = phase

    def __enter__(self) -> bool:
        return self._profiler.begin_pass(self._phase, False)

    def __exit__(self, typ, value, tb) -> None:
        self._profiler.end_forward_pass()


class _Capture(_Pass):
    """The with-block of capture_graph()."""
    __slots__ = ("_key",)

    def __init__(self, profiler, key, phase) -> None:
        self._profiler = profiler
        self._key = key
        self._phase = phase

    def __enter__(self) -> bool:
        return self._profiler.begin_capture(self._key, self._phase)


def max_bytes(max_mb: Optional[float]) -> int:
    """The core's max_bytes for a cap in MiB: 0 for the default (None), -1
    for none (0)."""
    mb = parse_max_mb("max_mb", max_mb)
    if mb is None:
        return 0
    return -1 if mb == 0 else max(1, int(mb * (1 << 20)))


NO_NVTX = ("nvtx: this build of sgl_shapeprof has no NVTX ranges: NVTX's headers (nvtx3/nvToolsExt.h) were "
           "not found when it was built; pip install nvidia-nvtx-cu12, then reinstall sgl_shapeprof "
           "(--no-build-isolation)")


ROCTX_LIBRARY = "libroctx64.so"  # ROCm's rocTX (roctracer), which ROCm builds of torch ship in torch/lib


def ranges_of(native, nvtx: bool) -> int:
    """ShapeProfiler's nvtx as the core takes it: 0, or the ranges this
    process can push: rocTX's on a ROCm build of torch or where
    ENV_ROCTX_LIBRARY names its library (rocprof and RPD see them), else
    NVTX's; ValueError in one line when they cannot be had."""
    if not nvtx:
        return 0
    named = roctx_library()
    torch = sys.modules.get("torch")
    if named or getattr(getattr(torch, "version", None), "hip", None):
        # a ROCm torch: the loader's search, then torch's own copy
        tried = [named[1]] if named else [ROCTX_LIBRARY, os.path.join(os.path.dirname(torch.__file__), "lib",
                                                                      ROCTX_LIBRARY)]
        why = []
        for path in tried:
            try:
                native.roctx_load(path)
                return native.RANGES_ROCTX
            except OSError as e:
                why.append(str(e))
        raise ValueError(f"nvtx: cannot load rocTX's ranges ({'; '.join(why)}): "
                         + (f"{named[0]} names its library" if named else
                            f"install ROCm's roctracer, or name its {ROCTX_LIBRARY} in "
                            f"{neutral_name(ENV_ROCTX_LIBRARY)}"))
    if not native.nvtx_built():
        raise ValueError(NO_NVTX)
    return native.RANGES_NVTX


class ShapeProfiler(PassContext):
    """Records every operator call of the logged forward passes.

    ShapeProfiler(output, *, rank=0, skip_warmup=0, log_n_passes=0,
    dedupe=False, phases=None, args=False, sync=False, time=False,
    nvtx=False, worker=None, max_mb=None, exclusive=False, phases_from="phases")

    output: the records file (JSON Lines, see FORMAT.md); the summary goes
    beside it (shapes.jsonl -> shapes_summary.json). Passes 1..skip_warmup are
    not logged; then at most log_n_passes passes are (0: no limit). With
    dedupe, a call whose signature was written before is only counted (a
    signature: operation, inputs, outputs, phase, graph, and with args the
    arguments but float values; docs/FORMAT.md). phases: if given, only passes started with one of these
    phase labels are logged (and counted against log_n_passes). args: also
    record every non-tensor argument and each input tensor's strides, storage
    offset and device (the records' "args"; what `sgl-shapeprof replay` needs),
    and deduplicate on them too. sync (a debugging mode): after each recorded
    call with an input on a CUDA device, wait for the device, so that an
    asynchronous kernel failure is recorded as the error of the call that
    launched it rather than of a later synchronising call; never while a CUDA
    graph is captured; on the CPU it does nothing. time: measure each
    recorded call's wall time on its thread, from its start to its return
    (inclusive of the calls recorded within it; its kernels' device time
    only with sync): the records' "time_us", and with dedupe each
    signature's count, total, min, median and max in the summary's
    "signature_times" (docs/FORMAT.md); time="kernels": each call's GPU
    kernels too (name, grid, block, device time), through CUPTI, in the
    kernels file beside the records (shapes_kernels.jsonl; refused in one
    line, keeping the CPU times, without a CUDA device or under
    torch.profiler: recording/kernels.py). nvtx: push an NVTX range per
    recorded call, named by its operation and input shapes, so that under
    nsys each kernel sits under the shapes that launched it (a build
    without NVTX's headers refuses it: ValueError); on a ROCm build of
    torch, a rocTX range, for rocprof and RPD (ranges_of). worker: which worker of a
    deployment this is (a Worker: its TP, PP, DP and EP ranks, host, pid),
    written to the summary as "worker"; the server integrations read it from
    the server's own state. max_mb: the records file's cap in MiB (None: 1024,
    and on a RAM-backed filesystem at most a quarter of its free space; 0:
    none): recording stops before a record would pass it, and the summary
    says so (stopped_at_cap). exclusive: the file must not exist yet
    (FileExistsError), as a request's file. phases_from: the setting that
    chose phases, named when they match no pass (from_env: its variable).

    Passes are per thread: a pass records the calls of the thread that
    starts it (and of threads that inherit its dispatch state, such as
    autograd's); several threads run passes at once, each numbered as it
    began, and a thread's end_forward_pass() ends its own pass only.

    start_forward_pass() while the pass that an earlier start_forward_pass()
    began on this thread is still open (its forward raised before the end)
    ends that pass first, said once; a pass begun inside a with-block
    forward_pass() is part of it. In a forked child nothing is recorded and
    every pass says so (False).
    """

    def __init__(self, output: PathLike = "shapes.jsonl", *, rank: int = 0,
                 skip_warmup: int = 0, log_n_passes: int = 0,
                 dedupe: bool = False, phases: Optional[Iterable[str]] = None,
                 args: bool = False, sync: bool = False, time: bool = False, nvtx: bool = False,
                 worker: Optional[Worker] = None, max_mb: Optional[float] = None,
                 exclusive: bool = False, phases_from: str = "phases"):
        path = os.fspath(output)
        if not isinstance(path, str) or not path:
            raise ValueError("output must be a non-empty path")
        check_count("rank", rank)
        check_count("skip_warmup", skip_warmup)
        check_count("log_n_passes", log_n_passes)
        selected = phase_filter(phases, "phases")
        phase_list = ",".join(sorted(selected)) if selected else None
        cap = max_bytes(max_mb)
        from ._native import load

        _C = load()
        pause_while_printing()

        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"cannot write {path}: directory {parent} does not exist")
        self.rank = rank
        self.dedupe = bool(dedupe)
        self.args = bool(args)
        self.sync = bool(sync)
        if time not in (False, True, 0, 1, KERNELS):
            raise ValueError(f"time must be True, False or {KERNELS!r}, not {time!r}")
        self.time = bool(time)
        self.kernels = time == KERNELS  # each call's GPU kernels too (recording/kernels.py)
        self.kernels_path: Optional[str] = None
        self.nvtx = bool(nvtx)
        ranges = ranges_of(_C, self.nvtx)
        if worker is not None and not isinstance(worker, Worker):
            raise TypeError(f"worker must be a sgl_shapeprof Worker, not {type(worker).__name__}")
        self.worker = worker
        identity = json.dumps(worker.as_json()) if worker is not None else None
        def native(at: str):
            return _C.Profiler(at, rank=rank, skip_warmup=skip_warmup, log_n_passes=log_n_passes,
                               dedupe=self.dedupe, phases=phase_list, args=self.args, sync=self.sync,
                               worker=identity, max_bytes=cap, exclusive=bool(exclusive),
                               time=2 if self.kernels else int(self.time), nvtx=ranges)
        try:
            self._native = native(path)
        except BlockingIOError:
            # Another live profiler writes this file (two processes with the
            # same rank name, say): never share it, take a name of our own.
            stem, ext = os.path.splitext(path)
            own = f"{stem}.pid{os.getpid()}{ext}"
            say(f"{path} is in use by another process; writing {own} instead")
            self._native = native(own)
        if self.kernels:
            self.kernels_path, why = kernels.start(_C, self._native)
            if why:
                say(f"time={KERNELS}: {why}; each call's CPU time is recorded, no GPU kernel")
        self._closed = False
        self._broken = False
        self._forked = False
        self._off = False  # closed, broken or forked: passes are refused
        self._phase_filter = phase_list  # to say so at close when it matched nothing
        self._phases_seen: set = set()
        self._phases_from = phases_from  # what chose phases, for its message
        self._pid = os.getpid()     # a forked child records nothing (_after_fork)
        _open_profilers.add(self)
        watch_passes(_any_logging)
        for line in imported_before():  # a kernel library imported before its door: what it misses
            say_once(line, line)

    # -- passes -------------------------------------------------------------
    def _usable(self) -> bool:
        """Not closed, not broken, not a forked child's copy. A flag, not a
        getpid() per pass: that is a system call (_after_fork sets it)."""
        if not self._off:
            return True
        if self._forked and not self._closed:
            say_once("forked", f"{self!r} was opened by process {self._pid}: this forked "
                                f"process ({os.getpid()}) records nothing")
        return False

    # The pass calls below run once or twice per forward pass of a server:
    # kept to attribute reads and one native call (no helper calls on the
    # common path: a Python call costs about 50 ns).
    def begin_pass(self, phase: Optional[str], plain: bool) -> bool:
        if self._off:
            return self._usable()
        try:
            st = _tls.state
        except AttributeError:
            st = _here()
        if st.depth:
            how = nest(st, self, plain)
            if how is NESTED:
                return st.logged
            if how is REFUSED:
                return False
        if phase is not None and type(phase) is not str:
            phase = _label(phase)
        if self._phase_filter is not None and len(self._phases_seen) < 16:
            self._phases_seen.add(phase)
        logged = self._begin(st, self._native.pass_begin, plain, phase)
        if self.sync and logged:
            _no_sync_while_capturing()
        return logged

    def _begin(self, st: OpenPass, native_begin, plain: bool, *args) -> bool:
        """Opens this thread's pass st with native_begin (which returns a
        bool; it ends any pass open on this thread first)."""
        try:
            if _DYNAMO in _modules:
                pause_while_compiling()
            logged = native_begin(*args)
        except Exception as e:
            logged = self._begin_failed(native_begin, args, e)
            if self._broken:  # no pass is open
                return False
        st.opened(self, logged, plain)
        if logged and PASS_DOORS:  # Triton's launcher (integrations/triton/door.py)
            passes_began()
        return logged

    def _begin_failed(self, native_begin, args: tuple, e: Exception) -> bool:
        """A begin raised: again with the labels made acceptable (a NUL byte
        or a lone surrogate in one), else profiling goes off (never into
        the model). Returns whether the pass is logged."""
        if isinstance(e, ValueError):
            try:
                return native_begin(*(_label(a) if isinstance(a, str) else a for a in args))
            except Exception as again:
                e = again
        self._give_up(e)
        return False

    def _start_implicit_pass(self) -> bool:
        """The pass `sgl-shapeprof record` wraps a whole program in, until the
        program starts passes of its own on this thread (the first one ends
        it)."""
        logged = self.start_forward_pass()
        st = _here()
        st.implicit = st.owner is self
        return logged

    def reopen_forward_pass(self) -> bool:
        """Reopens the pass that ended last on this thread, under its number
        and phase (not counted again), for work that belongs to it but runs
        after its end, such as SGLang's delayed sampling. True if that pass
        is logged. End it with end_forward_pass()."""
        if not self._usable():
            return False
        st = _here()
        if st.depth and st.owner is self:  # a pass is open: nothing to reopen
            st.depth += 1
            return st.logged
        return self._begin(st, self._native.pass_reopen, False)

    # -- graph captures (CUDA graphs): capture_graph() is PassContext's ------
    def begin_capture(self, key: int, phase: Optional[str]) -> bool:
        if not self._usable():
            return False
        key = check_key(key)
        st = _here()
        if st.depth and st.owner is self:  # a pass is open: a capture inside it is not a pass of its own
            say_once("capture-in-pass", "a graph capture started inside an open pass is "
                                         "recorded as part of that pass")
            st.depth += 1
            if self.sync:  # the rest of that pass goes without it
                _refuse_sync()
            return st.logged
        if self.sync:  # a capture's begin never syncs (the native module's pass_opened)
            _refuse_sync(stop=False)
        return self._begin(st, self._native.graph_begin, False, _label(phase), key)

    def graph_replayed(self, key: int, n: int = 1, real: Optional[int] = None) -> bool:
        """Counts n replays of graph key; counted (True) inside a logged
        forward pass, so that they match the passes the records cover. The
        summary's "graphs" says, per key, captures recorded and replays
        counted, and with `real` (the size those replays really served: the
        batch before the server padded it to the graph's size) the replays
        per real size. Costs one lock, no per-operator work."""
        if not self._usable():
            return False
        size = -1 if real is None else check_key(real, "real size")
        if real is not None and size < 0:
            raise ValueError(f"real size must be at least 0, not {real}")
        try:
            return bool(self._native.graph_replay(check_key(key), n, size))
        except (TypeError, ValueError):
            raise
        except Exception as e:
            self._give_up(e)
            return False

    def adopt_capture(self, kept: "ShapeProfiler", text: bytes) -> bool:
        """Writes in the graph capture that `kept` (closed; its records file's
        text) recorded, as a logged pass of this thread replays that graph:
        an armed profiler's start-up captures (kept_captures.py). True if
        written; never raises into the server."""
        if self._off:
            return False
        try:
            return bool(self._native.graph_adopt(kept._native, text))
        except Exception as e:
            self._give_up(e)
            return False

    def graph_known(self, key: int, phase: Optional[str]) -> bool:
        """Lists graph key, captured but not recorded here, in the summary's
        "graphs" (when the phase filter takes its phase): unused if this
        recording never replays it. True if listed."""
        if self._off:
            return False
        try:
            return bool(self._native.graph_known(check_key(key), _label(phase)))
        except Exception as e:
            self._give_up(e)
            return False

    def pass_size(self, size: int) -> bool:
        """The server's batch size (requests) of this thread's open logged
        pass. If the pass ends having replayed no graph, the summary's
        "eager_sizes" counts it under its phase and this size: the batches
        that ran eagerly, which `tune --cuda-graph-bs` weighs beside the
        graphs' replays. True if noted; never raises into the server."""
        if self._off:
            return False
        try:
            return bool(self._native.pass_size(size))
        except Exception:  # not an int, say: the server's odd batch is not counted
            return False

    def end_forward_pass(self) -> None:
        """Ends this thread's pass (the innermost, when they nest)."""
        if self._off:
            return
        try:
            st = _tls.state
        except AttributeError:
            st = _here()
        if st.owner is self:
            depth = st.depth
            if depth > 1:  # the end of a nested pass: the outer one goes on
                st.depth = depth - 1
                return
            st.depth = 0
            st.owner = None
        try:
            self._native.pass_end()
        except Exception as e:
            self._give_up(e)
        passes_ended()

    # -- lifetime -----------------------------------------------------------
    def close(self) -> None:
        """Ends profiling and writes the summary. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._off = True
        _open_profilers.discard(self)
        try:
            self._native.close()
            stats = self._native.stats()
        except Exception as e:
            say(f"closing {self.path}: {e}")
            return
        finally:
            passes_ended()
            if self.kernels_path and not self._forked:  # after the last record: every id is claimed
                from ._native import load
                lost = kernels.stop(load())
                if lost:
                    say(f"{self.kernels_path}: {lost}")
        if self._phase_filter is not None and stats["passes"] and not stats["logged_passes"]:
            seen = ", ".join(sorted(repr(p) for p in self._phases_seen))
            say(f"{self._phases_from}={self._phase_filter!r} matched none of the {stats['passes']} passes "
                 f"(labels seen: {seen or 'none'}); nothing was recorded in {self.path}")

    def __enter__(self) -> "ShapeProfiler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _give_up(self, e: BaseException) -> None:
        self._broken = True
        self._off = True
        say(f"profiler failure, profiling is off from here on: {e}")

    # -- state --------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._native.path

    @property
    def summary_path(self) -> str:
        return self._native.summary_path

    @property
    def logging(self) -> bool:
        """True while a logged pass is open (on any thread)."""
        return not self._forked and bool(self._native.logging)

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> dict:
        """Counters so far: records, passes, logged_passes, dedupe_skipped,
        signatures, errors, bytes."""
        return self._native.stats()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("logging" if self.logging else "idle")
        return f"<ShapeProfiler {self.path!r} rank={self.rank} {state}>"


def check_key(key, what: str = "graph key") -> int:
    """A graph key (or size) as the native core takes it: an int in 64 bits."""
    if isinstance(key, bool) or not isinstance(key, int):
        try:
            import operator
            key = operator.index(key)  # numpy and torch integers
        except TypeError:
            raise TypeError(f"{what} must be an int, not {type(key).__name__}") from None
    if not -2 ** 63 <= key < 2 ** 63:
        raise ValueError(f"{what} {key} does not fit in 64 bits")
    return int(key)


def _label(phase) -> Optional[str]:
    """A phase label the native side can take: text without NUL bytes or
    lone surrogates (those are escaped, and said once) -- a bad label must
    not turn profiling off."""
    if phase is None:
        return None
    if not isinstance(phase, str):
        phase = str(phase)
    if "\0" not in phase:
        try:
            phase.encode("utf-8")
            return phase
        except UnicodeEncodeError:
            pass
    fixed = phase.replace("\0", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")
    say_once("label", f"phase label {phase!r} has a NUL byte or a lone surrogate; recorded as {fixed!r}")
    return fixed


def _refuse_sync(stop: bool = True) -> None:
    """No sync mode on this thread while a CUDA graph is captured (waiting for
    the device breaks a capture): until its next pass, when stop."""
    if stop:
        from ._native import load
        load().stop_sync()
    say_once("sync-capture", "sync: not while a CUDA graph is captured (waiting for the device "
                             "would break the capture): the capture's calls are recorded without it")


def _no_sync_while_capturing() -> None:
    """Sync mode is refused on a thread whose stream is capturing a CUDA
    graph by other means than capture_graph() (which never syncs)."""
    import torch
    if torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        _refuse_sync()


_modules = sys.modules
_DYNAMO = "torch._dynamo"


def _any_logging() -> bool:
    """Whether a logged pass of some open profiler is open (on any thread)."""
    return any(p.logging for p in list(_open_profilers))


@atexit.register
def _close_all_at_exit() -> None:
    for p in list(_open_profilers):
        p.close()


def _after_fork() -> None:
    """In a forked child: the parent's profilers record nothing here."""
    for p in list(_open_profilers):
        p._forked = p._off = True


os.register_at_fork(after_in_child=_after_fork)

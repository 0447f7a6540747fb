"""SGLang's /start_profile with "SHAPES" among its activities: a request to
the armed profiler of each TP rank (SGLANG_PROFILE_SHAPES=on_request), and
the answer the HTTP server and tokenizer give for it.
"""
from __future__ import annotations

import contextvars
import functools
import logging
import os
from typing import Any, Callable, Optional

from ...on_import import is_ours, mark
from ...recording.config import read_env
from ...recording.env import env_profiler
from ...recording.messages import say_once
from ...recording.on_request import OnRequestProfiler
from ...recording.requests import RequestError, request_count, request_name
from ...recording.switch import armed_on_request
from ...records.phases import BY_STAGE
from .seam import SHAPES, SHAPES_OPTIONS, START_PROFILE, STOP_PROFILE
from .workers import llm_tp_rank


# ---- /start_profile with "SHAPES" -----------------------------------------
# SGLang's runtime profiling API reaches each TP rank's scheduler as a
# ProfileReq, handled by SchedulerProfilerManager._profile. An unknown
# activity is kept and ignored there, so "SHAPES" is taken out here and
# becomes a request to this process's armed profiler; the other activities
# (CPU, GPU, MEM, ...) go on to SGLang's torch profiler over the same steps.
NOT_ARMED = (f"{SHAPES}: this server was not started with SGLANG_PROFILE_SHAPES=on_request, "
             "so it cannot record on request")


def asks_for_shapes(activities: Any) -> bool:
    """A request's activities name SHAPES, or one of its options (which
    asks for shapes as well)."""
    return any(a == SHAPES or a in SHAPES_OPTIONS for a in activities or [])


def shapes_options(activities: Any) -> dict:
    """The options a request's activities name ({"time": True, ...}); one
    not named is None: the armed profiler's own setting."""
    named = set(activities or [])
    return {option: (True if activity in named else None) for activity, option in SHAPES_OPTIONS.items()}


def _server_armed() -> bool:
    return armed_on_request()


def _armed() -> Any:
    """This process's OnRequestProfiler (SGLANG_PROFILE_SHAPES=on_request and
    a worker attached), or None."""
    p = env_profiler()
    return p if isinstance(p, OnRequestProfiler) else None


def _stage_phases(stages: Any) -> Optional[list]:
    if not stages:
        return None
    return [str(s).lower() for s in stages]


def check_request(req: Any) -> None:
    """What a SHAPES request names and counts, checked when it is taken
    (the tokenizer, before any rank sees it; each rank again): RequestError
    in one line, and nothing is created."""
    for what in ("profile_id", "profile_prefix"):
        if getattr(req, what, None):
            request_name(f"{SHAPES}: {what}", getattr(req, what))
    for what in ("num_steps", "start_step"):
        request_count(f"{SHAPES}: {what}", getattr(req, what, None))


def shapes_request(manager: Any, req: Any, rank: Optional[int]) -> str:
    """Starts a SHAPES request on this rank; returns what it did, for the
    reply. Raises RequestError with the reason."""
    check_request(req)
    cfg = read_env()
    if not cfg.on_request:
        raise RequestError(NOT_ARMED)
    armed = _armed()
    if armed is None:
        return f"SHAPES: rank {rank}: not profiled (SGLANG_PROFILE_SHAPES_RANK)"
    chosen = "output_dir" if req.output_dir else (
        f"SGLANG_TORCH_PROFILER_DIR={os.environ['SGLANG_TORCH_PROFILER_DIR']!r}"
        if os.environ.get("SGLANG_TORCH_PROFILER_DIR") else "the default")
    out_dir = os.path.expanduser(req.output_dir or os.environ.get("SGLANG_TORCH_PROFILER_DIR") or "/tmp")
    made = _missing_folders(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise RequestError(f"{SHAPES}: {chosen}: cannot create {out_dir}: {e.strerror or e}") from None
    try:
        text = _take(manager, req, armed, out_dir)
    except BaseException:
        _remove(made)  # a refused request creates nothing
        raise
    _STARTED["made"] = made
    return text


def _remove(folders: list) -> None:
    """The folders made for a request that was refused or taken back,
    deepest first, while they are empty."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            break


def _missing_folders(path: str) -> list:
    """The folders os.makedirs(path) would make, deepest first."""
    out = []
    path = os.path.abspath(path)
    while path and not os.path.exists(path):
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return out


def _take(manager: Any, req: Any, armed: OnRequestProfiler, out_dir: str) -> str:
    """shapes_request's request to the armed profiler, its folder made."""
    prefix = f"{req.profile_prefix}-" if getattr(req, "profile_prefix", None) else ""
    # SGLang's own trace names: TP-{tp}[-DP-{dp}][-PP-{pp}][-EP-{ep}]
    worker = armed.worker.name if armed.worker is not None else f"TP-{armed.rank}"
    name = f"{prefix}{req.profile_id or 'shapes'}-{worker}.shapes.jsonl"
    skip = 0
    if req.start_step:
        try:
            skip = max(0, req.start_step - int(manager.get_forward_ct()) - 1)
        except Exception:
            skip = 0
    n = req.num_steps or 0
    by_stage = bool(getattr(req, "profile_by_stage", False))
    phases = _stage_phases(getattr(req, "profile_stages", None))
    if by_stage and not n:
        raise RequestError("SHAPES: profile_by_stage needs num_steps")
    options = shapes_options(getattr(req, "activities", None))
    path = armed.request(passes=n, phases=phases or (list(BY_STAGE) if by_stage else None),
                         output=os.path.join(out_dir, name), skip=skip, per_phase=by_stage, **options)
    _STARTED["path"] = path
    what = f"{n} passes" if n and not by_stage else f"{n} passes per stage" if n else "passes until /stop_profile"
    who = f"rank {armed.rank}" + (f" ({worker})" if armed.worker is not None and armed.worker.several else "")
    how = ", ".join(option for option, on in options.items() if on)
    return f"SHAPES: {who} records {what}{f' ({how})' if how else ''} into {path}"


_STARTED: dict = {}  # this worker's last request: its file (for _beyond_the_group) and the folders made


def _beyond_the_group() -> Optional[str]:
    """The line for the workers whose answers SGLang leaves out: the reply
    carries one TP group's (every TP rank's line, gathered), while every
    pipeline stage and data-parallel replica took the same request."""
    armed = _armed()
    w = armed.worker if armed is not None else None
    if w is None or not (w.pp_size > 1 or w.dp_size > 1):
        return None
    dims = [(dim, what, w.size(dim)) for dim, what in (("pp", "PP stage"), ("dp", "DP replica"))
            if w.size(dim) > 1]
    others = [f"{what}{'s' if size > 2 else ''} {', '.join(str(r) for r in range(size) if r != w.rank(dim))}"
              f" of {size}" for dim, what, size in dims]
    mine = ", ".join(f"{what} {w.rank(dim)}" for dim, what, _ in dims)
    path = _STARTED.get("path")
    if not path:
        return None
    # this worker's own file name with its name as a pattern (an existing
    # file's name gets a .1, .2 ... suffix, so the pattern says what was used)
    glob = "-".join(f"{d.upper()}-*" for d in ("tp", "dp", "pp", "ep") if d == "tp" or w.size(d) > 1)
    head, sep, tail = os.path.basename(path).rpartition(f"-{w.name}.")
    files = f"{head}-{glob}.{tail}" if sep else os.path.basename(path)
    return (f"SHAPES: {' and '.join(others)} took the same request, but SGLang replies with one "
            f"TP group's answer ({mine}): all files are {files} in that folder, and each worker's "
            f"log says what it started")


def _gather(manager: Any, ok: bool, text: str):
    """(all ranks ok, every rank's line): the TP ranks handle a ProfileReq
    together (SGLang's own barrier there relies on it), and only TP 0's
    answer reaches the client."""
    try:
        import torch.distributed as dist
        group = getattr(manager, "dp_tp_cpu_group", None)
        if group is None or not dist.is_initialized() or dist.get_world_size(group) == 1:
            return ok, text
        pairs: list = [None] * dist.get_world_size(group)
        dist.all_gather_object(pairs, (ok, text), group=group)
        return all(p[0] for p in pairs), "\n".join(str(p[1]) for p in pairs)
    except Exception:
        return ok, text


def _with_shapes(res: Any, text: str) -> Any:
    """SGLang's own answer, with the SHAPES lines after it."""
    if res is not None:
        res.message = f"{res.message} {text}".strip()
    return res


def patch_profiler_manager_module(module: Any) -> None:
    cls = module.SchedulerProfilerManager
    profile = cls._profile
    if is_ours(profile):
        return
    from sglang.srt.managers.io_struct import ProfileReqOutput, ProfileReqType

    @functools.wraps(profile)
    def _profile(self, recv_req):
        acts = list(getattr(recv_req, "activities", None) or [])
        if recv_req.req_type == ProfileReqType.START_PROFILE and asks_for_shapes(acts):
            # every rank takes this branch (it depends on the request only)
            rank = llm_tp_rank(None)
            try:
                ok, text = True, shapes_request(self, recv_req, rank)
            except (RequestError, ValueError, OSError) as e:
                ok, text = False, str(e) if str(e).startswith(SHAPES) else f"{SHAPES}: rank {rank}: {e}"
            log = logging.getLogger("sgl_shapeprof")
            (log.info if ok else log.warning)(text)
            mine = ok
            ok, text = _gather(self, ok, text)
            if mine and not ok:  # another rank refused: all or none
                armed = _armed()
                if armed is not None and armed.cancel(_STARTED.get("path")):
                    _remove(_STARTED.get("made") or [])
                    log.warning(f"{SHAPES}: rank {rank}: request taken back, its file removed "
                                f"(another rank refused it)")
            if not ok:
                text = f"{text}\n{SHAPES}: the request was refused; no rank records it"
            more = _beyond_the_group() if ok else None
            if more:
                text = f"{text}\n{more}"
            if not ok:
                return ProfileReqOutput(success=False, message=text)
            rest = [a for a in acts if not asks_for_shapes([a])]
            if not rest:  # only SHAPES: SGLang's torch profiler stays off
                return ProfileReqOutput(success=True, message=text)
            recv_req.activities = rest
            try:
                res = profile(self, recv_req)
            except BaseException:  # SGLang's own profiler refused: ours does not run alone
                armed = _armed()
                if armed is not None:
                    armed.stop()
                raise
            if res is not None and not getattr(res, "success", True):
                armed = _armed()
                if armed is not None:
                    armed.stop()
                return res
            return _with_shapes(res, text)
        if recv_req.req_type == ProfileReqType.STOP_PROFILE:
            armed = _armed()
            if armed is not None and armed.status()["state"] in ("recording", "pending"):
                path = armed.stop()
                text = f"SHAPES: rank {armed.rank} stopped; records in {path}"
                logging.getLogger("sgl_shapeprof").info(text)
                try:  # SGLang's own profiler, if it runs too (v1 or SGLANG_PROFILE_V2)
                    res = profile(self, recv_req)
                except Exception:
                    res = None
                if res is None or not getattr(res, "success", False):
                    return ProfileReqOutput(success=True, message=text)
                return _with_shapes(res, text)
        return profile(self, recv_req)
    mark(_profile, profile)
    cls._profile = _profile


# The HTTP reply to /start_profile is a fixed "Start profiling." and a failed
# request a bare 500: the tokenizer hands the schedulers' SHAPES answer (every
# rank's line) to a middleware, which puts it into that request's reply. The
# hand-over is a holder the middleware makes for each request, in a context
# variable: the endpoint and the tokenizer call it awaits run in the
# request's own context, so concurrent requests never see each other's.
#
# The tokenizer is patched on every server with sgl_shapeprof installed, armed
# or not (the start-up hook's finder; the patch's lines): SGLang keeps an
# activity it does not know and answers "Start profiling.", so a server not
# started with on_request would take a SHAPES request and record nothing. It
# is refused there, before any scheduler sees it.
_REPLY: contextvars.ContextVar[Optional[dict]] = contextvars.ContextVar("sgl_shapeprof_reply", default=None)
_PROFILE_PATHS = (START_PROFILE, STOP_PROFILE)


def _never_raises(patch: Callable[[Any], None]) -> Callable[[Any], None]:
    """A patch of a module every server imports: a failure leaves SGLang's
    own behaviour (said once), never a server that does not start."""
    @functools.wraps(patch)
    def safe(module: Any) -> None:
        try:
            patch(module)
        except Exception as e:
            say_once(f"patch-{patch.__name__}", f"cannot patch {getattr(module, '__name__', module)} "
                                                 f"({type(e).__name__}: {e}); /start_profile answers as "
                                                 f"SGLang's own")
    return safe


def _bad_request_error() -> type:
    """A RuntimeError, as SGLang fails a profile request (what
    Engine.start_profile raises), that is also FastAPI's HTTPException: the
    HTTP reply is a 400 with the reason, in SGLang's error JSON."""
    try:
        from fastapi import HTTPException
    except ImportError:
        return RuntimeError

    class ShapesNotArmed(HTTPException, RuntimeError):
        def __init__(self, message: str):
            super().__init__(status_code=400, detail=message)

        def __str__(self) -> str:
            return str(self.detail)
    return ShapesNotArmed


@_never_raises
def patch_tokenizer_control_module(module: Any) -> None:
    cls = module.TokenizerControlMixin
    execute = cls._execute_profile
    if is_ours(execute):
        return
    from sglang.srt.managers.io_struct import ProfileReqType
    bad_request = _bad_request_error()

    @functools.wraps(execute)
    async def _execute_profile(self, req):
        shapes = getattr(req, "req_type", None) == ProfileReqType.START_PROFILE and \
            asks_for_shapes(getattr(req, "activities", None))
        if not _server_armed():
            if shapes:
                logging.getLogger("sgl_shapeprof").warning(NOT_ARMED)
                raise bad_request(NOT_ARMED)
            return await execute(self, req)   # SGLang's own
        if shapes:  # refused whole, before any rank takes it
            try:
                check_request(req)
            except RequestError as e:
                logging.getLogger("sgl_shapeprof").warning(str(e))
                raise bad_request(str(e)) from None
        result = (await self.profile_communicator(req))[0]
        message = str(getattr(result, "message", "") or "")
        holder = _REPLY.get()   # None outside an HTTP request (the Engine API)
        if SHAPES + ":" in message and holder is not None:
            holder["reply"] = (bool(result.success), message)
        if not result.success:
            raise RuntimeError(result.message)
        return result
    mark(_execute_profile, execute)
    cls._execute_profile = _execute_profile


class ShapesReply:
    """Pure ASGI middleware: /start_profile and /stop_profile get the SHAPES
    answer in their reply; every other request, and every lifespan and
    websocket scope, goes to the app untouched (SGLang's streaming and its
    client-disconnect checks stay its own)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") not in _PROFILE_PATHS:
            await self.app(scope, receive, send)
            return
        holder: dict = {}
        token = _REPLY.set(holder)
        messages: list = []   # SGLang's short reply, held until we know ours

        async def keep(message: Any) -> None:
            messages.append(message)
        error: Optional[BaseException] = None
        try:
            await self.app(scope, receive, keep)
        except RuntimeError as e:  # a failed ProfileReq
            error = e
        finally:
            _REPLY.reset(token)
        reply = holder.get("reply")
        if reply is None:
            if error is not None:
                raise error
            for message in messages:
                await send(message)
            return
        from starlette.responses import Response
        ok, text = reply
        if not ok:  # a clear error, not a bare 500
            response = Response(text + "\n", status_code=400, media_type="text/plain")
        else:
            start = next((m for m in messages if m["type"] == "http.response.start"), None)
            body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body") \
                if start is not None and start["status"] == 200 else b""
            response = Response(body.decode("utf-8", "replace") + text + "\n", status_code=200,
                                media_type="text/plain")
        await response(scope, receive, send)


@_never_raises
def patch_http_server_module(module: Any) -> None:
    app = getattr(module, "app", None)
    if app is None or getattr(app, "_sgl_shapeprof_reply", False):
        return
    app.add_middleware(ShapesReply)
    app._sgl_shapeprof_reply = True

"""vLLM's API server: the /start_profile and /stop_profile routes
(vllm.entrypoints.serve.profile.api_router), patched armed or not -- the
one piece of the plugin that acts with profiling off, and only in the API
server (the only process that imports that module). Imports neither torch
nor our native module: nothing here records.

vLLM mounts the two routes only when its profiler is configured
(--profiler-config.profiler). Then:

- armed (SHAPEPROF=on_request), no vLLM profiler: vLLM's routes are mounted
  anyway, with vLLM's development-only warning; the workers record shapes
  (start_profile.py); armed either way, the two routes take the server's
  --api-key (vLLM's own key guards only /v1 and the like), and a
  /start_profile body's shapes_time and shapes_nvtx reach every worker;
- not armed, no vLLM profiler: the routes answer 404 as before, but with one
  line saying what to set (instead of FastAPI's bare "Not Found"), in
  vLLM's error JSON;
- not armed, vLLM's profiler on: vLLM's profiler runs as before; the first
  /start_profile logs once that shapes are not recorded, and why.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from ...recording.messages import say_once
from ...recording.switch import (ENV_ENABLE, ON, ON_REQUEST, armed_on_request, env_setting, neutral_name,
                                 parse_switch, switch_value)
from ..passes import wrap_method
from .seam import NEXT_REQUEST_METHOD, SHAPES_OPTIONS, START_PROFILE, STOP_PROFILE

log = logging.getLogger("vllm.sgl_shapeprof")  # in vLLM's log, with its format

ARM = f"{neutral_name(ENV_ENABLE)}={ON_REQUEST}"
VLLM_PROFILER = "--profiler-config.profiler=torch"


def switch_now() -> str:
    """The switch as this process has it, for messages: 'SHAPEPROF is unset'
    or "SHAPEPROF='1'" (the spelling that was read)."""
    found = env_setting(ENV_ENABLE)
    if found is None or not found[1].strip():
        return f"{neutral_name(ENV_ENABLE)} is unset"
    return f"{found[0]}={found[1]!r}"


def no_profiler_message(path: str) -> str:
    return (f"{path}: this vLLM server takes no profile requests ({switch_now()}, no "
            f"--profiler-config.profiler): start it with {ARM} to record shapes (sgl_shapeprof), or "
            f"{VLLM_PROFILER} for vLLM's torch traces")


def torch_only_message() -> str:
    if parse_switch(switch_value()) == ON:  # recording every step already, not on request
        return (f"/start_profile starts vLLM's profiler only: shapes are recorded from start-up "
                f"({switch_now()}), not on request ({ARM})")
    return (f"/start_profile starts vLLM's profiler only: shapes are not recorded ({switch_now()}; "
            f"{ARM} records them too)")


def vllm_profiler_on(config: Any) -> bool:
    return config is not None and getattr(config, "profiler", None) is not None


def not_armed_router() -> Any:
    """POST /start_profile and /stop_profile answering 404 with the reason
    (vLLM's handler of HTTPException writes its error JSON)."""
    from fastapi import APIRouter, HTTPException

    router = APIRouter()

    def refuse(path: str) -> Callable:
        async def endpoint() -> None:  # no parameters: any body is accepted, then refused
            message = no_profiler_message(path)
            log.warning("%s", message)
            raise HTTPException(status_code=404, detail=message)
        endpoint.__name__ = path.strip("/") + "_not_armed"
        return endpoint

    for path in PROFILE_PATHS:
        router.add_api_route(path, refuse(path), methods=["POST"])
    return router


PROFILE_PATHS = (START_PROFILE, STOP_PROFILE)
DEV_ONLY = ("Profiler with mode '%s' is enabled in the API server. This should ONLY be used for local "
            "development!")  # vLLM's own warning, where it mounts these routes


def guard_profile_routes(app: Any) -> None:
    """vLLM's --api-key (or VLLM_API_KEY) for /start_profile and
    /stop_profile on an armed server: vLLM's own authentication middleware
    guards only /v1 and the like, and an armed server mounts these routes
    without a vLLM profiler. vLLM's own token check, on these two paths."""
    import vllm.envs as envs
    from starlette.datastructures import Headers
    from starlette.responses import JSONResponse
    from vllm.entrypoints.serve.middleware.authenticate import AuthenticationMiddleware

    args = getattr(app.state, "args", None)
    tokens = [k for k in (getattr(args, "api_key", None) or [envs.VLLM_API_KEY]) if k]
    if not tokens:
        return

    class ProfileRoutesKey(AuthenticationMiddleware):
        def __call__(self, scope, receive, send):
            path = scope.get("path", "").removeprefix(scope.get("root_path", ""))
            if scope["type"] == "http" and scope.get("method") != "OPTIONS" and path in PROFILE_PATHS \
                    and not self.verify_token(Headers(scope=scope)):
                return JSONResponse(content={"error": "Unauthorized"}, status_code=401)(scope, receive, send)
            return self.app(scope, receive, send)
    app.add_middleware(ProfileRoutesKey, tokens=tokens)


def _log_torch_only_once(module: Any) -> None:
    """vLLM's start_profile and stop_profile look engine_client(request) up
    at each call: the first /start_profile through it logs torch_only_message()."""
    def wrap(engine_client: Callable) -> Callable:
        said = []

        def engine_client_(request: Any) -> Any:
            if not said and getattr(getattr(request, "url", None), "path", "") == START_PROFILE:
                said.append(True)
                log.info("%s", torch_only_message())
            return engine_client(request)
        return engine_client_
    wrap_method(module, "engine_client", wrap)


async def shapes_options(request: Any) -> dict:
    """The shapes options a /start_profile body names ({"time": True, ...};
    vLLM's handler has read the body, and Starlette keeps it); a value that
    is not true or false: FastAPI's 400, in one line."""
    import json

    from fastapi import HTTPException

    from ...recording.requests import RequestError, request_flag
    try:
        body = json.loads(await request.body() or b"null")
    except ValueError:
        return {}   # vLLM's own handler answers for a body it cannot read
    if not isinstance(body, dict):
        return {}
    try:
        return {option: request_flag(field, body[field]) for field, option in SHAPES_OPTIONS.items()
                if body.get(field) is not None}
    except RequestError as e:
        raise HTTPException(status_code=400, detail=str(e)) from None


class _HandsOverOptions:
    """vLLM's engine client for one /start_profile: its start_profile first
    hands the body's shapes options to every worker (NEXT_REQUEST_METHOD),
    then makes vLLM's own request, one request at a time; a start that
    fails takes them back. Everything else is the client's own."""

    def __init__(self, client: Any, request: Any, lock: Any):
        self._client, self._request, self._lock = client, request, lock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def start_profile(self, *args: Any, **kwargs: Any) -> Any:
        options = await shapes_options(self._request)
        if not options:
            return await self._client.start_profile(*args, **kwargs)
        async with self._lock:
            try:
                await self._client.collective_rpc(NEXT_REQUEST_METHOD, kwargs=options)
            except Exception as e:
                from fastapi import HTTPException
                raise HTTPException(status_code=500, detail=f"shapes options {sorted(options)}: the workers did "
                                                            f"not take them ({type(e).__name__}: {e})") from None
            try:
                return await self._client.start_profile(*args, **kwargs)
            except BaseException:
                try:  # the refusal is what the client must see
                    await self._client.collective_rpc(NEXT_REQUEST_METHOD)
                except Exception as e:
                    log.warning("shapes: cannot take the options back from every worker: %s", e)
                raise


def _hand_over_options(module: Any) -> None:
    """vLLM's start_profile looks engine_client(request) up at each call:
    for /start_profile it is _HandsOverOptions around it."""
    import asyncio
    lock = asyncio.Lock()

    def wrap(engine_client: Callable) -> Callable:
        def engine_client_(request: Any) -> Any:
            client = engine_client(request)
            if getattr(getattr(request, "url", None), "path", "") != START_PROFILE:
                return client
            return _HandsOverOptions(client, request, lock)
        return engine_client_
    wrap_method(module, "engine_client", wrap)


def patch_profile_router_module(module: Any) -> None:
    """vllm.entrypoints.serve.profile.api_router's attach_router, after
    vLLM's own: see the module's docstring. Any failure of ours: vLLM's own
    routes (said once)."""
    def wrap(attach: Callable) -> Callable:
        def attach_router(app: Any) -> None:
            attach(app)
            try:
                vllm_on = vllm_profiler_on(getattr(getattr(app.state, "args", None), "profiler_config", None))
                if armed_on_request():
                    guard_profile_routes(app)
                    _hand_over_options(module)
                    if not vllm_on:
                        log.warning(DEV_ONLY, f"shapes ({ARM}, sgl_shapeprof)")
                        app.include_router(module.router)
                elif not vllm_on:
                    app.include_router(not_armed_router())
                else:
                    _log_torch_only_once(module)
            except Exception as e:
                say_once("vllm-routes", f"cannot patch vLLM's /start_profile ({type(e).__name__}: {e}); "
                                        f"it answers as vLLM's own")
        return attach_router
    wrap_method(module, "attach_router", wrap)

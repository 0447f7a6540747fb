"""Kernel libraries' API calls as records (docs/FORMAT.md, "Kernel library
calls"): the calls that never reach the dispatcher, seen at the library's
own API boundary. A library's door (integrations/<library>/: its public
API's decorator, say) wraps each API function with api_door(); a call made
in a logged pass is then one record, "<library>:<module>.<qualname>", with
its tensors by parameter name (lists and tuples of tensors too), its other
values in "args", and its output tensors, or the exception it raised.

One call, one record: the outermost door is the record. While an API call
runs, its thread records nothing else (its operators, its Triton launches,
the library's inner API calls are its own work), as a TorchDispatchMode
sees a custom op and not the operators inside it. The record is begun
before the call runs (its inputs on disk first: a call that kills the
process leaves them) and ended when it returns or raises.

Under torch.profiler, a recorded call is a range of the trace named as its
record (record_function): the kernels it launches sit under it, which is
how the GPU check's coverage tells them explained.

Outside logged passes a door costs one lookup and one native call; before
any profiler loaded the native module, one lookup.
"""
from __future__ import annotations

import enum
import functools
import inspect
import operator
import sys
from typing import Callable, Dict, Optional, Tuple

from .messages import say_once

MISSING = object()  # a parameter not given, without default (the native side knows it)
_SKIPPED = ("self", "cls")  # a method's object: not a value of the call
OTHER = "other_args"  # keywords the function does not name, as text
# On a door (and on what a library compiled, where its door names it): the
# operation its calls are recorded as.
OPERATION_ATTR = "_shapeprof_operation"
# On a library's loaded module: its functions' doors, by name (made at
# their first recorded call).
MODULE_DOORS_ATTR = "_shapeprof_doors"
_PLAIN = (bool, int, float, str, type(None))
_types: list = []  # given to the native side once (native_types)
_modules = sys.modules
# torch.autograd._profiler_enabled, set with the types (native_types): while
# torch.profiler runs, a recorded call is a range of its trace, the long way
_profiler_on: Callable[[], bool] = bool
_off = False  # recording an API call failed once: API calls are not recorded again


class _Api:
    """An API function's parameters (their defaults its own) and the key its
    calls are filed under in the core."""
    __slots__ = ("operation", "params", "index", "defaults", "positional", "arg_names", "key",
                 "skip_first", "native")

    def __init__(self, fn: Optional[Callable], operation: str, n_positional: int = 0) -> None:
        if fn is None:  # a compiled function: n_positional values, named by position
            fn = _by_position(n_positional)
        params = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            params.append(p)
        self.skip_first = bool(params) and params[0].name in _SKIPPED
        if self.skip_first:
            params = params[1:]
        self.params = tuple(p.name for p in params)
        # how many can be given by position (keyword-only ones follow)
        self.positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        self.index = {name: i for i, name in enumerate(self.params)}
        self.defaults = tuple(MISSING if p.default is inspect.Parameter.empty else p.default
                              for p in params)
        self.arg_names = self.params + (OTHER,)
        self.operation, self.key = operation_key(operation, self.arg_names)
        # what the native door_call reads it by, in one tuple
        self.native = (self.key, self.operation, self.arg_names, self.defaults, self.index, self.positional,
                       self.skip_first)


# operation name -> (its values' names, its key: kept alive here, the core
# holds its address). One key per name: the summary counts by name.
_keys: Dict[str, Tuple[tuple, object]] = {}


def operation_key(operation: str, arg_names: tuple) -> Tuple[str, object]:
    """The operation's name and key; another function of the same name with
    other parameters is another operation, "<name>#2" and on."""
    name, n = operation, 2
    while name in _keys and _keys[name][0] != arg_names:
        name = f"{operation}#{n}"
        n += 1
    if name not in _keys:
        _keys[name] = (arg_names, object())
    return name, _keys[name][1]


def _by_position(n: int) -> Callable:
    """A function of n positional parameters arg0 ... arg<n-1>: what a
    compiled function without parameter names is described by."""
    params = [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(n)]

    def by_position(*args):
        pass
    by_position.__signature__ = inspect.Signature(params)
    return by_position


def operation_name(library: str, fn: Callable, package: Optional[str] = None) -> str:
    """'<library>:<module>.<qualname>', the module without the library's
    package ("flashinfer:decode.trtllm_batch_decode_with_kv_cache")."""
    module = getattr(fn, "__module__", None) or "?"
    package = package or library
    if module.startswith(package + "."):
        module = module[len(package) + 1:]
    return f"{library}:{module}.{getattr(fn, '__qualname__', None) or fn.__name__}"


def api_door(fn: Callable, operation: str, described: Optional[Callable] = None,
             written_as: Optional[Callable[[object], object]] = None) -> Callable:
    """fn, recorded as `operation` when called in a logged pass. described:
    the function whose parameters name the values (fn's own by default; a
    library's decorator may hand back a wrapper taking *args). written_as:
    what a value is written as (a library's tensor, as the torch tensor it
    was made from), the value itself when it has nothing else; fn is
    called with the values themselves."""
    api: list = []  # its _Api, made at the first recorded call

    @functools.wraps(fn)
    def door(*args, **kwargs):
        native = _modules.get("sgl_shapeprof._C")
        mode = 0 if native is None or _off else native.logging_flags()
        if not mode:
            return fn(*args, **kwargs)
        if not api:
            a = _api(native, described or fn, operation)
            if a is None:
                return fn(*args, **kwargs)
            api.append(a)
        if written_as is not None:
            shown = tuple(written_as(v) for v in args)
            shown_kw = {k: written_as(v) for k, v in kwargs.items()}
            if any(s is not v for s, v in zip(shown, args)) or \
                    any(shown_kw[k] is not v for k, v in kwargs.items()):
                return _call(native, mode, api[0], fn, args, kwargs, (shown, shown_kw))
        return _call(native, mode, api[0], fn, args, kwargs)

    setattr(door, OPERATION_ATTR, operation)
    return door


def positional_door(fn: Callable, operation: str) -> Callable:
    """fn, a compiled function whose parameters have no names (a tvm-ffi
    Function), recorded as `operation` when called in a logged pass: its
    values named by position, arg0, arg1, ... A call with another number of
    values is another operation, "<operation>#2" and on (operation_key)."""
    apis: Dict[int, _Api] = {}

    def door(*args, **kwargs):
        native = _modules.get("sgl_shapeprof._C")
        mode = 0 if native is None or _off else native.logging_flags()
        if not mode:
            return fn(*args, **kwargs)
        a = apis.get(len(args))
        if a is None:
            a = _api(native, None, operation, len(args))
            if a is None:
                return fn(*args, **kwargs)
            apis[len(args)] = a
        return _call(native, mode, a, fn, args, kwargs)

    setattr(door, OPERATION_ATTR, operation)
    door.__wrapped__ = fn
    return door


# -- kernel launches (a launching library's door: Triton's, Inductor's) --------

# Launch options kept as their own arguments; any other keyword that is not
# a kernel parameter goes into "launch_options", as text.
# A timed profiler's logging flag (sp_core.h's SP_LOGGING_TIME): a launch,
# recorded after it ran, is timed by its door (time.perf_counter_ns, the
# core's clock) and its span given to _C.launch.
LOGGING_TIME = 4
# ...and its GPU kernels (SP_LOGGING_KERNELS): the door pushes CUPTI's id
# around the launch (_C.cupti_region_begin) and gives it to _C.launch after
# the span, so that the kernels it ran are its record's.
LOGGING_KERNELS = 8
OPTIONS = ("grid", "num_warps", "num_stages", "num_ctas", "maxnreg", "launch_options")
# the launching library's own value types, given by its door when it is put
# on (launch_types): its dtype class, written by name, and the module of its
# compile-time constants' wrapper class ("constexpr"), written as their value
_launch_dtype: Optional[type] = None
_constexpr_module = "\0"  # none: no module's name starts with it


def launch_types(dtype: Optional[type], constexpr_module: str) -> None:
    global _launch_dtype, _constexpr_module
    _launch_dtype, _constexpr_module = dtype, constexpr_module


def launch_value(v):
    """A non-tensor value as the core takes it: None, bool, int, float, str,
    a tuple of ints; a launching library's constexpr by its value, its dtypes
    (and torch's) by name ("bf16"); anything else is written as its type's
    name (never str() of an unknown object: a TensorDescriptor's would copy
    its tensor from the device)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if _launch_dtype is not None and isinstance(v, _launch_dtype):
        return str(v)
    cls = type(v)
    if cls.__name__ == "constexpr" and (cls.__module__ or "").startswith(_constexpr_module):
        return launch_value(v.value)
    if isinstance(v, (tuple, list)) and not any(isinstance(x, bool) for x in v):
        try:  # ints of any kind (numpy's: a grid computed with them)
            return tuple(operator.index(x) for x in v)
        except TypeError:
            pass
    if cls.__name__ == "dtype" and cls.__module__ == "torch":
        return str(v)
    return v


# -- doors put on only while a logged pass is open (Triton's launcher) ---------

# (enter, leave) of each: enter() when a logged pass begins, leave(logging)
# when one ends (logging(): whether any is still open). A door registers
# when its library is imported (its seam's doors); recording/profiler.py
# calls them. A list: its truth is what a pass's begin tests.
PASS_DOORS: list = []
_logging: Optional[Callable[[], bool]] = None


def pass_door(enter: Callable[[], None], leave: Callable[[Callable[[], bool]], None]) -> None:
    """Registers a door put on while a logged pass is open; on now if one is."""
    if (enter, leave) not in PASS_DOORS:
        PASS_DOORS.append((enter, leave))
    if _logging is not None and _logging():
        enter()


def watch_passes(logging: Callable[[], bool]) -> None:
    """A profiler opened: logging() says whether a logged pass is open."""
    global _logging
    _logging = logging


def passes_began() -> None:
    for enter, _ in PASS_DOORS:
        enter()


def passes_ended() -> None:
    if _logging is not None:
        for _, leave in PASS_DOORS:
            leave(_logging)


def native_types(native) -> None:
    """The types values are told by natively (door_types), given once:
    before any call is described there (an API call's, a launch's)."""
    global _profiler_on
    if not _types:
        torch = sys.modules["torch"]
        _types.append(native.door_types(torch.Tensor, enum.Enum, torch.dtype, MISSING))
        _profiler_on = torch.autograd._profiler_enabled


def _api(native, fn: Optional[Callable], operation: str, n_positional: int = 0) -> Optional[_Api]:
    """The function's _Api, or None (said once; doors record no more) when
    it cannot be made (a signature inspect cannot read)."""
    global _off
    try:
        native_types(native)
        return _Api(fn, operation, n_positional)
    except Exception as e:
        _off = True
        say_once("door-record", f"cannot record a kernel library's API call ({type(e).__name__}: "
                                f"{e}); such calls are recorded no further")
        return None


def _call(native, mode: int, a: _Api, fn: Callable, args: tuple, kwargs: dict, shown: Optional[tuple] = None):
    """fn(*args, **kwargs), its record begun before and ended after: in one
    native call (door_call), or the long way when its values do not bind
    so simply, torch.profiler runs (the call is then a range of its trace)
    or values are written as others (shown: (args, kwargs) to write)."""
    if shown is None and not _profiler_on():
        out = native.door_call(a.native, fn, args, kwargs or None, mode)
        if out is not MISSING:
            return out
    torch = sys.modules["torch"]
    if not _begin(native, mode, a, *(shown or (args, kwargs))):
        return fn(*args, **kwargs)
    paused = native.pause_thread()  # its own work is not recorded apart
    try:
        if torch.autograd._profiler_enabled():  # torch.profiler on: the call is a range of its trace
            with torch.autograd.profiler.record_function(a.operation):
                out = fn(*args, **kwargs)
        else:
            out = fn(*args, **kwargs)
    except BaseException as e:
        if paused:
            native.resume_thread()
        _end(native, None, e)
        raise
    if paused:
        native.resume_thread()
    _end(native, out, None)
    return out


def _begin(native, mode: int, a: _Api, args: tuple, kwargs: dict) -> bool:
    """Begins the call's record, its values bound to the parameters and read
    natively (call_begin_args). Keywords the function does not name and
    positionals past its parameters are written as text, in other_args."""
    global _off
    try:
        begun = native.call_begin_args(a.key, a.operation, a.arg_names, a.defaults, a.index,
                                       a.positional, a.skip_first, args, kwargs or None, mode)
        if begun is None:  # they do not bind so simply: what it names, and the rest as text
            n = a.positional + a.skip_first
            named = {k: v for k, v in kwargs.items() if k in a.index}
            other = [f"{k}={_text(v)}" for k, v in kwargs.items() if k not in a.index]
            other += [_text(v) for v in args[n:]]
            begun = native.call_begin_args(a.key, a.operation, a.arg_names, a.defaults, a.index,
                                           a.positional, a.skip_first, args[:n], named or None, mode,
                                           ", ".join(other))
        return bool(begun)
    except Exception as e:
        _off = True
        say_once("door-record", f"cannot record a kernel library's API call ({type(e).__name__}: "
                                f"{e}); such calls are recorded no further")
        return False


def _end(native, out, error: Optional[BaseException]) -> None:
    global _off
    try:
        if error is not None:
            try:
                message = str(error)
            except Exception:
                message = f"<str() of {type(error).__name__} raised>"
            native.call_end_obj(None, (type(error).__name__, message.encode("utf-8", "surrogatepass")))
        else:
            native.call_end_obj(out)
    except Exception as e:
        _off = True
        say_once("door-record", f"cannot record a kernel library's API call ({type(e).__name__}: "
                                f"{e}); such calls are recorded no further")
        try:
            native.call_end_obj(None)  # the call begun is ended all the same
        except Exception:
            pass


def _value(v):
    """A value that is not a tensor: None, bool, int, float, str, a tuple
    of ints; an enum by its class and member name, a dtype by name; any
    other value is written as its type's name (never str() of an unknown
    object: it might copy a tensor from the device)."""
    if v.__class__ in _PLAIN:
        return v
    if isinstance(v, enum.Enum):  # an IntEnum too: by name, not its number
        return f"{type(v).__name__}.{v.name}"
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(int(x) for x in v)
    cls = type(v)
    if cls.__name__ == "dtype" and cls.__module__ == "torch":
        return str(v)
    return v


def _text(v) -> str:
    v = _value(v)
    return repr(v) if isinstance(v, (type(None), bool, int, float, str, tuple)) else type(v).__name__

"""CuTe DSL's compiled kernels as records: a call of what `cute.compile`
returned, in a logged pass, is one record "cute:<module>.<qualname>" of the
function (or the callable kernel object's class) that was compiled, filed
as a kernel library's API call (recording/doors.py; FORMAT.md, "Kernel
library calls"): its values by the compiled function's runtime parameter
names (its Constexpr ones were fixed at compile: they are not values of
the call), tensors in `inputs`. A tensor made by `from_dlpack` is a CuTe
tensor, not a torch one: `from_dlpack` keeps the torch tensor it was made
from on it, and the call is written with that tensor (its shape, dtype and
strides as torch has them: packed FP4 as its storage, not CuTe's logical
view); one made from anything else is written by its type's name, as any
value the recorder does not know. Inside FlashInfer's API door a CuTe call
is that call's work, not a record.

Outside logged passes a call costs one lookup and one native call more.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
from typing import Callable, Optional

from ...on_import import is_ours, mark
from ...recording.doors import MODULE_DOORS_ATTR, OPERATION_ATTR, api_door, positional_door
from .seam import PREFIX as LIBRARY

_NAME = OPERATION_ATTR  # set at compile on what cute.compile returned
_DOOR = "_shapeprof_door"  # a compiled function's door, made at its first recorded call
_FILE = "_shapeprof_file"  # a loaded module's object file name
_SOURCE = "_shapeprof_source"  # a from_dlpack tensor's torch tensor (the DLPack capsule holds it anyway)


def operation_of(func) -> str:
    """'cute:<module>.<qualname>' of what was compiled: a function, a bound
    method's function, or a callable kernel object's class."""
    target = getattr(func, "__func__", func)  # a bound method
    if not (inspect.isfunction(target) or inspect.isclass(target)):
        target = type(func)  # a kernel object (FlashInfer's RMSNormKernel)
    module = getattr(target, "__module__", None) or "?"
    return f"{LIBRARY}:{module}.{getattr(target, '__qualname__', None) or target.__name__}"


def patch_compiler(module) -> None:
    """What cute.compile returns is named by what it compiled."""
    cls = getattr(module, "CompileCallable", None)
    original = getattr(cls, "_compile", None) if cls is not None else None
    if original is None or is_ours(original):
        return

    @functools.wraps(original)
    def _compile(self, func, *args, **kwargs):
        result = original(self, func, *args, **kwargs)
        # on its execution arguments too, which a function bound to a device
        # (.to(): a JitExecutor) shares through its module
        for named in (result, getattr(result, "execution_args", None)):
            try:
                setattr(named, _NAME, operation_of(func))
            except Exception:  # an object without attributes of its own: named by its symbol
                pass
        return result

    mark(_compile, original)
    cls._compile = _compile


def patch_runtime(module) -> None:
    """from_dlpack keeps, on the CuTe tensor it makes, the torch tensor it
    was made from: a call is written with it (written_as)."""
    original = getattr(module, "from_dlpack", None)
    if original is None or is_ours(original):
        return

    @functools.wraps(original)
    def from_dlpack(tensor_dlpack, *args, **kwargs):
        made = original(tensor_dlpack, *args, **kwargs)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(tensor_dlpack, torch.Tensor):
            own = getattr(made, "__dict__", None)
            if own is not None:
                own[_SOURCE] = tensor_dlpack
        return made

    mark(from_dlpack, original)
    module.from_dlpack = from_dlpack


def written_as(value):
    """A CuTe tensor from from_dlpack: the torch tensor it was made from."""
    own = getattr(value, "__dict__", None)
    return own.get(_SOURCE, value) if own else value


def _signed(signature: inspect.Signature) -> Callable:
    """A function with this signature: what a compiled function's values
    are named by."""
    def described(*args, **kwargs):
        pass
    described.__signature__ = signature.replace(return_annotation=inspect.Signature.empty)
    return described


def _patch_call(cls, names: Callable[[object], Optional[Callable]], named: Callable[[object], object]) -> None:
    """cls.__call__ records the calls of logged passes, through a door made
    per compiled function (names(obj): the function its values are named
    by; named(obj): the object its operation name was set on)."""
    original = cls.__dict__.get("__call__")
    if original is None or is_ours(original):
        return

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        native = sys.modules.get("sgl_shapeprof._C")
        if native is None or not native.logging_flags():
            return original(self, *args, **kwargs)
        own = getattr(self, "__dict__", None)
        door = own.get(_DOOR) if own is not None else None
        if door is None:
            operation = getattr(named(self), _NAME, None) or \
                f"{LIBRARY}:{getattr(self, 'function_name', None) or type(self).__name__}"
            door = api_door(functools.partial(original, self), operation, names(self), written_as)
            if own is not None:
                own[_DOOR] = door
        return door(*args, **kwargs)

    mark(__call__, original)
    cls.__call__ = __call__


def _runtime_signature(execution_args) -> Optional[Callable]:
    signature = getattr(execution_args, "signature", None)
    return _signed(signature) if isinstance(signature, inspect.Signature) else None


def patch_jit_executor(module) -> None:
    """A compiled function called as it is, or bound to a device (.to())."""
    compiled = getattr(module, "JitCompiledFunction", None)
    if compiled is not None:
        _patch_call(compiled, lambda f: _runtime_signature(getattr(f, "execution_args", None)), lambda f: f)
    executor = getattr(module, "JitExecutor", None)
    if executor is not None:
        _patch_call(executor,
                    lambda f: _runtime_signature(getattr(getattr(f, "jit_module", None), "execution_args", None)),
                    lambda f: getattr(getattr(f, "jit_module", None), "execution_args", None))


def patch_tvm_ffi_provider(module) -> None:
    """A function compiled with tvm-ffi: its keyword wrapper names what the
    call takes; without runtime parameters it takes nothing."""
    with_kwargs = getattr(module, "TVMFFIJitCompiledFunctionWithKwargs", None)
    if with_kwargs is not None:
        _patch_call(with_kwargs, lambda f: getattr(f, "_kwargs_wrapper", None), lambda f: f)
    plain = getattr(module, "TVMFFIJitCompiledFunction", None)
    if plain is not None:
        _patch_call(plain, lambda f: _signed(inspect.Signature()), lambda f: f)


def patch_binary_module(module) -> None:
    """A module exported ahead of time and loaded with tvm-ffi hands back
    plain tvm-ffi functions: those come in a door, values by position
    ("cute:<object file>.<function>"); the others are compiled functions,
    whose class's door sees them."""
    cls = getattr(module, "ExternalBinaryModule", None)
    original = getattr(cls, "__getattr__", None) if cls is not None else None
    init = cls.__dict__.get("__init__") if cls is not None else None
    compiled = getattr(sys.modules.get("cutlass.base_dsl.jit_executor"), "JitCompiledFunction", None)
    if original is None or init is None or is_ours(original):
        return

    @functools.wraps(init)
    def __init__(self, file_path, *args, **kwargs):
        init(self, file_path, *args, **kwargs)
        self.__dict__[_FILE] = os.path.splitext(os.path.basename(str(file_path)))[0]

    @functools.wraps(original)
    def __getattr__(self, name):
        func = original(self, name)
        if compiled is not None and isinstance(func, compiled):
            return func
        doors = self.__dict__.setdefault(MODULE_DOORS_ATTR, {})
        door = doors.get(name)
        if door is None:
            door = doors[name] = positional_door(func, f"{LIBRARY}:{self.__dict__.get(_FILE, 'module')}.{name}")
        return door

    mark(__getattr__, original)
    mark(__init__, init)
    cls.__getattr__ = __getattr__
    cls.__init__ = __init__

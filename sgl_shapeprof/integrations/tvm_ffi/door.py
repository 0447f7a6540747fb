"""tvm-ffi modules' functions as records: Module.get_function hands back
each function in a door (recording/doors.py's positional_door): a call in
a logged pass is one record, "tvm_ffi:<library>.<function>", its values by
position (arg0, arg1, ...: a compiled function's parameters have no names);
<library> is the loaded file's name without its extension. Inside another
door (FlashInfer's API) it is that call's work, not a record of its own."""
from __future__ import annotations

import functools
import os

from ...on_import import is_ours, mark
from ...recording.doors import MODULE_DOORS_ATTR, positional_door
from .seam import PREFIX as LIBRARY

_NAME = "_shapeprof_library"  # set on a module by load_module: its file's name


def patch_module_module(module) -> None:
    """tvm_ffi.module was just imported: its loader tags the modules it
    loads, and their functions come in doors."""
    cls = getattr(module, "Module", None)
    load = getattr(module, "load_module", None)
    if cls is None or load is None or is_ours(cls.get_function):
        return
    original_get = cls.get_function

    @functools.wraps(original_get)
    def get_function(self, name, *args, **kwargs):
        func = original_get(self, name, *args, **kwargs)  # raises for a name it does not have
        try:
            own = self.__dict__
        except AttributeError:  # a module without a __dict__
            own = {}
        # one door a function: tvm-ffi hands back a new Function object each
        # time it is asked (item access: module["f"]), so by what was asked
        doors = own.setdefault(MODULE_DOORS_ATTR, {})
        asked = (name, *args, *sorted(kwargs.items()))  # query_imports may find another
        door = doors.get(asked)
        if door is None:
            door = doors[asked] = positional_door(func, f"{LIBRARY}:{own.get(_NAME) or 'module'}.{name}")
        return door

    @functools.wraps(load)
    def load_module(path, *args, **kwargs):
        mod = load(path, *args, **kwargs)
        try:
            mod.__dict__[_NAME] = os.path.splitext(os.path.basename(os.fspath(path)))[0]
        except Exception:  # a module without a __dict__: named "module"
            pass
        return mod

    mark(get_function, original_get)
    mark(load_module, load)
    cls.get_function = get_function
    module.load_module = load_module

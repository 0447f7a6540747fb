"""The start-up hook's installer (`sgl-shapeprof hook install|uninstall|status`).

The hook is two files in site-packages: the .pth line
(sgl_shapeprof_autohook.pth), which imports the module beside it
(sgl_shapeprof_autohook.py: standard library only, it imports nothing of
ours unless SGLANG_PROFILE_SHAPES is set to something other than 0). A
wheel install puts both there already; this does it for editable installs
(pip install -e) or another environment.
"""
from __future__ import annotations

import os
import shutil

PTH_NAME = "sgl_shapeprof_autohook.pth"  # the name installed hooks have: kept
MODULE_NAME = "sgl_shapeprof_autohook.py"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PTH_SOURCE = os.path.join(_PACKAGE, PTH_NAME)
# top-level, beside the package: the checkout's root, or site-packages
MODULE_SOURCE = os.path.join(os.path.dirname(_PACKAGE), MODULE_NAME)


def default_site_dir() -> str:
    import sysconfig
    return sysconfig.get_paths()["purelib"]


def hook_path(site_dir: str) -> str:
    return os.path.join(site_dir, PTH_NAME)


# the module's lines install writes (its source leaves them empty), each
# "NAME = ()  # install.py writes it"
WRITTEN = ("SWITCHES", "UNARMED_TARGETS")
_UNWRITTEN = "()  # install.py writes it"


def written_values() -> "dict[str, tuple]":
    """What the module is given, from the owners: the switch in its neutral
    spelling and its own (recording/switch.py), the registry's unarmed hooks."""
    from ..recording.switch import ENV_ENABLE, neutral_name
    from .registry import hooks
    return {"SWITCHES": (neutral_name(ENV_ENABLE), ENV_ENABLE), "UNARMED_TARGETS": tuple(hooks(unarmed=True))}


def module_text(source: str = MODULE_SOURCE) -> str:
    """The hook's module as installed: its source with WRITTEN's values."""
    with open(source, encoding="utf-8") as f:
        text = f.read()
    for name, value in written_values().items():
        line = f"{name} = {_UNWRITTEN}"
        if text.count(line) != 1:
            raise ValueError(f"{source}: no line {line!r} to write {name} into")
        text = text.replace(line, f"{name} = {value!r}  # written by install.py from its owner")
    return text


def write_module(path: str) -> None:
    """The hook's module, written (module_text) to path."""
    text = module_text()
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def install(site_dir: str) -> str:
    """Writes the hook's module and copies its line into site_dir (the line
    last: it imports the module); the line's path. OSError on failure."""
    target = hook_path(site_dir)
    module = os.path.join(site_dir, MODULE_NAME)
    if os.path.abspath(module) != MODULE_SOURCE:
        write_module(module)
    shutil.copyfile(PTH_SOURCE, target)
    return target


def uninstall(site_dir: str) -> bool:
    """Removes the line, then its module; False if the line was not there."""
    target = hook_path(site_dir)
    if not os.path.exists(target):
        return False
    os.unlink(target)
    module = os.path.join(site_dir, MODULE_NAME)
    if os.path.exists(module) and os.path.abspath(module) != MODULE_SOURCE:
        os.unlink(module)
    return True

"""The start-up hook's installer (`sgl-shapeprof hook install|uninstall|status`).

The hook is two files in site-packages: the .pth line
(sgl_shapeprof_autohook.pth), which imports the module beside it
(sgl_shapeprof_autohook.py: standard library only, it imports nothing of
ours unless SGLANG_PROFILE_SHAPES is set to something other than 0) and
calls its start() with the switch's names and the unarmed targets, written
here from their owners (recording/switch.py, the registry's seams). A
wheel install puts both there already (setup.py writes the line with
pth_text); this does it for editable installs (pip install -e) or another
environment.
"""
from __future__ import annotations

import os
import shutil

PTH_NAME = "sgl_shapeprof_autohook.pth"  # the name installed hooks have: kept
MODULE_NAME = "sgl_shapeprof_autohook.py"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# top-level, beside the package: the checkout's root, or site-packages
MODULE_SOURCE = os.path.join(os.path.dirname(_PACKAGE), MODULE_NAME)


def default_site_dir() -> str:
    import sysconfig
    return sysconfig.get_paths()["purelib"]


def hook_path(site_dir: str) -> str:
    return os.path.join(site_dir, PTH_NAME)


def written_values() -> "dict[str, tuple]":
    """What the line gives the module's start(), from the owners: the switch
    in its neutral spelling and its own (recording/switch.py), the
    registry's unarmed hooks' modules."""
    from ..recording.switch import ENV_ENABLE, neutral_name
    from .registry import hooks
    return {"SWITCHES": (neutral_name(ENV_ENABLE), ENV_ENABLE), "UNARMED_TARGETS": tuple(hooks(unarmed=True))}


def pth_text() -> str:
    """The .pth's one line (site runs a line that starts with `import`)."""
    module = MODULE_NAME[:-len(".py")]
    v = written_values()
    return f"import {module}; {module}.start({v['SWITCHES']!r}, {v['UNARMED_TARGETS']!r})\n"


def write_pth(path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(pth_text())


def install(site_dir: str) -> str:
    """Copies the hook's module and writes its line into site_dir (the line
    last: it imports the module); the line's path. OSError on failure."""
    target = hook_path(site_dir)
    module = os.path.join(site_dir, MODULE_NAME)
    if os.path.abspath(module) != MODULE_SOURCE:
        shutil.copyfile(MODULE_SOURCE, module)
    write_pth(target)
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

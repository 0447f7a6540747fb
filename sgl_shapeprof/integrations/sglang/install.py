"""The start-up hook's installer (`sgl-shapeprof hook install|uninstall|status`).

A wheel install puts the hook's .pth line (sgl_shapeprof_autohook.pth) into
site-packages already; this does it for editable installs (pip install -e)
or another environment. The line costs a dictionary lookup at start-up and
imports nothing unless SGLANG_PROFILE_SHAPES is set to something other than
0 (see startup_hook.py).
"""
from __future__ import annotations

import os
import shutil

PTH_NAME = "sgl_shapeprof_autohook.pth"  # the name installed hooks have: kept
PTH_SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), PTH_NAME)


def default_site_dir() -> str:
    import sysconfig
    return sysconfig.get_paths()["purelib"]


def hook_path(site_dir: str) -> str:
    return os.path.join(site_dir, PTH_NAME)


def install(site_dir: str) -> str:
    """Copies the hook's line into site_dir; its path. OSError on failure."""
    target = hook_path(site_dir)
    shutil.copyfile(PTH_SOURCE, target)
    return target


def uninstall(site_dir: str) -> bool:
    """Removes it; False if it was not there."""
    target = hook_path(site_dir)
    if not os.path.exists(target):
        return False
    os.unlink(target)
    return True

"""`sgl-shapeprof hook install|uninstall|status`: the zero-edit start-up hook.

A wheel install puts sgl_shapeprof_autohook.pth into site-packages already;
this command does it for editable installs (pip install -e) or another
environment. The hook's one line costs a dictionary lookup at start-up and
imports nothing unless SGLANG_PROFILE_SHAPES is set to something other
than 0 (a bad value loads it too, so that the worker says what is wrong);
otherwise it leaves a finder that waits for SGLang's tokenizer module (to
refuse SHAPES requests to a server that cannot take them; see _autohook).
"""
from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from typing import Optional

PTH_NAME = "sgl_shapeprof_autohook.pth"
PTH_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), PTH_NAME)


def default_site_dir() -> str:
    return sysconfig.get_paths()["purelib"]


def hook_command(action: str, site_dir: Optional[str] = None) -> int:
    site_dir = site_dir or default_site_dir()
    target = os.path.join(site_dir, PTH_NAME)
    if not os.path.isdir(site_dir):
        print(f"sgl-shapeprof hook: no such folder: {site_dir}", file=sys.stderr)
        return 2
    if action == "status":
        print(f"{'installed' if os.path.exists(target) else 'not installed'}: {target}")
        return 0
    try:
        if action == "install":
            shutil.copyfile(PTH_SOURCE, target)
            print(f"installed {target}; SGLANG_PROFILE_SHAPES=1 now profiles SGLang workers unedited")
        elif os.path.exists(target):
            os.unlink(target)
            print(f"removed {target}")
        else:
            print(f"not installed: {target}")
    except OSError as e:
        print(f"sgl-shapeprof hook {action}: {e}", file=sys.stderr)
        return 1
    return 0

"""`sgl-shapeprof hook`: the start-up hook: install | uninstall | status."""
from __future__ import annotations

import argparse
import os

from .common import fail


def add_parser(sub: "argparse._SubParsersAction") -> None:
    h = sub.add_parser("hook", help="the zero-edit start-up hook: install | uninstall | status")
    h.add_argument("action", choices=["install", "uninstall", "status"])
    h.add_argument("--site-dir", help="site-packages folder (default: this Python's)")
    h.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..integrations import install
    site_dir = args.site_dir or install.default_site_dir()
    if not os.path.isdir(site_dir):
        raise fail(f"no such folder: {site_dir}")
    target = install.hook_path(site_dir)
    if args.action == "status":
        print(f"{'installed' if os.path.exists(target) else 'not installed'}: {target}")
        return 0
    try:
        if args.action == "install":
            install.install(site_dir)
            print(f"installed {target}; SGLANG_PROFILE_SHAPES=1 now profiles SGLang workers unedited")
        elif install.uninstall(site_dir):
            print(f"removed {target}")
        else:
            print(f"not installed: {target}")
    except OSError as e:
        raise fail(str(e)) from None  # was exit 1; every other command's failure is 2
    return 0

"""sgl_shapeprof's start-up hook: what the line of sgl_shapeprof_autohook.pth
runs in every Python process of the environment. Standard library only, and
nothing of sgl_shapeprof loads unless it is wanted. The line imports this
module and calls start() with the switch's names and the unarmed targets,
which `sgl-shapeprof hook install` (and a wheel's build) writes into it from
their owners (recording/switch.py, integrations/registry.py's seams): this
module, which cannot import them (it would load the package in every
process), holds no copy. start():

- SHAPEPROF or SGLANG_PROFILE_SHAPES set, and not 0: the start-up hook
  loads (sgl_shapeprof/integrations/startup_hook.py), which patches every
  integration's modules (integrations/registry.py) where they are imported
  (a bad value loads it too, so that the worker says what is wrong);
- unset: a finder waits for the integrations' UNARMED_TARGETS (SGLang's
  tokenizer control module, where /start_profile requests enter), so that
  a request for SHAPES is answered with what to set instead of SGLang's
  "Start profiling." with nothing recorded. The package removed since (the
  line left behind): nothing.

Top-level, beside the .pth, not in the package: importing the package
would load it in every process.
"""
import os
import sys

# the .pth line's, given to start(): the switch in its neutral spelling and
# its own; the modules patched with profiling off
SWITCHES = ()
UNARMED_TARGETS = ()


class UnarmedFinder:
    """A meta path finder for UNARMED_TARGETS (the protocol only:
    importlib.abc costs 12 ms at start-up)."""

    @staticmethod
    def find_spec(name, path, target=None):
        if name not in UNARMED_TARGETS:
            return None
        import importlib.util
        if importlib.util.find_spec("sgl_shapeprof") is None:
            return None
        from sgl_shapeprof.integrations import startup_hook
        return startup_hook.unarmed_spec(name, path)


def switched_on(environ=os.environ) -> bool:
    """The first spelling set and not empty, not 0 (recording/switch.py's loads_hook)."""
    return next((environ[n] for n in SWITCHES if environ.get(n)), "").strip() not in ("", "0")


def start(switches, unarmed_targets) -> None:
    """The .pth line's call; once per process."""
    global SWITCHES, UNARMED_TARGETS
    if SWITCHES:
        return
    SWITCHES, UNARMED_TARGETS = tuple(switches), tuple(unarmed_targets)
    if switched_on():
        import sgl_shapeprof.integrations.startup_hook  # noqa: F401
    else:
        sys.meta_path.insert(0, UnarmedFinder)

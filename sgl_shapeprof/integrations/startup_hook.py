"""The start-up hook: servers profiled unedited. Imported at interpreter
start-up by its .pth line (sgl_shapeprof_autohook.pth; `sgl-shapeprof hook
install` puts it in place, integrations/install.py) only when profiling is on
(recording.switch.loads_hook: a bad value too, and the worker's
from_env() then says which). It patches every integration's HOOKS and
DOORS (registry.py, each folder's seam.py) when, and if, their modules are
imported; nothing else is touched and torch is not imported here. (The
package's own import puts the DOORS on too, door_finder.py: the hook, which
imports the package at start-up, puts them on before any library can be
imported, whatever order a script imports them in.)

With profiling off the .pth imports nothing: its own finder asks
unarmed_spec() for the integrations' UNARMED_HOOKS only (SGLang's
tokenizer: a /start_profile request for SHAPES then gets an error naming
the variable instead of SGLang's "Start profiling." with nothing recorded).
"""
from __future__ import annotations

from ..on_import import PatchingFinder, install_finder, patch_now, patching_spec
from ..recording.switch import loads_hook
from . import door_finder
from .registry import hooks

# module -> (our module, its patch function), imported when the module is
PATCHES = hooks()
UNARMED_PATCHES = hooks(unarmed=True)
# Not armed: only where /start_profile requests enter (the .pth names them too)
UNARMED_TARGETS = tuple(UNARMED_PATCHES)
# What to patch; the patch functions load only when one of these modules is
# imported (the hook runs in every Python process of the server).
TARGETS = tuple(PATCHES)


def unarmed_spec(name, path):
    """For the .pth's finder (profiling off): a spec that patches the
    module, for UNARMED_TARGETS."""
    if name not in UNARMED_PATCHES:
        return None
    door_finder.stand_down()  # off means off: the package's import put the doors on
    return patching_spec(name, path, lambda module: patch_now(UNARMED_PATCHES, module))


class _WorkerFinder(PatchingFinder):
    """The integrations' modules of PATCHES."""


def install_worker_patcher() -> None:
    install_finder(_WorkerFinder(PATCHES))


# the .pth's test (it imports this module only then); else unarmed_spec() is asked
if loads_hook():
    install_worker_patcher()

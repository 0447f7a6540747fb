"""The kernel libraries' doors, put on by `import sgl_shapeprof` itself:
the package's import installs this finder, which patches each library's
DOORS (registry.py, its seam) where the library is imported, with no
variable set. A door is inert outside logged passes (recording/doors.py:
the library's own function is called, its results and exceptions as they
were), so a program that never profiles runs as it did; the servers' HOOKS
still wait for the variable (the start-up hook, startup_hook.py).

A library imported before sgl_shapeprof is patched in place then
(on_import.install_finder), too late for what it had already made (a
decorator already applied, functions callers already hold): that is said
once, naming the library and what to do, when a profiler is made
(recording/profiler.py asks on_import.imported_before()).

Off means off in a server: the servers' own hooks load the package with
profiling off too (the .pth's unarmed finder in SGLang, vLLM's plugin entry
point in every vLLM process), and there stand_down() takes the finder off
again while no library of its has been imported, so a server that does not
profile runs its kernel libraries untouched.

Standard library only: it runs at every import of the package.
"""
from __future__ import annotations

import sys

from ..on_import import PatchingFinder, install_finder
from .registry import door_misses, doors, inert_doors


class DoorFinder(PatchingFinder):
    """The kernel libraries' modules of doors()."""

    def __init__(self) -> None:
        super().__init__(doors())
        self.misses = door_misses()
        self.inert = inert_doors()

    def imported_before(self, name: str) -> "str | None":
        miss = self.misses.get(name)
        if not miss:  # patched in place whole (a class's method): nothing missed
            return None
        library = name.partition(".")[0]
        return (f"{library} was imported before sgl_shapeprof, so {miss}; import sgl_shapeprof before "
                f"{library}, or start the process with SHAPEPROF=1 (the start-up hook, `sgl-shapeprof hook "
                f"install`, then wraps {library} as it is imported)")


def install() -> None:
    """Once per process (install_finder: once per finder class)."""
    install_finder(DoorFinder())


def stand_down() -> bool:
    """Takes the doors off again, when no module of theirs that a door wraps
    where it is imported has been imported yet (nothing is wrapped then;
    Triton's door is put on only in logged passes); True if they are off.
    For the servers' hooks with profiling off."""
    for finder in [f for f in sys.meta_path if isinstance(f, DoorFinder)]:
        if any(name in sys.modules for name in finder.patches if name not in finder.inert):
            return False
        sys.meta_path.remove(finder)
    return True

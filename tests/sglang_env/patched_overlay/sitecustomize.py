"""For the patched-SGLang tests: when SHAPEPROF_PATCHED_TREE names a
folder holding patched copies of SGLang's worker modules
(<tree>/sglang/srt/managers/tp_worker.py, ...), those modules load from there
instead of site-packages, in this process and in SGLang's worker processes
(they inherit PYTHONPATH and the variable). Inserted before every other
finder, so sgl_shapeprof's zero-edit finder never sees them: only the patch
attaches the profiler."""
import importlib.machinery
import importlib.util
import os
import sys

TREE = os.environ.get("SHAPEPROF_PATCHED_TREE")


class _PatchedWorkers:
    def find_spec(self, name, path, target=None):
        file = os.path.join(TREE, *name.split(".")) + ".py"
        if not name.startswith("sglang.") or not os.path.isfile(file):
            return None
        return importlib.util.spec_from_file_location(name, file)

    def invalidate_caches(self):
        pass


if TREE:
    sys.meta_path.insert(0, _PatchedWorkers())

"""Integrations with inference servers and kernel libraries: a folder each,
listed in registry.py, whose seam.py names the modules it patches (read by
the start-up hook, startup_hook.py, without importing anything else). Shared
by all: passes.py (a worker's profiler and its forward methods wrapped),
graphs.py (CUDA graph keys), engines.py (`run`'s engine child); a module
patched where it is imported is ../on_import.py's.
"""

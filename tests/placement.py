"""Where a test runs (docs/development.md#where-a-test-runs): the one owner of
the rule, read by conftest.py (which marks the tests) and test_layout.py
(which checks the rule against the tree).

The whole suite runs once, on the default torch (2.13.0). Each other torch
(2.11.0, 2.14.1, 2.15.0) runs only what depends on the torch version: the
test modules whose file name starts with one of EVERY_TORCH's prefixes,
chosen by pytest's `-m every_torch`. The servers' tests (tests/sglang/,
tests/vllm/) run where their engine is installed, on its own torch
(`-m engine`). A new test goes into the module of its concern, and lands
where that module runs; a test of a new torch-dependent concern goes into a
new module named with a new prefix here.
"""
import os

from sgl_shapeprof.integrations.registry import seams

# prefix of the test module's file name -> the concern it covers on every torch
EVERY_TORCH = {
    "test_build": "the build against this torch's headers, warnings as errors",
    "test_parity": "parity with the reference TorchDispatchMode logger, record by record",
    "test_real_models": "parity on real transformers and diffusers models",
    "test_trust": "the truth of every mode (dedupe, threads, fork) against the reference logger",
    "test_crash": "crash and kill: what a dying process leaves",
    "test_key_order": "the dispatch-key order this torch has",
    "test_errors_threads": "c10 errors and threads",
    "test_triton": "Triton launches, on this torch's Triton",
    "test_inductor": "Inductor's generated launches, through this torch's CachingAutotuner.run",
    "test_custom_ops": "custom ops (torch.library) and their kernels' exceptions",
    "test_cuda": "CUDA (skips without a GPU)",
    "test_time": "timed recording: each call's time around this torch's dispatch",
}

# the concerns that also run on the profiler's second route on every torch
# (`-m second_route`; on 2.13 `make test-second-route` runs all of EVERY_TORCH
# there): the suites issue 55 names, and the key's order
SECOND_ROUTE = ("test_parity", "test_crash", "test_errors_threads", "test_custom_ops", "test_key_order")

# the folders of the servers' real-engine tests, by engine (each server's seam says its own)
ENGINE_DIRS = tuple(s.tests for s in seams() if s.tests)

# what a module that uses them is testing: it must run on every torch
PARITY_ORACLE = {"reference_logger", "ReferenceLogger", "run_both", "assert_same_stream"}


def every_torch(module_path: str):
    """The concern a test module covers on every torch, or None."""
    name = os.path.basename(module_path)
    return next((why for prefix, why in EVERY_TORCH.items() if name.startswith(prefix)), None)


def second_route(module_path: str) -> bool:
    """Whether a test module runs on the second route on every torch."""
    return os.path.basename(module_path).startswith(SECOND_ROUTE)


def engine(module_path: str):
    """The server whose real-engine tests a module holds, or None."""
    folder = os.path.basename(os.path.dirname(os.path.abspath(module_path)))
    return folder if folder in ENGINE_DIRS else None

"""Stands in for a torch whose C++ FakeTensor owns DispatchKey::Fake (issue 55):
with SHAPEPROF_TEST_FAKE_OWNER=1, a fallback is registered on Fake before
sgl_shapeprof installs its own, so the profiler takes its second route
(TESTING_ONLY_GenericMode). conftest.py calls take_fake() in the test
process and puts this folder first on PYTHONPATH, so that the children the
tests start (crash, fork, servers) take it at their start too.

The fallback is a fallthrough: what torch's own would do for calls that
carry no fake tensor (Fake is in no other call's key set)."""
import os

VARIABLE = "SHAPEPROF_TEST_FAKE_OWNER"


def take_fake():
    import torch

    global _LIB
    _LIB = torch.library.Library("_", "IMPL")
    _LIB.fallback(torch.library.fallthrough_kernel, "Fake")


if os.environ.get(VARIABLE) == "1":
    take_fake()

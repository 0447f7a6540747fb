"""sgl_shapeprof: a native operator shape profiler for PyTorch inference servers.

    import sgl_shapeprof
    prof = sgl_shapeprof.from_env(rank=tp_rank)      # None unless enabled
    with prof.forward_pass("decode"): model(...)      # or start/end_forward_pass()
    prof.close()                                      # also runs at exit

Importing this package imports nothing heavy (the start-up hook relies on
that): the names below load on first use; creating a profiler imports torch.
It puts on the kernel libraries' doors (integrations/door_finder.py): a
library imported after it (FlashInfer, tvm-ffi, CuTe DSL, Inductor) is
recorded in logged passes, and runs as it is outside them.
"""
import sys as _sys  # already loaded by the interpreter: free

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs 15 ms at start-up

__version__ = "0.1.0"
__all__ = ["ShapeProfiler", "OnRequestProfiler", "Worker", "from_env", "resolve_rank", "ConfigError",
           "RecordReader", "read_records", "read_summary", "thread_logging", "__version__"]

_LAZY = {
    "ShapeProfiler": "recording.profiler", "from_env": "recording.env", "Worker": "records.worker",
    "resolve_rank": "recording.env", "OnRequestProfiler": "recording.on_request",
    "ConfigError": "recording.config", "RecordReader": "records.reader",
    "read_records": "records.reader", "read_summary": "records.reader",
}

if TYPE_CHECKING:
    from .recording.config import ConfigError
    from .recording.on_request import OnRequestProfiler
    from .recording.env import from_env, resolve_rank
    from .recording.profiler import ShapeProfiler
    from .records.reader import RecordReader, read_records, read_summary


def thread_logging() -> bool:
    """True while the calling thread is inside a logged forward pass or graph
    capture (and not paused): the operator calls it makes now are recorded.
    For code that must route calls through the dispatcher to be seen (SGLang's
    custom ops, see integrations/sglang/workers.py). Imports nothing; False before any
    profiler was created."""
    native = _sys.modules.get("sgl_shapeprof._C")
    return native is not None and native.thread_enabled()


from .lazy import lazy_attributes  # noqa: E402  (plain Python, imports nothing)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)

# a meta path finder for the kernel libraries' modules, a name compared per
# import (the registry's seams: standard library only)
from .integrations import door_finder as _door_finder  # noqa: E402

_door_finder.install()

"""sgl_shapeprof: a native operator shape profiler for PyTorch inference servers.

    import sgl_shapeprof
    prof = sgl_shapeprof.from_env(rank=tp_rank)      # None unless enabled
    with prof.forward_pass("decode"): model(...)      # or start/end_forward_pass()
    prof.close()                                      # also runs at exit

Importing this package does not import torch; creating a profiler does.
"""
from .config import ConfigError
from .profiler import ShapeProfiler, from_env, resolve_rank
from .reader import RecordReader, read_records, read_summary

__version__ = "0.1.0"
__all__ = ["ShapeProfiler", "from_env", "resolve_rank", "ConfigError", "RecordReader",
           "read_records", "read_summary", "__version__"]

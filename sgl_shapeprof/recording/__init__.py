"""Inside a profiled process: the profiler and its passes, recording on
request, configuration from the environment, loading the native module.

Imports nothing here: the start-up hook reads recording.switch at every
Python start-up with SGLANG_PROFILE_SHAPES set.
"""

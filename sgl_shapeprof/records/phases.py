"""The phase labels a pass carries (docs/FORMAT.md, `phase`) that our code
names: the one definition of each, for the recorders (the servers'
integrations, on-request profiling) and the readers (analyze, tune). A
phase is what a forward pass does; a disaggregated worker's role (prefill
or decode: records/worker.py's ROLES) is what a whole worker serves, and is
named apart. Imports nothing: the start-up hook's switch reads it."""
PREFILL = "prefill"
EXTEND = "extend"  # SGLang's prefill batches (ForwardMode.EXTEND)
DECODE = "decode"
# SGLang runs prefill as EXTEND batches: either name selects both
PHASE_ALIASES = {PREFILL: EXTEND, EXTEND: PREFILL}
# a server's decode passes and its prefill ones, in SGLang's names
BY_STAGE = (EXTEND, DECODE)

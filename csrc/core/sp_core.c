/*
 * sp_core.c -- see sp_core.h. Plain C11 + POSIX; no Python, no torch.
 *
 * Concurrency: one spinlock per profiler guards its file, tables and
 * counters (held for a few hundred instructions, never across a kernel);
 * the operator registry has a mutex for writers and lock-free readers; the
 * hot-path "is a logged pass open" test is one atomic load. Only
 * sp_emergency_close_all runs without locks (from fatal-signal handlers).
 * The lock order is written once, at the top of sp_internal.h. The parts
 * are included in their dependency order: each calls only those above it.
 */
#define SP_AMALGAMATION
#include "sp_internal.h"

#include "sp_lock.c"
#include "sp_text.c"
#include "sp_registry.c"
#include "sp_error.c"
#include "sp_thread.c"
#include "sp_file.c"
#include "sp_sigtable.c"
#include "sp_tally.c"
#include "sp_summary.c"
#include "sp_grower.c"
#include "sp_flusher.c"
#include "sp_profiler.c"
#include "sp_cupti.c"
#include "sp_pass.c"
#include "sp_format.c"
#include "sp_nvtx.c"
#include "sp_record.c"
#include "sp_signal.c"

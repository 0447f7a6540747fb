/*
 * sp_core.c -- see sp_core.h. Plain C11 + POSIX; no Python, no torch.
 *
 * Concurrency: one spinlock per profiler guards its file, tables and
 * counters (held for a few hundred instructions, never across a kernel);
 * the operator registry has a mutex for writers and lock-free readers; the
 * hot-path "is a logged pass open" test is one atomic load. Only
 * sp_emergency_close_all runs without locks (from fatal-signal handlers).
 */
#include "core/sp_internal.h"

#include "core/sp_text.c"
#include "core/sp_registry.c"
#include "core/sp_thread.c"
#include "core/sp_file.c"
#include "core/sp_profiler.c"
#include "core/sp_sigs.c"
#include "core/sp_record.c"
#include "core/sp_summary.c"
#include "core/sp_flusher.c"
#include "core/sp_close.c"
#include "core/sp_signal.c"

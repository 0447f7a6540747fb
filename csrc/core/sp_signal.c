/* sp_signal.c -- Fatal signals: async-signal-safe code only (no malloc, no locks).
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

static const char *signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGTERM: return "SIGTERM";
    default: return "signal";
  }
}

static atomic_int g_emergency_sig;
static sp_thread *(*_Atomic g_thread_getter)(void);

void sp_set_thread_getter(sp_thread *(*getter)(void)) { atomic_store(&g_thread_getter, getter); }

/* A profiler of this process, closed by a dying thread. */
static void close_dying(sp_profiler *p) {
  if (p->file.closed || p->owner_pid != getpid() || atomic_load(&p->orphaned)) return;
  int sig = atomic_load(&g_emergency_sig);
  /* If this thread was interrupted while holding the lock, go on without
   * it: a dying process wants its data more than consistency. */
  int locked = lock_try(&p->lock);
  atomic_store(&p->logging, 0);
  p->file.closed = 1;
  p->ended_by = sig ? signal_name(sig) : "emergency";
  /* Keep an in-flight call's inputs: they are the point of a crash. The
   * dying thread's, if another thread's record took their place. */
  sp_thread *(*getter)(void) = atomic_load(&g_thread_getter);
  if (getter && p->file.map) record_rescue_in_flight(p, getter());
  if (p->file.fd >= 0 && ftruncate(p->file.fd, (off_t)file_tail(&p->file)) != 0) {
    /* nothing more to do */
  }
  summary_src s;
  summary_live_src(p, &s);
  summary_write(p, &s);
  if (locked) lock_release(&p->lock);
}

void sp_emergency_close_all(void) { prof_each_open_unlocked(close_dying); }

static const int k_fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM};
#define N_FATAL (sizeof k_fatal / sizeof k_fatal[0])
static struct sigaction g_old_action[N_FATAL];
static atomic_int g_handlers_installed;

static void on_fatal_signal(int sig) {
  size_t i = 0;
  while (i < N_FATAL && k_fatal[i] != sig) i++;
  int expected = 0;
  if (atomic_compare_exchange_strong(&g_emergency_sig, &expected, sig))
    sp_emergency_close_all();
  /* Hand the signal to whoever had it before (the default: die). It is
   * blocked while we run, so it arrives as soon as we return. */
  if (i < N_FATAL) sigaction(sig, &g_old_action[i], NULL);
  raise(sig);
}

void sp_install_signal_handlers(void) {
  if (atomic_exchange(&g_handlers_installed, 1)) return;
  for (size_t i = 0; i < N_FATAL; i++) {
    struct sigaction cur;
    if (sigaction(k_fatal[i], NULL, &cur) != 0) continue;
    /* SIGTERM with a handler of its own (Python's, SGLang's) is not fatal:
     * the program shuts down and closes us itself. */
    if (k_fatal[i] == SIGTERM && cur.sa_handler != SIG_DFL) continue;
    if (cur.sa_handler == SIG_IGN) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK;
    if (sigaction(k_fatal[i], &sa, &g_old_action[i]) != 0)
      g_old_action[i] = cur;
  }
}

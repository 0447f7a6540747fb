/* sp_flusher.c -- The flusher thread: a fresh summary, and exact files once passes stop.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

static pthread_mutex_t g_flush_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_flush_cv = PTHREAD_COND_INITIALIZER;
static atomic_int g_flush_pending; /* some profiler wants a flush */
static atomic_uint g_flush_asks;   /* flushes asked for, ever: a pass ended */
static atomic_int g_flusher_started; /* written under g_flush_mu */
/* The open profilers, each given to a function (sp_profiler.c's list, set
 * by flusher_init before the first profiler opens). */
static int (*g_each_open)(int (*fn)(sp_profiler *p, int arg), int arg);

SP_PRIVATE void flusher_init(int (*each_open)(int (*fn)(sp_profiler *p, int arg), int arg)) {
  g_each_open = each_open;
}

/* fork(2) (pthread_atfork, sp_profiler.c): the flusher is between flushes
 * while its lock is held. */
SP_PRIVATE void flusher_fork_prepare(void) { lock_mu(&g_flush_mu, SP_LOCK_FLUSHER); }
SP_PRIVATE void flusher_fork_parent(void) { lock_mu_release(&g_flush_mu, SP_LOCK_FLUSHER); }
SP_PRIVATE void flusher_fork_child(void) {
  /* The flusher thread is not in the child: a profiler made here starts
   * its own. */
  atomic_store(&g_flusher_started, 0);
  atomic_store(&g_flush_pending, 0);
  pthread_cond_init(&g_flush_cv, NULL);
  lock_mu_release(&g_flush_mu, SP_LOCK_FLUSHER);
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes p's summary, and cuts the records file to its records when no pass
 * is open (a gap). A quiet flush (no pass ended for SP_FLUSH_QUIET) takes
 * the pass lock; a busy one only tries it: in a tight loop of passes,
 * waiting for it would contend with every begin and end. Without a gap the
 * summary is written mid-pass (one snapshot under the spinlock: its counts
 * and records_bytes agree), at most every SP_SUMMARY_EVERY, and the cut
 * waits for a flush after the open pass ends (its end asks). Returns 1 if
 * the pass lock was busy or the cut came too early (then another flush is
 * asked for). The open profilers' lock held (g_each_open). */
static int flush_one(sp_profiler *p, int busy) {
  if (!atomic_exchange(&p->flush_wanted, 0)) return 0;
  lock_mu(&p->summary_mu, SP_LOCK_SUMMARY);
  if (p->file.closed || atomic_load(&p->orphaned)) { /* close wrote it */
    lock_mu_release(&p->summary_mu, SP_LOCK_SUMMARY);
    return 0;
  }
  int locked = busy ? lock_mu_try(&p->pass_mu, SP_LOCK_PASS) == 0 : lock_mu(&p->pass_mu, SP_LOCK_PASS) == 0;
  double now = now_seconds();
  /* At most one cut per SP_CUT_EVERY: each drops the allocated tail, which
   * the next pass allocates and faults in again. */
  int early = now - p->cut_at < SP_CUT_EVERY;
  int gap = locked && !p->tally.open_passes && !early;
  if (locked && !gap) lock_mu_release(&p->pass_mu, SP_LOCK_PASS);
  if (gap) {
    p->cut_at = now;
    lock_mu(&p->grow_mu, SP_LOCK_GROW); /* no growth in flight while we cut */
    lock_acquire(&p->lock);
    off_t cut = file_forget_tail(&p->file);
    if (cut >= 0) p->grow_off = 0; /* the grower is tried again */
    lock_release(&p->lock);
    /* No pass can begin (pass_mu) and none runs: nothing writes the file. */
    if (cut >= 0 && ftruncate(p->file.fd, cut) != 0) {
      int e = errno;
      lock_acquire(&p->lock);
      err_fail(p, "cannot trim records file ", e);
      lock_release(&p->lock);
    }
    lock_mu_release(&p->grow_mu, SP_LOCK_GROW);
  }
  if (gap || now - p->summary_at >= SP_SUMMARY_EVERY) {
    summary_src s;
    int ok = summary_snapshot(p, &s);
    if (gap) lock_mu_release(&p->pass_mu, SP_LOCK_PASS);
    if (ok) {
      s.ended_by = "running";
      int e = summary_write(p, &s);
      if (e) err_summary_failed(p, e);
      else err_summary_written(p);
      p->summary_at = now;
    }
  }
  lock_mu_release(&p->summary_mu, SP_LOCK_SUMMARY);
  err_tell(p);
  if (locked && !early) return 0;
  atomic_store(&p->flush_wanted, 1);
  return 1;
}

/* Returns 1 if some profiler's pass lock was busy. */
static int flush_all(int busy) { return g_each_open(flush_one, busy); }

static void sleep_seconds(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void *flusher_main(void *arg) {
  (void)arg;
  double active = now_seconds(); /* the last flush */
  for (;;) {
    /* Soon after a flush, poll for the next ask instead of waiting on the
     * condition: a pass end then wakes nobody, so it makes no syscall
     * (pthread_cond_signal without a waiter). Idle for SP_FLUSH_IDLE: wait. */
    while (!atomic_load(&g_flush_pending) && now_seconds() - active < SP_FLUSH_IDLE)
      sleep_seconds(SP_FLUSH_QUIET);
    lock_mu(&g_flush_mu, SP_LOCK_FLUSHER);
    while (!atomic_load(&g_flush_pending)) pthread_cond_wait(&g_flush_cv, &g_flush_mu);
    lock_mu_release(&g_flush_mu, SP_LOCK_FLUSHER);
    /* Debounced: a flush once no pass has ended for SP_FLUSH_QUIET (between
     * passes, or passes stopped: the files are exact soon after, before a
     * SIGKILL at shutdown), or a busy one SP_FLUSH_BUSY after the first ask
     * while passes keep ending faster than that (a tight loop). */
    double first = now_seconds();
    int busy = 0;
    for (;;) {
      unsigned asks = atomic_load(&g_flush_asks);
      sleep_seconds(SP_FLUSH_QUIET);
      if (atomic_load(&g_flush_asks) == asks) break;
      if (now_seconds() - first >= SP_FLUSH_BUSY) {
        busy = 1;
        break;
      }
    }
    atomic_store(&g_flush_pending, 0);
    if (flush_all(busy)) atomic_store(&g_flush_pending, 1); /* again, quietly */
    active = now_seconds();
  }
  return NULL;
}

SP_PRIVATE int flusher_running(void) { return atomic_load_explicit(&g_flusher_started, memory_order_relaxed); }

SP_PRIVATE void flusher_request(sp_profiler *p) {
  atomic_store(&p->flush_wanted, 1);
  atomic_fetch_add(&g_flush_asks, 1);
  if (atomic_exchange(&g_flush_pending, 1)) return; /* asked already */
  lock_mu(&g_flush_mu, SP_LOCK_FLUSHER);
  if (!atomic_load(&g_flusher_started)) {
    atomic_store(&g_flusher_started, thread_start_own(flusher_main, "sp-flusher"));
  }
  int started = atomic_load(&g_flusher_started);
  if (started) pthread_cond_signal(&g_flush_cv);
  lock_mu_release(&g_flush_mu, SP_LOCK_FLUSHER);
  if (!started) { /* no thread to be had: flush on this one */
    atomic_store(&g_flush_pending, 0);
    flush_all(0);
  }
}

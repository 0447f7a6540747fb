/* sp_grower.c -- The grower thread: room in the records file made ahead of the writers.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h).
 *
 * Growing the file (fallocate, a new window, MADV_POPULATE_WRITE) costs the
 * kernel about 1 us per 4 KiB page; on the writer's thread it added 0.15 to
 * 0.23 us of wall time per record written (benchmarks/ab.py; strace saw
 * only 0.05 us of it in the syscalls). A writer whose record leaves little room
 * faulted in asks (commit, sp_record.c); the grower makes SP_AHEAD. A
 * writer that still runs out (the grower is late, or there is none, or a
 * cut dropped the room) makes a little itself (make_room). */
#include "sp_internal.h"

static pthread_mutex_t g_grow_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_grow_cv = PTHREAD_COND_INITIALIZER;
/* Profilers that asked, each holding a reference (g_grow_mu). */
static sp_profiler *g_grow_queue;
static int g_grower; /* 1: the thread runs; -1: it could not start (g_grow_mu) */
#ifdef SP_DEBUG
static int g_hold, g_working; /* sp_debug_hold_grower; a job under way (g_grow_mu) */

void sp_debug_hold_grower(int hold) {
  lock_mu(&g_grow_mu, SP_LOCK_GROWER);
  g_hold = hold;
  pthread_cond_broadcast(&g_grow_cv);
  lock_mu_release(&g_grow_mu, SP_LOCK_GROWER);
}

int sp_debug_grower_busy(void) {
  lock_mu(&g_grow_mu, SP_LOCK_GROWER);
  int busy = g_grow_queue || g_working;
  lock_mu_release(&g_grow_mu, SP_LOCK_GROWER);
  return busy;
}
#define HELD() g_hold
#define WORKING(n) (g_working = (n))
#else
#define HELD() 0
#define WORKING(n) ((void)0)
#endif

SP_PRIVATE void grower_fork_prepare(void) { lock_mu(&g_grow_mu, SP_LOCK_GROWER); }
SP_PRIVATE void grower_fork_parent(void) { lock_mu_release(&g_grow_mu, SP_LOCK_GROWER); }
SP_PRIVATE void grower_fork_child(void) {
  /* The thread is not in the child, and the parent's profilers are
   * orphaned here: their queued references are let go of, unfreed. */
  g_grower = 0;
  g_grow_queue = NULL;
  WORKING(0);
  pthread_cond_init(&g_grow_cv, NULL);
  lock_mu_release(&g_grow_mu, SP_LOCK_GROWER);
}

SP_PRIVATE void grower_ahead(sp_profiler *p) {
  lock_acquire(&p->lock);
  unsigned cuts = p->grow_cuts;
  size_t runway = file_runway(&p->file);
  lock_release(&p->lock);
  /* A step at a time: a writer that runs out meanwhile waits for one step
   * (grow_mu), not for all of them. */
  int e = 0;
  for (int step = 0; step < (int)(SP_AHEAD / SP_PREFAULT) && runway < SP_AHEAD && !e; step++) {
    e = file_make_room(&p->file, runway + SP_PREFAULT, SP_PREFAULT, (long)cuts);
    lock_acquire(&p->lock);
    runway = file_runway(&p->file);
    lock_release(&p->lock);
  }
  /* A failure (a full disk) is not reported here, and not tried again
   * before the next cut: the writers make room themselves, meet it and
   * report it. */
  lock_acquire(&p->lock);
  p->grow_asked = 0;
  if (e && e != ESHUTDOWN) p->grow_off = 1;
  lock_release(&p->lock);
}

static void *grower_main(void *arg) {
  (void)arg;
  lock_mu(&g_grow_mu, SP_LOCK_GROWER);
  for (;;) {
    while (!g_grow_queue || HELD()) pthread_cond_wait(&g_grow_cv, &g_grow_mu);
    sp_profiler *p = g_grow_queue;
    g_grow_queue = p->next_grow;
    p->next_grow = NULL;
    WORKING(1);
    lock_mu_release(&g_grow_mu, SP_LOCK_GROWER);
    grower_ahead(p);
    prof_unref(p); /* the queue's: p may be freed now */
    lock_mu(&g_grow_mu, SP_LOCK_GROWER);
    WORKING(0);
  }
  return NULL;
}

SP_PRIVATE void grower_ask(sp_profiler *p) {
  prof_ref(p);
  lock_mu(&g_grow_mu, SP_LOCK_GROWER);
  if (!g_grower) {
    g_grower = thread_start_own(grower_main, "sp-grower") ? 1 : -1;
  }
  if (g_grower < 0) {
    /* No thread: the writers make room themselves (grow_asked stays set,
     * so they do not ask again). */
    lock_mu_release(&g_grow_mu, SP_LOCK_GROWER);
    prof_unref(p);
    return;
  }
  p->next_grow = g_grow_queue;
  g_grow_queue = p;
  pthread_cond_signal(&g_grow_cv);
  lock_mu_release(&g_grow_mu, SP_LOCK_GROWER);
}

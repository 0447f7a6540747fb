/* sp_close.c -- Closing and freeing profilers.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

int sp_close(sp_profiler *p) {
  if (!p) return SP_OK;
  if (atomic_load(&p->orphaned) || p->owner_pid != getpid()) {
    /* Forked child: let go of the parent's file without touching it. */
    if (!p->closed) {
      p->closed = 1;
      release_file(&p->file);
      unlink_open(p);
    }
    return SP_OK;
  }
  pthread_mutex_lock(&p->summary_mu);
  pthread_mutex_lock(&p->pass_mu);
  pthread_mutex_lock(&p->grow_mu); /* no growth in flight */
  lock_acquire(&p->lock);
  if (p->closed) {
    lock_release(&p->lock);
    pthread_mutex_unlock(&p->grow_mu);
    pthread_mutex_unlock(&p->pass_mu);
    pthread_mutex_unlock(&p->summary_mu);
    return SP_OK;
  }
  atomic_store(&p->logging, 0);
  p->closed = 1;
  /* Calls still in flight on other threads see the map gone and write
   * nothing; the syscalls come after the lock. */
  sp_file file = p->file;
  p->file.map = NULL;
  p->file.fd = -1;
  p->file.size = p->file.len;
  p->file.spec_owner = NULL;
  p->file.spec_end = p->file.len;
  lock_release(&p->lock);
  pthread_mutex_unlock(&p->grow_mu); /* a grower now sees closed */
  pthread_mutex_unlock(&p->pass_mu);
  int rc = SP_OK;
  if (ftruncate(file.fd, (off_t)file.len) != 0) {
    set_err(p, "cannot trim records file ", p->path, errno);
    rc = SP_IOERR;
  }
  if (file.map) munmap(file.map, file.map_len);
  file.map = NULL;
  int e = write_summary_now(p, NULL);
  if (e) summary_failed(p, e); /* the records are kept */
  else summary_written(p);
  /* The file is another profiler's to take only now, summary written. The
   * lock belongs to the open file description, which a forked child's copy
   * of the descriptor shares until the child closes it (at_fork_child, when
   * it gets to run): unlock it explicitly, closing is not enough. */
  if (file.fd >= 0) flock(file.fd, LOCK_UN);
  release_file(&file);
  pthread_mutex_unlock(&p->summary_mu);
  tell_failure(p);
  unlink_open(p);
  return rc;
}

void sp_ref(sp_profiler *p) { atomic_fetch_add(&p->refs, 1); }

static void destroy(sp_profiler *p) {
  release_file(&p->file);
  unlink_open(p);
  free(p->path);
  free(p->summary_path);
  free(p->phases);
  free(p->worker);
  free(p->pass_json.p);
  free(p->op_counts);
  free(p->op_first);
  free(p->op_order);
  free(p->recs);
  free(p->slots);
  free(p->vslots);
  arena_free(p);
  free(p->text);
  free(p->snap_ops);
  free(p->snap_counts);
  free(p->snap_first);
  free(p->snap_sigs);
  for (int i = 0; i < p->n_phases; i++) free(p->phase_stats[i].name);
  free(p->phase_stats);
  free(p->snap_phases);
  free(p->graphs);
  free(p->snap_graphs);
  /* A forked child's copy may be locked by a thread that is not there. */
  if (p->owner_pid == getpid() && !atomic_load(&p->orphaned)) {
    pthread_mutex_destroy(&p->pass_mu);
    pthread_mutex_destroy(&p->summary_mu);
    pthread_mutex_destroy(&p->grow_mu);
  }
  free(p);
}

void sp_unref(sp_profiler *p) {
  if (atomic_fetch_sub(&p->refs, 1) == 1) destroy(p);
}

void sp_free(sp_profiler *p) {
  if (!p) return;
  if (!p->closed) sp_close(p);
  sp_unref(p);
}

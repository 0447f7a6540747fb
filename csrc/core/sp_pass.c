/* sp_pass.c -- Passes and graph captures: each thread's own, counted per profiler.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

SP_PRIVATE int pass_phase_wanted(const sp_profiler *p, const char *phase) {
  if (!p->phases) return 1;
  if (!phase || !phase[0]) return 0;
  size_t n = strlen(phase);
  for (const char *s = p->phases; *s;) {
    const char *e = strchr(s, ',');
    size_t k = e ? (size_t)(e - s) : strlen(s);
    if (k == n && memcmp(s, phase, n) == 0) return 1;
    if (!e) break;
    s = e + 1;
  }
  return 0;
}

/* What p->logging holds while some logged pass is open (see sp_logging). */
static int logging_value(const sp_profiler *p) {
  return p->tally.open_logged > 0 && !p->file.closed && !p->failed
             ? 1 | (p->cfg.args ? SP_LOGGING_ARGS : 0) | (p->cfg.time ? SP_LOGGING_TIME : 0) |
                   (p->cfg.time == SP_TIME_KERNELS && cupti_for(p) ? SP_LOGGING_KERNELS : 0)
             : 0;
}

/* ---- passes ------------------------------------------------------------
 * A pass is the calling thread's: begin, end and reopen act on this
 * thread's pass only, so that one thread's end never ends another's. */
static _Thread_local struct sp_pass t_pass;
static pthread_key_t g_pass_key;
static pthread_once_t g_pass_once = PTHREAD_ONCE_INIT;

/* At the exit of a thread that ran passes: a pass it left open ends (the
 * flusher waits for no open pass), and its header is freed. */
static void pass_free(void *v) {
  struct sp_pass *ps = v;
  if (ps->p) sp_pass_end(ps->p);
  free(ps->header.p);
  ps->header.p = NULL;
  ps->header.cap = ps->header.n = 0;
}
static void pass_key_init(void) { pthread_key_create(&g_pass_key, pass_free); }

/* The mix of a phase slot and a graph key into signature hashes: calls of
 * other phases or graphs are other signatures (a record's phase and graph
 * say which pass it stands for). 0 for no phase and no graph. */
static uint64_t pass_salt(int phase, const long long *graph) {
  uint64_t s = 0;
  if (phase >= 0) s ^= ((uint64_t)phase + 1) * 0xD6E8FEB86659FD93ULL;
  if (graph) s ^= ((uint64_t)*graph + 1) * 0x9E3779B97F4A7C15ULL | 1;
  return s;
}

/* This thread's pass header for a pass: ', "forward_pass": N[, "phase":
 * "p"][, "graph": key]', its phase slot and salt. Spinlock held; 0 when
 * out of memory. */
static int set_pass_header(sp_profiler *p, struct sp_pass *ps, long long pass,
                           const char *phase, const long long *graph) {
  sp_buf *h = &ps->header;
  h->n = 0;
  h->failed = 0;
  BUF_LIT(h, ", \"forward_pass\": ");
  buf_i64(h, pass);
  ps->phase = -1;
  if (phase && phase[0]) {
    BUF_LIT(h, ", \"phase\": ");
    buf_json_str(h, phase, strlen(phase));
    ps->phase = tally_phase(&p->tally, phase);
  }
  if (graph) {
    BUF_LIT(h, ", \"graph\": ");
    buf_i64(h, *graph);
  }
  ps->salt = pass_salt(ps->phase, graph);
  return !h->failed && (!(phase && phase[0]) || ps->phase >= 0);
}

/* Ends this thread's pass of p, if one is open; p's spinlock held. Returns
 * 1 if one was (then the caller asks for a flush). */
static int pass_close(sp_profiler *p, struct sp_pass *ps) {
  if (ps->p != p || !p) return 0;
  p->tally.open_passes--;
  if (ps->logged) p->tally.open_logged--;
  if (ps->logged && !ps->capture && ps->size >= 0 && !ps->replayed && !p->file.closed) {
    int z = tally_size(&p->tally, ps->phase, ps->size);
    if (z >= 0) p->tally.sizes[z].passes++;
    else err_fail(p, "out of memory counting pass sizes for ", 0);
  }
  ps->size = -1; /* counted once: a reopened pass is not counted again */
  for (int i = 0; ps->logged && ps->num && i < SP_OPEN_SLOTS; i++)
    if (p->tally.open_nums[i] == ps->num) {
      p->tally.open_nums[i] = 0;
      break;
    }
  atomic_store(&p->logging, logging_value(p));
  ps->last = p->serial;
  ps->last_logged = ps->logged && !ps->capture && !p->file.closed;
  ps->p = NULL;
  ps->logged = ps->capture = 0;
  return 1; /* the caller drops the pass's reference, once it lets go of p */
}

/* Opens this thread's pass (its header already made when logged); lets go
 * of the locks the begin took. */
static int pass_opened(sp_profiler *p, struct sp_pass *ps, int logged, int capture) {
  if (!p->file.closed) {
    prof_ref(p);
    ps->p = p;
    ps->logged = logged;
    ps->capture = capture;
    p->tally.open_passes++;
    if (logged) {
      p->tally.open_logged++;
      for (int i = 0; ps->num && i < SP_OPEN_SLOTS; i++)
        if (!p->tally.open_nums[i]) {
          p->tally.open_nums[i] = ps->num;
          break;
        }
      /* the latest logged pass: threads that inherited the key log into it */
      sp_buf *h = &p->pass_json;
      h->n = 0;
      buf_put(h, ps->header.p, ps->header.n);
      p->latest_phase = ps->phase;
      p->latest_salt = ps->salt;
      if (h->failed) err_fail(p, "out of memory formatting a pass header for ", 0);
    }
  } else {
    logged = 0;
  }
  atomic_store(&p->logging, logging_value(p));
  logged = logged && !p->failed;
  lock_release(&p->lock);
  lock_mu_release(&p->pass_mu, SP_LOCK_PASS);
  if (logged) prof_inherit(p);
  else prof_uninherit(p);
  return logged;
}

/* The start of every begin: this thread's open pass (of any profiler) ends
 * first; p's locks are taken. */
static struct sp_pass *pass_begin_locked(sp_profiler *p) {
  pthread_once(&g_pass_once, pass_key_init);
  struct sp_pass *ps = &t_pass;
  if (!pthread_getspecific(g_pass_key)) pthread_setspecific(g_pass_key, ps); /* pass_free */
  if (ps->p && ps->p != p) sp_pass_end(ps->p); /* another profiler's pass ends */
  lock_mu(&p->pass_mu, SP_LOCK_PASS); /* after any trim of the last pass's end */
  lock_acquire(&p->lock);
  if (pass_close(p, ps)) {
    atomic_store(&p->flush_wanted, 1);
    prof_unref(p); /* not the last: the caller holds the owner's reference */
  }
  ps->size = -1;
  ps->replayed = 0;
  return ps;
}

int sp_graph_begin(sp_profiler *p, const char *phase, long long key) {
  if (!p || atomic_load(&p->orphaned)) return 0;
  struct sp_pass *ps = pass_begin_locked(p);
  int logged = 0;
  ps->num = 0;
  if (!p->file.closed && pass_phase_wanted(p, phase) && !p->failed) {
    int g = tally_graph(&p->tally, key, -1);
    if (g < 0 || !set_pass_header(p, ps, 0, phase, &key)) {
      err_fail(p, "out of memory formatting a pass header for ", 0);
    } else {
      logged = 1;
      p->tally.graphs[g].captures++;
    }
  }
  return pass_opened(p, ps, logged, 1);
}

int sp_graph_replay(sp_profiler *p, long long key, long long real, long long n) {
  if (!p || n <= 0 || atomic_load(&p->orphaned)) return 0;
  struct sp_pass *ps = &t_pass;
  int counted = 0;
  lock_acquire(&p->lock);
  if (!p->file.closed && ps->p == p && ps->logged && !ps->capture && !p->failed) {
    int g = tally_graph(&p->tally, key, -1);
    /* (key, real) sorts after (key, -1): adding it leaves g in place */
    int r = g >= 0 && real >= 0 ? tally_graph(&p->tally, key, real) : g;
    if (g >= 0 && r >= 0) {
      if (r != g) p->tally.graphs[r].replays += n;
      p->tally.graphs[g].replays += n;
      ps->replayed = 1;
      counted = 1;
    } else {
      err_fail(p, "out of memory counting graph replays for ", 0);
    }
  }
  lock_release(&p->lock);
  return counted;
}

int sp_graph_known(sp_profiler *p, long long key, const char *phase) {
  if (!p || atomic_load(&p->orphaned)) return 0;
  int listed = 0;
  lock_acquire(&p->lock);
  if (!p->file.closed && !p->failed && pass_phase_wanted(p, phase)) {
    listed = tally_graph(&p->tally, key, -1) >= 0;
    if (!listed) err_fail(p, "out of memory counting graph replays for ", 0);
  }
  lock_release(&p->lock);
  return listed;
}

int sp_pass_size(sp_profiler *p, long long size) {
  if (!p || size < 0 || atomic_load(&p->orphaned)) return 0;
  struct sp_pass *ps = &t_pass;
  int noted = 0;
  lock_acquire(&p->lock);
  if (ps->p == p && ps->logged && !ps->capture && !p->failed) {
    ps->size = size;
    noted = 1;
  }
  lock_release(&p->lock);
  return noted;
}

int sp_pass_begin(sp_profiler *p, const char *phase) {
  if (!p || atomic_load(&p->orphaned)) return 0;
  struct sp_pass *ps = pass_begin_locked(p);
  int logged = 0;
  ps->num = 0;
  if (!p->file.closed) {
    p->tally.passes++;
    if (p->tally.passes > p->cfg.skip_warmup && pass_phase_wanted(p, phase) &&
        (p->cfg.log_n_passes == 0 || p->tally.logged_passes < p->cfg.log_n_passes) &&
        !p->failed) {
      logged = 1;
      p->tally.logged_passes++;
      ps->num = p->tally.passes;
      int ok = set_pass_header(p, ps, p->tally.passes, phase, NULL);
      if (ps->phase >= 0) p->tally.phase_stats[ps->phase].passes++;
      if (!ok) {
        err_fail(p, "out of memory formatting a pass header for ", 0);
        logged = 0;
      }
    }
  }
  logged = pass_opened(p, ps, logged, 0);
  if (logged && p->cfg.time == SP_TIME_KERNELS) cupti_pass(p, 1); /* the kernels file's window */
  return logged;
}

int sp_pass_reopen(sp_profiler *p) {
  if (!p || atomic_load(&p->orphaned)) return 0;
  struct sp_pass *ps = &t_pass;
  lock_mu(&p->pass_mu, SP_LOCK_PASS);
  lock_acquire(&p->lock);
  if (ps->p) { /* p's pass is still open (nothing to reopen), or another
                  profiler's is (p's is not reopened) */
    int logged = ps->p == p && ps->logged && !p->failed;
    lock_release(&p->lock);
    lock_mu_release(&p->pass_mu, SP_LOCK_PASS);
    return logged;
  }
  /* this thread's last pass, under the same number, header and phase, not
   * counted again */
  int logged = ps->last == p->serial && ps->last_logged && !p->failed;
  logged = pass_opened(p, ps, logged, 0);
  if (logged && p->cfg.time == SP_TIME_KERNELS) cupti_pass(p, 1);
  return logged;
}

/* The end of sp_pass_end, pass_mu held (let go here). */
static void pass_end_locked(sp_profiler *p) {
  lock_acquire(&p->lock);
  const sp_profiler *window = t_pass.p == p && t_pass.logged && !t_pass.capture &&
                              p->cfg.time == SP_TIME_KERNELS ? p : NULL; /* compared only, after p may go */
  int ended = t_pass.p == p && pass_close(p, &t_pass);
  lock_release(&p->lock);
  lock_mu_release(&p->pass_mu, SP_LOCK_PASS);
  if (window) cupti_pass(window, 0);
  prof_uninherit(p); /* before the pass's reference goes */
  /* The file is cut to its records and the summary rewritten by the
   * flusher thread, off this thread, once no pass is open (debounced:
   * SP_FLUSH_QUIET, SP_FLUSH_BUSY). */
  if (ended) {
    flusher_request(p);
    prof_unref(p); /* the pass's: p may be freed now */
  }
}

void sp_pass_end(sp_profiler *p) {
  if (!p || atomic_load(&p->orphaned)) return;
  lock_mu(&p->pass_mu, SP_LOCK_PASS);
  pass_end_locked(p);
}

int sp_pass_end_nowait(sp_profiler *p) {
  if (!p || atomic_load(&p->orphaned)) return 1;
  /* without a flusher thread, flusher_request may start one, or flush here */
  if (!flusher_running() || lock_mu_try(&p->pass_mu, SP_LOCK_PASS) != 0) return 0;
  pass_end_locked(p);
  return 1;
}

sp_profiler *sp_pass_current(int *mode) {
  const struct sp_pass *ps = &t_pass;
  *mode = ps->p && ps->logged ? sp_logging(ps->p) : 0;
  return ps->p;
}

sp_profiler *sp_pass_target(int *mode) {
  sp_profiler *p = sp_pass_current(mode);
  if (p) return p;
  p = prof_inherited();
  *mode = p ? sp_logging(p) : 0;
  return p;
}

/* This thread's pass of p, for a call it records: its own, or NULL for the
 * profiler's latest (a thread that inherited the key). 0 when this thread's
 * own pass of p is not logged. Spinlock held. */
SP_PRIVATE int pass_of_call(const sp_profiler *p, const struct sp_pass **ps, int *phase,
                        uint64_t *salt) {
  const struct sp_pass *own = &t_pass;
  if (own->p == p) {
    if (!own->logged) return 0;
    *ps = own;
    *phase = own->phase;
    *salt = own->salt;
    return 1;
  }
  *ps = NULL;
  *phase = p->latest_phase;
  *salt = p->latest_salt;
  return 1;
}


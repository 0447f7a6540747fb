/* sp_profiler.c -- Profilers: open, fork handling, passes, counters.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
static sp_profiler *g_open;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* fn(p, arg) for each open profiler, with their list's lock held; the
 * results or-ed. */
SP_PRIVATE int open_each(int (*fn)(sp_profiler *p, int arg), int arg) {
  int r = 0;
  pthread_mutex_lock(&g_open_lock);
  for (sp_profiler *p = g_open; p; p = p->next_open) r |= fn(p, arg);
  pthread_mutex_unlock(&g_open_lock);
  return r;
}

/* The same without the lock, for a dying process (async-signal-safe). */
SP_PRIVATE void open_each_unlocked(void (*fn)(sp_profiler *p)) {
  for (sp_profiler *p = g_open; p; p = p->next_open) fn(p);
}

SP_PRIVATE void unlink_open(sp_profiler *p) {
  pthread_mutex_lock(&g_open_lock);
  for (sp_profiler **q = &g_open; *q; q = &(*q)->next_open)
    if (*q == p) {
      *q = p->next_open;
      break;
    }
  pthread_mutex_unlock(&g_open_lock);
}

/* The process-wide locks, taken in this order across fork(2). */
static void at_fork_prepare(void) {
  pthread_mutex_lock(&g_open_lock);
  registry_fork_lock();
  flusher_fork_prepare(); /* the flusher is between flushes */
  grower_fork_prepare();
}
static void at_fork_parent(void) {
  grower_fork_parent();
  flusher_fork_parent();
  registry_fork_unlock();
  pthread_mutex_unlock(&g_open_lock);
}
static void at_fork_child(void) {
  /* A child must never write into its parent's files. Another thread may
   * have held a profiler's lock at fork time, so the child never takes it. */
  for (sp_profiler *p = g_open; p; p = p->next_open) {
    atomic_store(&p->orphaned, 1);
    atomic_store(&p->logging, 0);
    /* The child's copy of the descriptor shares the parent's flock: closing
     * it here keeps the lock the parent's alone, so that the parent can
     * reopen the path while children (DataLoader workers...) live on. */
    release_file(&p->file);
  }
  grower_fork_child();
  flusher_fork_child();
  registry_fork_unlock();
  pthread_mutex_unlock(&g_open_lock);
}
static void global_init(void) {
  file_init();
  pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child);
}

SP_PRIVATE void set_err(sp_profiler *p, const char *a, const char *b, int err) {
  snprintf(p->errmsg, sizeof p->errmsg, "%s%s%s%s", a, b ? b : "",
           err ? ": " : "", err ? strerror(err) : "");
}

/* A failure while running: say it once, stop logging, keep what was written. */
SP_PRIVATE void fail(sp_profiler *p, const char *what, int err) {
  if (p->failed) return;
  p->failed = 1;
  atomic_store(&p->logging, 0);
  set_err(p, what, p->path, err);
  p->failure_unsaid = 1; /* said by tell_failure: no write(2) under the spinlock */
}

/* Says what fail() noted, once, with no lock held: called where the
 * profiler does its syscalls anyway (the flusher, close). */
SP_PRIVATE void tell_failure(sp_profiler *p) {
  char msg[SP_ERRMSG_CAP + 64], n[32];
  lock_acquire(&p->lock);
  int unsaid = p->failure_unsaid;
  p->failure_unsaid = 0;
  if (unsaid) {
    n[fmt_i64(n, p->records)] = 0;
    size_t k = strlen(p->errmsg);
    memcpy(msg, p->errmsg, k + 1);
  }
  /* A summary that wanted space: said with the records' failure; alone
   * once the records show they go on (their file grew), when no logged pass
   * is open (nothing is about to fail), or at close. */
  int full = p->summary_full;
  if (full && !(unsaid || p->closed || p->open_logged == 0 || p->file.size > p->summary_full_size))
    full = 0;
  if (full) p->summary_full = 0;
  int closed = p->closed;
  lock_release(&p->lock);
  char why[SP_ERRMSG_CAP + 64];
  if (unsaid && full) {
    snprintf(why, sizeof why, "%s; nor could the summary file %s be written: %s", n,
             p->summary_path, strerror(full));
    say(msg, "; profiling stopped, records kept: ", why);
  } else if (unsaid) {
    say(msg, "; profiling stopped, records kept: ", n);
  } else if (full) {
    summary_why(why, sizeof why, full, closed);
    say("cannot write summary file ", p->summary_path, why);
  }
  if (dtype_unknown_unsaid())
    say("a tensor has a dtype this build does not know; it is written as "
        "\"torch.unknown<code>\"", NULL, NULL);
}

int sp_summary_path_for(const char *path, char *buf, size_t cap) {
  if (!path || !buf) return SP_ERROR;
  size_t n = strlen(path);
  static const char *const exts[] = {".jsonl", ".json"};
  for (int i = 0; i < 2; i++) {
    size_t k = strlen(exts[i]);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (n > k && strcmp(path + n - k, exts[i]) == 0 &&
        (size_t)(path + n - k - base) > 0) {
      n -= k;
      break;
    }
  }
  static const char tail[] = "_summary.json";
  if (n + sizeof tail > cap) return SP_ERROR;
  memcpy(buf, path, n);
  memcpy(buf + n, tail, sizeof tail);
  return SP_OK;
}

static char *xstrdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

int sp_open(const sp_config *cfg, sp_profiler **out) {
  if (!out) return SP_ERROR;
  *out = NULL;
  pthread_once(&g_once, global_init);
  sp_profiler *p = calloc(1, sizeof *p);
  if (!p) return SP_NOMEM;
  *out = p;
  atomic_init(&p->refs, 1); /* the owner's: sp_free drops it */
  atomic_flag_clear(&p->lock.f);
  pthread_mutex_init(&p->pass_mu, NULL);
  pthread_mutex_init(&p->summary_mu, NULL);
  pthread_mutex_init(&p->grow_mu, NULL);
  p->file.fd = -1;
  p->closed = 1; /* until it opens */
  if (!cfg || !cfg->path || !cfg->path[0]) {
    set_err(p, "no records file path given", NULL, 0);
    return SP_ERROR;
  }
  if (cfg->skip_warmup < 0 || cfg->log_n_passes < 0) {
    set_err(p, "skip_warmup and log_n_passes must be >= 0", NULL, 0);
    return SP_ERROR;
  }
  p->cfg = *cfg;
  p->path = xstrdup(cfg->path);
  size_t cap = strlen(cfg->path) + 32;
  p->summary_path = malloc(cap);
  p->phases = cfg->phases && cfg->phases[0] ? xstrdup(cfg->phases) : NULL;
  p->worker = cfg->worker && cfg->worker[0] ? xstrdup(cfg->worker) : NULL;
  if (!p->path || !p->summary_path || (cfg->phases && cfg->phases[0] && !p->phases) ||
      (cfg->worker && cfg->worker[0] && !p->worker)) {
    set_err(p, "out of memory", NULL, 0);
    return SP_NOMEM;
  }
  sp_summary_path_for(p->path, p->summary_path, cap);
  p->cfg.path = p->path;
  p->cfg.phases = p->phases;
  p->cfg.worker = p->worker;
  /* Not O_TRUNC: first make sure no other live process writes this file
   * (two processes with the same rank name, say). */
  /* Never through a symbolic link: in a shared folder (/tmp) anyone could
   * plant one and have us truncate its target. */
  int fd = open(p->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    if (errno == ELOOP)
      set_err(p, "records file is a symbolic link, not written through: ", p->path, 0);
    else
      set_err(p, "cannot open records file ", p->path, errno);
    return SP_IOERR;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK) {
      set_err(p, "records file is in use by another profiler: ", p->path, 0);
      return SP_BUSY;
    }
    set_err(p, "cannot lock records file ", p->path, e);
    return SP_IOERR;
  }
  if (ftruncate(fd, 0) != 0) {
    set_err(p, "cannot truncate records file ", p->path, errno);
    close(fd);
    return SP_IOERR;
  }
  p->file.fd = fd;
  p->owner_pid = getpid();
  p->closed = 0;
  p->ended_by = "close";
  p->latest_phase = -1;
  static atomic_ullong serials;
  p->serial = atomic_fetch_add(&serials, 1) + 1;
  p->id_text[0] = '1';
  p->id_len = 1;
  /* An earlier run's summary must not stand beside the new records. */
  int e = write_summary_now(p, "running");
  if (e) { /* the records are still worth having: go on without a summary */
    summary_failed(p, e);
    unlink(p->summary_path); /* an old run's, if one is there, must not stay */
  }
  pthread_mutex_lock(&g_open_lock);
  p->next_open = g_open;
  g_open = p;
  pthread_mutex_unlock(&g_open_lock);
  return SP_OK;
}

const char *sp_errmsg(const sp_profiler *p) {
  if (!p) return "out of memory";
  return p->errmsg[0] ? p->errmsg : "not an error";
}
const char *sp_records_path(const sp_profiler *p) { return p ? p->path : NULL; }
const char *sp_summary_path(const sp_profiler *p) {
  return p ? p->summary_path : NULL;
}

int sp_logging(const sp_profiler *p) {
  return atomic_load_explicit(&p->logging, memory_order_relaxed);
}

static int phase_wanted(const sp_profiler *p, const char *phase) {
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

/* The slot of a phase label (added if new: any length, any number of them);
 * -1 only when out of memory. Labels are few: a linear search will do. */
static int phase_index(sp_profiler *p, const char *phase) {
  for (int i = 0; i < p->n_phases; i++)
    if (strcmp(p->phase_stats[i].name, phase) == 0) return i;
  if (p->n_phases == p->phase_cap) {
    int cap = p->phase_cap ? 2 * p->phase_cap : 8;
    struct phase_stat *st = realloc(p->phase_stats, (size_t)cap * sizeof *st);
    if (!st) return -1;
    p->phase_stats = st;
    p->phase_cap = cap;
  }
  char *name = xstrdup(phase);
  if (!name) return -1;
  struct phase_stat *st = &p->phase_stats[p->n_phases];
  st->name = name;
  st->passes = st->calls = 0;
  return p->n_phases++;
}

/* What p->logging holds while some logged pass is open (see sp_logging). */
static int logging_value(const sp_profiler *p) {
  return p->open_logged > 0 && !p->closed && !p->failed
             ? 1 | (p->cfg.args ? SP_LOGGING_ARGS : 0)
             : 0;
}

/* The slot of (graph key, real size), added if new in (key, real) order;
 * -1 only when out of memory. Binary search: a replay's one lookup stays
 * cheap with hundreds of sizes. */
static int graph_index(sp_profiler *p, long long key, long long real) {
  int lo = 0, hi = p->n_graphs;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    const struct graph_stat *m = &p->graphs[mid];
    if (m->key < key || (m->key == key && m->real < real)) lo = mid + 1;
    else hi = mid;
  }
  if (lo < p->n_graphs && p->graphs[lo].key == key && p->graphs[lo].real == real) return lo;
  if (p->n_graphs == p->graph_cap) {
    int cap = p->graph_cap ? 2 * p->graph_cap : 16;
    struct graph_stat *g = realloc(p->graphs, (size_t)cap * sizeof *g);
    if (!g) return -1;
    p->graphs = g;
    p->graph_cap = cap;
  }
  struct graph_stat *g = &p->graphs[lo];
  memmove(g + 1, g, (size_t)(p->n_graphs - lo) * sizeof *g);
  g->key = key;
  g->real = real;
  g->captures = g->replays = 0;
  p->n_graphs++;
  return lo;
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
    ps->phase = phase_index(p, phase);
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
  p->open_passes--;
  if (ps->logged) p->open_logged--;
  for (int i = 0; ps->logged && ps->num && i < SP_OPEN_SLOTS; i++)
    if (p->open_nums[i] == ps->num) {
      p->open_nums[i] = 0;
      break;
    }
  atomic_store(&p->logging, logging_value(p));
  ps->last = p->serial;
  ps->last_logged = ps->logged && !ps->capture && !p->closed;
  ps->p = NULL;
  ps->logged = ps->capture = 0;
  return 1; /* the caller drops the pass's reference, once it lets go of p */
}

/* Opens this thread's pass (its header already made when logged); lets go
 * of the locks the begin took. */
static int pass_opened(sp_profiler *p, struct sp_pass *ps, int logged, int capture) {
  if (!p->closed) {
    sp_ref(p);
    ps->p = p;
    ps->logged = logged;
    ps->capture = capture;
    p->open_passes++;
    if (logged) {
      p->open_logged++;
      for (int i = 0; ps->num && i < SP_OPEN_SLOTS; i++)
        if (!p->open_nums[i]) {
          p->open_nums[i] = ps->num;
          break;
        }
      /* the latest logged pass: threads that inherited the key log into it */
      sp_buf *h = &p->pass_json;
      h->n = 0;
      buf_put(h, ps->header.p, ps->header.n);
      p->latest_phase = ps->phase;
      p->latest_salt = ps->salt;
      if (h->failed) fail(p, "out of memory formatting a pass header for ", 0);
    }
  } else {
    logged = 0;
  }
  atomic_store(&p->logging, logging_value(p));
  logged = logged && !p->failed;
  lock_release(&p->lock);
  pthread_mutex_unlock(&p->pass_mu);
  return logged;
}

/* The start of every begin: this thread's open pass (of any profiler) ends
 * first; p's locks are taken. */
static struct sp_pass *pass_begin_locked(sp_profiler *p) {
  pthread_once(&g_pass_once, pass_key_init);
  struct sp_pass *ps = &t_pass;
  if (!pthread_getspecific(g_pass_key)) pthread_setspecific(g_pass_key, ps); /* pass_free */
  if (ps->p && ps->p != p) sp_pass_end(ps->p); /* another profiler's pass ends */
  pthread_mutex_lock(&p->pass_mu); /* after any trim of the last pass's end */
  lock_acquire(&p->lock);
  if (pass_close(p, ps)) {
    atomic_store(&p->flush_wanted, 1);
    sp_unref(p); /* not the last: the caller holds the owner's reference */
  }
  return ps;
}

int sp_graph_begin(sp_profiler *p, const char *phase, long long key) {
  if (!p || atomic_load(&p->orphaned)) return 0;
  struct sp_pass *ps = pass_begin_locked(p);
  int logged = 0;
  ps->num = 0;
  if (!p->closed && phase_wanted(p, phase) && !p->failed) {
    int g = graph_index(p, key, -1);
    if (g < 0 || !set_pass_header(p, ps, 0, phase, &key)) {
      fail(p, "out of memory formatting a pass header for ", 0);
    } else {
      logged = 1;
      p->graphs[g].captures++;
    }
  }
  return pass_opened(p, ps, logged, 1);
}

int sp_graph_replay(sp_profiler *p, long long key, long long real, long long n) {
  if (!p || n <= 0 || atomic_load(&p->orphaned)) return 0;
  const struct sp_pass *ps = &t_pass;
  int counted = 0;
  lock_acquire(&p->lock);
  if (!p->closed && ps->p == p && ps->logged && !ps->capture && !p->failed) {
    int g = graph_index(p, key, -1);
    /* (key, real) sorts after (key, -1): adding it leaves g in place */
    int r = g >= 0 && real >= 0 ? graph_index(p, key, real) : g;
    if (g >= 0 && r >= 0) {
      if (r != g) p->graphs[r].replays += n;
      p->graphs[g].replays += n;
      counted = 1;
    } else {
      fail(p, "out of memory counting graph replays for ", 0);
    }
  }
  lock_release(&p->lock);
  return counted;
}

int sp_pass_begin(sp_profiler *p, const char *phase) {
  if (!p || atomic_load(&p->orphaned)) return 0;
  struct sp_pass *ps = pass_begin_locked(p);
  int logged = 0;
  ps->num = 0;
  if (!p->closed) {
    p->passes++;
    if (p->passes > p->cfg.skip_warmup && phase_wanted(p, phase) &&
        (p->cfg.log_n_passes == 0 || p->logged_passes < p->cfg.log_n_passes) &&
        !p->failed) {
      logged = 1;
      p->logged_passes++;
      ps->num = p->passes;
      int ok = set_pass_header(p, ps, p->passes, phase, NULL);
      if (ps->phase >= 0) p->phase_stats[ps->phase].passes++;
      if (!ok) {
        fail(p, "out of memory formatting a pass header for ", 0);
        logged = 0;
      }
    }
  }
  return pass_opened(p, ps, logged, 0);
}

int sp_pass_reopen(sp_profiler *p) {
  if (!p || atomic_load(&p->orphaned)) return 0;
  struct sp_pass *ps = &t_pass;
  pthread_mutex_lock(&p->pass_mu);
  lock_acquire(&p->lock);
  if (ps->p) { /* p's pass is still open (nothing to reopen), or another
                  profiler's is (p's is not reopened) */
    int logged = ps->p == p && ps->logged && !p->failed;
    lock_release(&p->lock);
    pthread_mutex_unlock(&p->pass_mu);
    return logged;
  }
  /* this thread's last pass, under the same number, header and phase, not
   * counted again */
  int logged = ps->last == p->serial && ps->last_logged && !p->failed;
  return pass_opened(p, ps, logged, 0);
}

/* The end of sp_pass_end, pass_mu held (let go here). */
static void pass_end_locked(sp_profiler *p) {
  lock_acquire(&p->lock);
  int ended = t_pass.p == p && pass_close(p, &t_pass);
  lock_release(&p->lock);
  pthread_mutex_unlock(&p->pass_mu);
  /* The file is cut to its records and the summary rewritten by the
   * flusher thread, off this thread, once no pass is open (debounced:
   * SP_FLUSH_QUIET, SP_FLUSH_BUSY). */
  if (ended) {
    request_flush(p);
    sp_unref(p); /* the pass's: p may be freed now */
  }
}

void sp_pass_end(sp_profiler *p) {
  if (!p || atomic_load(&p->orphaned)) return;
  pthread_mutex_lock(&p->pass_mu);
  pass_end_locked(p);
}

int sp_pass_end_nowait(sp_profiler *p) {
  if (!p || atomic_load(&p->orphaned)) return 1;
  /* without a flusher thread, request_flush may start one, or flush here */
  if (!flusher_running() || pthread_mutex_trylock(&p->pass_mu) != 0) return 0;
  pass_end_locked(p);
  return 1;
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

void sp_get_stats(sp_profiler *p, sp_stats *o) {
  memset(o, 0, sizeof *o);
  if (!p) return;
  int locked = !atomic_load(&p->orphaned);
  if (locked) lock_acquire(&p->lock);
  counters(p, o);
  if (locked) lock_release(&p->lock);
}

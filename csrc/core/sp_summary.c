/* sp_summary.c -- The summary: snapshot under the lock, written without it.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

/* A tiny buffered writer over a file descriptor: no malloc, so that the
 * fatal-signal path can use it. */
typedef struct fdw {
  int fd, err;
  size_t n;
  char b[4096];
} fdw;

static void fdw_flush(fdw *w) {
  size_t off = 0;
  while (off < w->n && !w->err) {
    ssize_t r = write(w->fd, w->b + off, w->n - off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) w->err = r < 0 ? errno : EIO;
    else off += (size_t)r;
  }
  w->n = 0;
}
static void fdw_put(fdw *w, const char *s, size_t n) {
  while (n) {
    if (w->n == sizeof w->b) fdw_flush(w);
    size_t k = sizeof w->b - w->n < n ? sizeof w->b - w->n : n;
    memcpy(w->b + w->n, s, k);
    w->n += k;
    s += k;
    n -= k;
  }
}
static void fdw_str(fdw *w, const char *s) { fdw_put(w, s, strlen(s)); }
static void fdw_i64(fdw *w, int64_t v) {
  char t[24];
  fdw_put(w, t, text_fmt_i64(t, v));
}
static void fdw_us(fdw *w, int64_t ns) {
  char t[32];
  fdw_put(w, t, (size_t)(text_put_us(t, ns) - t));
}
static void fdw_sink(void *w, const char *s, size_t n) { fdw_put((fdw *)w, s, n); }
static void fdw_json_str(fdw *w, const char *s) { text_json_str(fdw_sink, w, s, strlen(s)); }

/* ids, most frequent first, ties in the order first seen (counts and first
 * are indexed by op id). Shell sort: no allocation (the fatal-signal path
 * sorts too), fine for thousands of operators. */
static void sort_ops(int *ids, int k, const long long *counts, const long long *first) {
  for (int gap = k / 2; gap > 0; gap /= 2)
    for (int i = gap; i < k; i++)
      for (int j = i; j >= gap; j -= gap) {
        int a = ids[j], b = ids[j - gap];
        int before = counts[a] != counts[b] ? counts[a] > counts[b] : first[a] < first[b];
        if (!before) break;
        ids[j] = b;
        ids[j - gap] = a;
      }
}

/* The counters; spinlock held (or a dying process). */
SP_PRIVATE void summary_counters(const sp_profiler *p, sp_stats *o) {
  o->records = p->records;
  o->passes = p->tally.passes;
  o->logged_passes = p->tally.logged_passes;
  o->dedupe_skipped = p->dedupe_skipped;
  o->signatures = p->sigs.signatures;
  o->errors = p->errors;
  o->bytes = (long long)p->file.len;
}

/* The summary's counters (not the per-operator and per-phase tables). */
static void src_counters(const sp_profiler *p, summary_src *s) {
  summary_counters(p, &s->c);
  s->n_phases = p->tally.n_phases;
  s->ended_by = p->ended_by;
  s->failed = p->failed && !p->capped; /* a cap reached is no failure */
  s->capped = p->capped;
  memcpy(s->open_nums, p->tally.open_nums, sizeof s->open_nums);
}

/* Copies what the summary says; spinlock held. Returns 0, or 1 when the
 * copy needs more room: *need_ops op slots and *need_phases phase slots (the
 * caller grows it without the lock and retries). */
static int snapshot_locked(sp_profiler *p, summary_src *s, int *need_ops, int *need_phases,
                           long long *need_sigs, int *need_graphs, int *need_sizes) {
  long long sigs = p->cfg.dedupe ? p->sigs.n_recs : 0;
  if (p->tally.op_cap > p->snap.cap || p->tally.n_phases > p->snap.phase_cap || sigs > p->snap.sig_cap ||
      p->tally.n_graphs > p->snap.graph_cap || p->tally.n_sizes > p->snap.size_cap) {
    *need_ops = p->tally.op_cap;
    *need_phases = p->tally.n_phases;
    *need_sigs = sigs;
    *need_graphs = p->tally.n_graphs;
    *need_sizes = p->tally.n_sizes;
    return 1;
  }
  if (p->tally.n_graphs)
    memcpy(p->snap.graphs, p->tally.graphs, (size_t)p->tally.n_graphs * sizeof p->snap.graphs[0]);
  s->n_graphs = p->tally.n_graphs;
  s->graphs = p->snap.graphs;
  if (p->tally.n_sizes)
    memcpy(p->snap.sizes, p->tally.sizes, (size_t)p->tally.n_sizes * sizeof p->snap.sizes[0]);
  s->n_sizes = p->tally.n_sizes;
  s->sizes = p->snap.sizes;
  long long n = 0;
  for (long long i = 0; i < sigs; i++) {
    const sig_rec *r = &p->sigs.recs[i];
    if (r->rep_id && (r->reps > 1 || r->time)) {
      p->snap.sigs[n].id = r->rep_id;
      p->snap.sigs[n].n = r->reps;
      sig_time_stat(r, &p->snap.sigs[n++].time); /* the median: the middle of a sorted sample */
    }
  }
  s->counts_by_sig = p->snap.sigs;
  s->n_counts = n;
  s->recs = NULL;
  s->n_recs = 0;
  int k = 0;
  for (int id = 0; id < p->tally.op_cap; id++)
    if (p->tally.op_counts[id]) p->snap.ops[k++] = id;
  if (p->tally.op_cap) {
    memcpy(p->snap.counts, p->tally.op_counts, (size_t)p->tally.op_cap * sizeof *p->snap.counts);
    memcpy(p->snap.first, p->tally.op_first, (size_t)p->tally.op_cap * sizeof *p->snap.first);
  }
  if (p->tally.n_phases)
    memcpy(p->snap.phases, p->tally.phase_stats, (size_t)p->tally.n_phases * sizeof p->snap.phases[0]);
  src_counters(p, s);
  s->n_ops = k;
  s->ops = p->snap.ops;
  s->counts = p->snap.counts;
  s->first = p->snap.first;
  s->phases = p->snap.phases;
  return 0;
}

static int grow_snapshot(sp_snapshot *snap, int need, int need_phases, long long need_sigs,
                         int need_graphs, int need_sizes) {
  if (need_sizes > snap->size_cap) {
    struct size_stat *z = realloc(snap->sizes, (size_t)need_sizes * sizeof *z);
    if (!z) return 0;
    snap->sizes = z;
    snap->size_cap = need_sizes;
  }
  if (need_graphs > snap->graph_cap) {
    struct graph_stat *g = realloc(snap->graphs, (size_t)need_graphs * sizeof *g);
    if (!g) return 0;
    snap->graphs = g;
    snap->graph_cap = need_graphs;
  }
  if (need_sigs > snap->sig_cap) {
    long long cap = snap->sig_cap ? snap->sig_cap : 256;
    while (cap < need_sigs) cap *= 2;
    struct sig_count *c = realloc(snap->sigs, (size_t)cap * sizeof *c);
    if (!c) return 0;
    snap->sigs = c;
    snap->sig_cap = cap;
  }
  if (need_phases > snap->phase_cap) {
    struct phase_stat *ph = realloc(snap->phases, (size_t)need_phases * sizeof *ph);
    if (!ph) return 0;
    snap->phases = ph;
    snap->phase_cap = need_phases;
  }
  if (need <= snap->cap) return 1;
  int cap = snap->cap ? snap->cap : 64;
  while (cap < need) cap *= 2;
  int *o = realloc(snap->ops, (size_t)cap * sizeof *o);
  if (o) snap->ops = o;
  long long *c = realloc(snap->counts, (size_t)cap * sizeof *c);
  if (c) snap->counts = c;
  long long *f = realloc(snap->first, (size_t)cap * sizeof *f);
  if (f) snap->first = f;
  if (!o || !c || !f) return 0;
  snap->cap = cap;
  return 1;
}

/* Takes the spinlock to copy the summary's data; summary_mu held (it guards
 * the copy). 0 on out of memory. */
SP_PRIVATE int summary_snapshot(sp_profiler *p, summary_src *s) {
  for (;;) {
    int need_ops = 0, need_phases = 0, need_graphs = 0, need_sizes = 0;
    long long need_sigs = 0;
    lock_acquire(&p->lock);
    if (!snapshot_locked(p, s, &need_ops, &need_phases, &need_sigs, &need_graphs, &need_sizes)) {
      lock_release(&p->lock);
      sort_ops(s->ops, s->n_ops, s->counts, s->first);
      return 1;
    }
    lock_release(&p->lock);
    if (!grow_snapshot(&p->snap, need_ops, need_phases, need_sigs, need_graphs, need_sizes)) return 0;
  }
}

SP_PRIVATE void summary_snapshot_free(sp_snapshot *snap) {
  free(snap->ops);
  free(snap->counts);
  free(snap->first);
  free(snap->phases);
  free(snap->graphs);
  free(snap->sizes);
  free(snap->sigs);
  memset(snap, 0, sizeof *snap);
}

/* The live profiler as a summary, for a dying process: no malloc, no lock. */
SP_PRIVATE void summary_live_src(sp_profiler *p, summary_src *s) {
  int k = 0;
  for (int id = 0; id < p->tally.op_cap; id++)
    if (p->tally.op_counts[id]) p->tally.op_order[k++] = id;
  sort_ops(p->tally.op_order, k, p->tally.op_counts, p->tally.op_first);
  src_counters(p, s);
  s->n_ops = k;
  s->ops = p->tally.op_order;
  s->counts = p->tally.op_counts;
  s->first = p->tally.op_first;
  s->phases = p->tally.phase_stats;
  s->n_graphs = p->tally.n_graphs;
  s->graphs = p->tally.graphs;
  s->n_sizes = p->tally.n_sizes;
  s->sizes = p->tally.sizes;
  s->counts_by_sig = NULL;
  s->n_counts = 0;
  s->recs = p->sigs.recs;
  s->n_recs = p->cfg.dedupe ? p->sigs.n_recs : 0;
}

static atomic_uint g_tmp_seq;

/* Opens a temporary file in p's folder that nobody else can have planted:
 * a short name of our own (pid, sequence), O_EXCL, never through a symlink.
 * Async-signal-safe. Returns the fd, or -1 with errno set. */
static int open_tmp_beside(const sp_profiler *p, char *tmp) {
  for (int attempt = 0; attempt < 8; attempt++) {
    char *o = PUT_LIT(tmp, ".sgl_shapeprof_summary.");
    o = text_put_u64(o, (uint64_t)getpid());
    *o++ = '.';
    o = text_put_u64(o, atomic_fetch_add(&g_tmp_seq, 1));
    memcpy(o, ".tmp", 5);
    int fd = openat(p->dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

/* Writes the summary to a temporary file and renames it into place. No
 * malloc, no locks. */
SP_PRIVATE int summary_write(const sp_profiler *p, const summary_src *s) {
  char tmp[96];
  fdw w;
  w.n = 0;
  w.err = 0;
  w.fd = open_tmp_beside(p, tmp);
  if (w.fd < 0) return errno ? errno : EIO;
  fdw_str(&w, "{\n  \"rank\": ");
  fdw_i64(&w, p->cfg.rank);
  if (p->worker) {
    fdw_str(&w, ",\n  \"worker\": ");
    fdw_str(&w, p->worker);
  }
  if (p->dispatch_key) {
    fdw_str(&w, ",\n  \"dispatch_key\": ");
    fdw_json_str(&w, p->dispatch_key);
  }
  fdw_str(&w, ",\n  \"total_operations\": ");
  fdw_i64(&w, s->c.records);
  fdw_str(&w, ",\n  \"forward_passes\": ");
  fdw_i64(&w, s->c.passes);
  fdw_str(&w, ",\n  \"unique_operations\": ");
  fdw_i64(&w, s->n_ops);
  fdw_str(&w, ",\n  \"operation_counts\": {");
  for (int i = 0; i < s->n_ops; i++) {
    fdw_str(&w, i ? ",\n    " : "\n    ");
    sp_op *op = registry_op(s->ops[i]);
    fdw_json_str(&w, op ? op->name : "unknown");
    fdw_str(&w, ": ");
    fdw_i64(&w, s->counts[s->ops[i]]);
  }
  fdw_str(&w, s->n_ops ? "\n  },\n" : "},\n");
  fdw_str(&w, "  \"dedupe_enabled\": ");
  fdw_str(&w, p->cfg.dedupe ? "true" : "false");
  fdw_str(&w, ",\n  \"dedupe_skipped_count\": ");
  fdw_i64(&w, s->c.dedupe_skipped);
  fdw_str(&w, ",\n  \"unique_op_signatures\": ");
  fdw_i64(&w, s->c.signatures);
  /* what a signature is (FORMAT.md): readers of older files, whose
   * signature was operation and inputs, know their outputs are not all kept */
  fdw_str(&w, ",\n  \"signature\": \"operation, inputs, outputs, arguments but floats, phase, graph\"");
  for (int which = 0; which < 2; which++) {
    fdw_str(&w, which ? ",\n  \"phase_operations\": {" : ",\n  \"phase_passes\": {");
    for (int i = 0; i < s->n_phases; i++) {
      fdw_str(&w, i ? ",\n    " : "\n    ");
      fdw_json_str(&w, s->phases[i].name);
      fdw_str(&w, ": ");
      fdw_i64(&w, which ? s->phases[i].calls : s->phases[i].passes);
    }
    fdw_str(&w, s->n_phases ? "\n  }" : "}");
  }
  if (p->cfg.dedupe) {
    /* call_id of a record -> the calls it stands for, where more than one */
    fdw_str(&w, ",\n  \"signature_counts\": {");
    int any = 0;
    long long n = s->recs ? s->n_recs : s->n_counts;
    for (long long i = 0; i < n; i++) {
      long long id = s->recs ? s->recs[i].rep_id : s->counts_by_sig[i].id;
      long long reps = s->recs ? s->recs[i].reps : s->counts_by_sig[i].n;
      if (!id || reps < 2) continue;
      fdw_str(&w, any++ ? ", \"" : "\"");
      fdw_i64(&w, id);
      fdw_str(&w, "\": ");
      fdw_i64(&w, reps);
    }
    fdw_str(&w, "}");
  }
  fdw_str(&w, ",\n  \"timed\": ");
  fdw_str(&w, p->cfg.time ? "true" : "false");
  if (p->cfg.time) {
    fdw_str(&w, ",\n  \"time_origin_ns\": "); /* records' start_us count from it */
    fdw_i64(&w, p->time_origin);
  }
  if (p->cfg.dedupe && p->cfg.time) {
    /* call_id of a record -> the times of the calls it stands for */
    fdw_str(&w, ",\n  \"signature_times\": {");
    int any = 0;
    long long n = s->recs ? s->n_recs : s->n_counts;
    for (long long i = 0; i < n; i++) {
      struct time_stat ts;
      long long id = s->recs ? s->recs[i].rep_id : s->counts_by_sig[i].id;
      if (s->recs) sig_time_stat(&s->recs[i], &ts);
      else ts = s->counts_by_sig[i].time;
      if (!id || !ts.n) continue;
      fdw_str(&w, any++ ? ",\n    \"" : "\n    \"");
      fdw_i64(&w, id);
      fdw_str(&w, "\": {\"count\": ");
      fdw_i64(&w, ts.n);
      fdw_str(&w, ", \"total_us\": ");
      fdw_us(&w, ts.total);
      fdw_str(&w, ", \"min_us\": ");
      fdw_us(&w, ts.min);
      fdw_str(&w, ", \"median_us\": ");
      fdw_us(&w, ts.median);
      fdw_str(&w, ", \"max_us\": ");
      fdw_us(&w, ts.max);
      fdw_str(&w, "}");
    }
    fdw_str(&w, any ? "\n  }" : "}");
  }
  if (s->n_graphs) {
    /* graph key -> captures recorded, replays counted in logged passes, and
     * those replays per real size: the entries of a key follow its own */
    fdw_str(&w, ",\n  \"graphs\": {");
    int keys = 0, sizes = 0;
    long long cur = 0; /* the key whose object is open */
    for (int i = 0; i < s->n_graphs; i++) {
      const struct graph_stat *g = &s->graphs[i];
      if (g->real < 0) {
        cur = g->key;
        if (sizes) fdw_str(&w, "}");
        if (keys) fdw_str(&w, "}");
        fdw_str(&w, keys++ ? ",\n    \"" : "\n    \"");
        fdw_i64(&w, g->key);
        fdw_str(&w, "\": {\"captures\": ");
        fdw_i64(&w, g->captures);
        fdw_str(&w, ", \"replays\": ");
        fdw_i64(&w, g->replays);
        sizes = 0;
      } else if (keys && g->key == cur) {
        fdw_str(&w, sizes++ ? ", \"" : ", \"real_sizes\": {\"");
        fdw_i64(&w, g->real);
        fdw_str(&w, "\": ");
        fdw_i64(&w, g->replays);
      }
    }
    if (sizes) fdw_str(&w, "}");
    if (keys) fdw_str(&w, "}");
    fdw_str(&w, "\n  }");
  }
  if (s->n_sizes) {
    /* phase -> the server's batch size -> logged passes of that size that
     * replayed no graph (they ran eagerly); sorted by phase slot */
    fdw_str(&w, ",\n  \"eager_sizes\": {");
    int phases = 0, sizes = 0, cur = -2; /* the phase slot whose object is open */
    for (int i = 0; i < s->n_sizes; i++) {
      const struct size_stat *z = &s->sizes[i];
      if (z->phase < 0 || z->phase >= s->n_phases) continue; /* a pass without a phase label */
      if (z->phase != cur) {
        if (phases) fdw_str(&w, "}");
        fdw_str(&w, phases++ ? ",\n    " : "\n    ");
        fdw_json_str(&w, s->phases[z->phase].name);
        fdw_str(&w, ": {");
        cur = z->phase;
        sizes = 0;
      }
      fdw_str(&w, sizes++ ? ", \"" : "\"");
      fdw_i64(&w, z->size);
      fdw_str(&w, "\": ");
      fdw_i64(&w, z->passes);
    }
    if (phases) fdw_str(&w, "}");
    fdw_str(&w, phases ? "\n  }" : "}");
  }
  fdw_str(&w, ",\n  \"format_version\": 1");
  fdw_str(&w, ",\n  \"logged_forward_passes\": ");
  fdw_i64(&w, s->c.logged_passes);
  fdw_str(&w, ",\n  \"error_count\": ");
  fdw_i64(&w, s->c.errors);
  fdw_str(&w, ",\n  \"records_bytes\": ");
  fdw_i64(&w, s->c.bytes);
  fdw_str(&w, ",\n  \"records_file\": ");
  fdw_json_str(&w, p->path);
  fdw_str(&w, ",\n  \"ended_by\": ");
  fdw_json_str(&w, s->ended_by);
  /* the forward passes open as this was written (a crash: the threads it interrupted) */
  fdw_str(&w, ",\n  \"open_passes\": [");
  for (int i = 0, k = 0; i < SP_OPEN_SLOTS; i++)
    if (s->open_nums[i]) {
      if (k++) fdw_str(&w, ", ");
      fdw_i64(&w, s->open_nums[i]);
    }
  fdw_str(&w, "]");
  fdw_str(&w, ",\n  \"profiler_failed\": ");
  fdw_str(&w, s->failed ? "true" : "false");
  /* the cap (immutable once open) and whether recording stopped at it */
  fdw_str(&w, ",\n  \"max_records_bytes\": ");
  if (p->file.cap) fdw_i64(&w, (long long)p->file.cap);
  else fdw_str(&w, "null");
  fdw_str(&w, ",\n  \"stopped_at_cap\": ");
  fdw_str(&w, s->capped ? "true" : "false");
  fdw_str(&w, "\n}\n");
  fdw_flush(&w);
  int err = w.err;
  if (close(w.fd) != 0 && !err) err = errno;
  if (!err && renameat(p->dir_fd, tmp, p->dir_fd, summary_base(p)) != 0) err = errno;
  if (err) unlinkat(p->dir_fd, tmp, 0);
  return err;
}

/* Writes the summary as it stands; summary_mu held (or p not yet shared),
 * spinlock not. */
SP_PRIVATE int summary_write_now(sp_profiler *p, const char *ended_by) {
  summary_src s;
  if (!summary_snapshot(p, &s)) return ENOMEM;
  if (ended_by) s.ended_by = ended_by;
  return summary_write(p, &s);
}

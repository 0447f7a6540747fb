/* sp_tally.c -- What the passes ran: operators counted by id, in first-seen
 * order, and by phase; and the tables the passes are counted in (phases,
 * graphs, sizes: grown, filled and freed here, counted by sp_pass.c).
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

static SP_OUTLINE int grow_op_tables(sp_tally *t, int id) {
  int cap = t->op_cap ? t->op_cap : 256;
  while (cap <= id) cap *= 2;
  long long *c = realloc(t->op_counts, (size_t)cap * sizeof *c);
  if (c) t->op_counts = c;
  long long *f = realloc(t->op_first, (size_t)cap * sizeof *f);
  if (f) t->op_first = f;
  int *o = realloc(t->op_order, (size_t)cap * sizeof *o);
  if (o) t->op_order = o;
  if (!c || !f || !o) return 0;
  memset(c + t->op_cap, 0, (size_t)(cap - t->op_cap) * sizeof *c);
  t->op_cap = cap;
  return 1;
}

/* Counts a call of operator id observed in a pass of phase slot phase;
 * 0 when out of memory. */
SP_PRIVATE int tally_count_op(sp_tally *t, int id, int phase) {
  if (id >= t->op_cap && !grow_op_tables(t, id)) return 0;
  if (t->op_counts[id]++ == 0) t->op_first[id] = t->ops_seen_order++;
  if (phase >= 0) t->phase_stats[phase].calls++;
  return 1;
}

/* Takes back tally_count_op (a call counted before it was known to be logged). */
SP_PRIVATE void tally_uncount_op(sp_tally *t, int id, int phase) {
  t->op_counts[id]--;
  if (phase >= 0) t->phase_stats[phase].calls--;
}

/* Adds what another profiler's passes ran (a kept graph capture's calls):
 * its operators' counts, in its first-seen order after ours, and its calls
 * by phase label. The graph and size tables are the caller's. 0 when out
 * of memory (then part of it may be added). */
SP_PRIVATE int tally_merge(sp_tally *into, const sp_tally *from) {
  long long order = 0;
  for (;;) { /* from's operators in their first-seen order */
    int next = -1;
    for (int id = 0; id < from->op_cap; id++)
      if (from->op_counts[id] && from->op_first[id] >= order &&
          (next < 0 || from->op_first[id] < from->op_first[next]))
        next = id;
    if (next < 0) break;
    order = from->op_first[next] + 1;
    if (next >= into->op_cap && !grow_op_tables(into, next)) return 0;
    if (into->op_counts[next] == 0) into->op_first[next] = into->ops_seen_order++;
    into->op_counts[next] += from->op_counts[next];
  }
  for (int i = 0; i < from->n_phases; i++) {
    int slot = tally_phase(into, from->phase_stats[i].name);
    if (slot < 0) return 0;
    into->phase_stats[slot].calls += from->phase_stats[i].calls;
  }
  return 1;
}

/* ---- the pass tables: phases, graphs, sizes ---- */

SP_PRIVATE int tally_phase(sp_tally *t, const char *phase) {
  for (int i = 0; i < t->n_phases; i++)
    if (strcmp(t->phase_stats[i].name, phase) == 0) return i;
  if (t->n_phases == t->phase_cap) {
    int cap = t->phase_cap ? 2 * t->phase_cap : 8;
    struct phase_stat *st = realloc(t->phase_stats, (size_t)cap * sizeof *st);
    if (!st) return -1;
    t->phase_stats = st;
    t->phase_cap = cap;
  }
  char *name = text_strdup(phase);
  if (!name) return -1;
  struct phase_stat *st = &t->phase_stats[t->n_phases];
  st->name = name;
  st->passes = st->calls = 0;
  return t->n_phases++;
}

/* The one sorted insert of the tally's tables: the slot of row's key in
 * *rows (n rows of size bytes, cap allocated, sorted by cmp, which compares
 * keys only), row copied in at its place if the key is new (its counts
 * zero). -1 only when out of memory. Binary search: a graph replay's one
 * lookup stays cheap with hundreds of sizes. */
static int sorted_slot(void **rows, int *n, int *cap, size_t size, const void *row,
                       int (*cmp)(const void *a, const void *b)) {
  char *base = *rows;
  int lo = 0, hi = *n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (cmp(base + (size_t)mid * size, row) < 0) lo = mid + 1;
    else hi = mid;
  }
  if (lo < *n && cmp(base + (size_t)lo * size, row) == 0) return lo;
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 16;
    char *grown = realloc(base, (size_t)c * size);
    if (!grown) return -1;
    *rows = base = grown;
    *cap = c;
  }
  memmove(base + (size_t)(lo + 1) * size, base + (size_t)lo * size, (size_t)(*n - lo) * size);
  memcpy(base + (size_t)lo * size, row, size);
  (*n)++;
  return lo;
}

#define TALLY_CMP(a, b) ((a) < (b) ? -1 : (a) > (b))

/* Graph rows by (key, real). */
static int graph_cmp(const void *a, const void *b) {
  const struct graph_stat *x = a, *y = b;
  return x->key != y->key ? TALLY_CMP(x->key, y->key) : TALLY_CMP(x->real, y->real);
}

/* Size rows by (phase, size). */
static int size_cmp(const void *a, const void *b) {
  const struct size_stat *x = a, *y = b;
  return x->phase != y->phase ? TALLY_CMP(x->phase, y->phase) : TALLY_CMP(x->size, y->size);
}

SP_PRIVATE int tally_graph(sp_tally *t, long long key, long long real) {
  const struct graph_stat row = {.key = key, .real = real};
  void *rows = t->graphs;
  int slot = sorted_slot(&rows, &t->n_graphs, &t->graph_cap, sizeof row, &row, graph_cmp);
  t->graphs = rows;
  return slot;
}

SP_PRIVATE int tally_size(sp_tally *t, int phase, long long size) {
  const struct size_stat row = {.phase = phase, .size = size};
  void *rows = t->sizes;
  int slot = sorted_slot(&rows, &t->n_sizes, &t->size_cap, sizeof row, &row, size_cmp);
  t->sizes = rows;
  return slot;
}

SP_PRIVATE void tally_free(sp_tally *t) {
  free(t->op_counts);
  free(t->op_first);
  free(t->op_order);
  for (int i = 0; i < t->n_phases; i++) free(t->phase_stats[i].name);
  free(t->phase_stats);
  free(t->graphs);
  free(t->sizes);
  memset(t, 0, sizeof *t);
}

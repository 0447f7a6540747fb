/* sp_tally.c -- What the passes ran: operators counted by id, in first-seen
 * order, and by phase (the phase and graph tables themselves are sp_pass.c's).
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

/* sp_sigtable.c -- The signature table: hashing, lookup, the arena and text caches.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

/* ---- signatures -------------------------------------------------------- */
SP_PRIVATE uint64_t sig_hash(const int64_t *w, size_t n) {
  /* One multiply per word, one final mix: these are short int arrays. Two
   * lanes, so that the multiplies of neighbouring words overlap. */
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ n, g = 0xC2B2AE3D27D4EB4FULL;
  size_t i = 0;
  for (; i + 1 < n; i += 2) {
    h = (h + (uint64_t)w[i]) * 0xff51afd7ed558ccdULL;
    g = (g + (uint64_t)w[i + 1]) * 0x9FB21C651E98DF25ULL;
  }
  if (i < n) h = (h + (uint64_t)w[i]) * 0xff51afd7ed558ccdULL;
  h ^= (g << 31 | g >> 33);
  h ^= h >> 32;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 29;
  return h;
}

static int words_equal(const int64_t *a, const int64_t *b, size_t n) {
  return memcmp(a, b, n * sizeof *a) == 0; /* libc's is vectorised */
}

/* The primary record of an inputs key, or -1. */
SP_PRIVATE long sig_find(const sp_profiler *p, uint64_t h, const int64_t *w, size_t n) {
  if (!p->slot_cap) return -1;
  size_t mask = p->slot_cap - 1;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    uint32_t k = p->slots[i];
    if (!k) return -1;
    const sig_rec *r = &p->recs[k - 1];
    if (r->hash == h && r->w_n == n && words_equal(r->w, w, n))
      return (long)(k - 1);
  }
}

/* sig_find, for a key salted with salt, but guess (a record, or -1) is
 * tried first: a model runs the same calls in the same order pass after
 * pass, and a loop the same call, so the record that followed the thread's
 * previous call last time is nearly always right for a repeat, and comparing
 * the key costs less than hashing it. */
SP_PRIVATE long sig_lookup(const sp_profiler *p, long guess, uint64_t salt, const int64_t *w,
                           size_t n, uint64_t *h) {
  if (guess >= 0 && guess < p->n_recs) {
    const sig_rec *r = &p->recs[guess];
    if (r->prim < 0 && r->salt == salt && r->w_n == n && words_equal(r->w, w, n)) {
      *h = r->hash;
      return guess;
    }
  }
  *h = sig_hash(w, n) ^ salt;
  return sig_find(p, *h, w, n);
}

/* A variant's hash: its inputs key's, mixed with its outputs'. */
SP_PRIVATE uint64_t variant_hash(uint64_t key_hash, const int64_t *out, size_t n) {
  return key_hash ^ (sig_hash(out, n) * 0x94D049BB133111EBULL + 0x2545F4914F6CDD1DULL);
}

/* The record of an inputs key with other outputs than its primary's, or -1. */
SP_PRIVATE long variant_find(const sp_profiler *p, uint64_t h, const int64_t *w, size_t n,
                         const int64_t *out, size_t out_n) {
  if (!p->vslot_cap) return -1;
  size_t mask = p->vslot_cap - 1;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    uint32_t k = p->vslots[i];
    if (!k) return -1;
    const sig_rec *r = &p->recs[k - 1];
    if (r->hash == h && r->w_n == n && r->out_w_n == out_n &&
        words_equal(r->w, w, n) && words_equal(r->out_w, out, out_n))
      return (long)(k - 1);
  }
}

/* The outputs of record r are these. */
SP_PRIVATE int outputs_equal(const sig_rec *r, const sp_enc *out) {
  return r->out_w_n == out->n && words_equal(r->out_w, out->w, out->n);
}

/* Appends n words to the arena; returns where they are (they never move),
 * or NULL. Chunks double up to 8 MiB. */
static const int64_t *arena_put(sp_profiler *p, const int64_t *w, size_t n) {
  struct arena_chunk *c = p->arena;
  if (!c || c->n + n > c->cap) {
    size_t cap = c ? (c->cap < ((size_t)1 << 20) ? c->cap * 2 : c->cap) : 4096;
    if (cap < n) cap = n;
    c = malloc(sizeof *c + cap * sizeof *c->w);
    if (!c) return NULL;
    c->prev = p->arena;
    c->n = 0;
    c->cap = cap;
    p->arena = c;
  }
  int64_t *at = c->w + c->n;
  memcpy(at, w, n * sizeof *w);
  c->n += n;
  return at;
}

SP_PRIVATE void arena_free(sp_profiler *p) {
  while (p->arena) {
    struct arena_chunk *prev = p->arena->prev;
    free(p->arena);
    p->arena = prev;
  }
}

/* Appends text; returns its offset, or (size_t)-1. */
SP_PRIVATE size_t text_put(sp_profiler *p, const char *s, size_t n) {
  if (p->text_n + n > p->text_cap) {
    size_t cap = p->text_cap ? p->text_cap : 16384;
    while (cap < p->text_n + n) cap *= 2;
    char *t = realloc(p->text, cap);
    if (!t) return (size_t)-1;
    p->text = t;
    p->text_cap = cap;
  }
  memcpy(p->text + p->text_n, s, n);
  p->text_n += n;
  return p->text_n - n;
}

/* Room for one more entry in an index of records (primaries: slots;
 * variants: vslots), kept at most half full; 0 when out of memory. */
static int index_room(sp_profiler *p, int variants) {
  uint32_t **slots = variants ? &p->vslots : &p->slots;
  size_t *cap = variants ? &p->vslot_cap : &p->slot_cap;
  size_t count = variants ? p->n_variants : p->n_prims;
  if ((count + 1) * 2 <= *cap) return 1;
  size_t ncap = *cap ? *cap * 2 : 1024;
  uint32_t *t = calloc(ncap, sizeof *t);
  if (!t) return 0;
  for (long long k = 0; k < p->n_recs; k++) {
    if ((p->recs[k].prim >= 0) != variants) continue;
    size_t j = (size_t)p->recs[k].hash & (ncap - 1);
    while (t[j]) j = (j + 1) & (ncap - 1);
    t[j] = (uint32_t)(k + 1);
  }
  free(*slots);
  *slots = t;
  *cap = ncap;
  return 1;
}

/* A new record, indexed; its index, or -1 when out of memory. */
static long rec_add(sp_profiler *p, uint64_t h, const int64_t *w, size_t w_n, long prim) {
  if (p->n_recs >= UINT32_MAX - 1 || !index_room(p, prim >= 0)) return -1;
  if ((size_t)p->n_recs == p->recs_cap) {
    size_t cap = p->recs_cap ? p->recs_cap * 2 : 512;
    sig_rec *r = realloc(p->recs, cap * sizeof *r);
    if (!r) return -1;
    p->recs = r;
    p->recs_cap = cap;
  }
  long k = (long)p->n_recs++;
  sig_rec *r = &p->recs[k];
  memset(r, 0, sizeof *r);
  r->hash = h;
  r->w = w;
  r->w_n = w_n;
  r->prim = prim;
  uint32_t *slots = prim >= 0 ? p->vslots : p->slots;
  size_t mask = (prim >= 0 ? p->vslot_cap : p->slot_cap) - 1;
  size_t i = (size_t)h & mask;
  while (slots[i]) i = (i + 1) & mask;
  slots[i] = (uint32_t)(k + 1);
  if (prim >= 0) p->n_variants++;
  else p->n_prims++;
  return k;
}

/* Adds the primary record of an inputs key known to be absent, without
 * outputs yet (the call is in flight); its index or -1 (NOMEM). */
SP_PRIVATE long sig_add(sp_profiler *p, uint64_t h, uint64_t salt, const int64_t *w, size_t n) {
  const int64_t *at = arena_put(p, w, n);
  long k = at ? rec_add(p, h, at, n, -1) : -1;
  if (k >= 0) p->recs[k].salt = salt;
  return k;
}

/* Record k's outputs are out: it is a signature now. 0 when out of memory. */
SP_PRIVATE int sig_set_outputs(sp_profiler *p, long k, const sp_enc *out) {
  const int64_t *at = arena_put(p, out->w, out->n);
  if (!at) return 0;
  p->recs[k].out_w = at;
  p->recs[k].out_w_n = out->n;
  p->recs[k].has_out = 1;
  p->signatures++;
  return 1;
}

/* Adds the signature of primary prim's inputs with other outputs; its
 * index or -1 (NOMEM). */
SP_PRIVATE long variant_add(sp_profiler *p, uint64_t h, long prim, const sp_enc *out) {
  long k = rec_add(p, h, p->recs[prim].w, p->recs[prim].w_n, prim);
  if (k >= 0 && !sig_set_outputs(p, k, out)) return -1;
  return k;
}

/* Counts a call of operator id observed in a pass of phase slot phase. */
static SP_OUTLINE int grow_op_tables(sp_profiler *p, int id) {
  int cap = p->op_cap ? p->op_cap : 256;
  while (cap <= id) cap *= 2;
  long long *c = realloc(p->op_counts, (size_t)cap * sizeof *c);
  if (c) p->op_counts = c;
  long long *f = realloc(p->op_first, (size_t)cap * sizeof *f);
  if (f) p->op_first = f;
  int *o = realloc(p->op_order, (size_t)cap * sizeof *o);
  if (o) p->op_order = o;
  if (!c || !f || !o) return 0;
  memset(c + p->op_cap, 0, (size_t)(cap - p->op_cap) * sizeof *c);
  p->op_cap = cap;
  return 1;
}

SP_PRIVATE int count_op(sp_profiler *p, int id, int phase) {
  if (id >= p->op_cap && !grow_op_tables(p, id)) return 0;
  if (p->op_counts[id]++ == 0) p->op_first[id] = p->ops_seen_order++;
  if (phase >= 0) p->phase_stats[phase].calls++;
  return 1;
}

/* Takes back count_op (a call counted before it was known to be logged). */
SP_PRIVATE void uncount_op(sp_profiler *p, int id, int phase) {
  p->op_counts[id]--;
  if (phase >= 0) p->phase_stats[phase].calls--;
}

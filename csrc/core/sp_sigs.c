/* sp_sigs.c -- The signature table: hashing, lookup, the arena and text caches.
 * Part of the core amalgamation (sp_core.c includes every part, in order,
 * after sp_internal.h): not compiled on its own. */

/* ---- signatures -------------------------------------------------------- */
static uint64_t sig_hash(const int64_t *w, size_t n) {
  /* One multiply per word, one final mix: these are short int arrays. */
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
  for (size_t i = 0; i < n; i++) h = (h + (uint64_t)w[i]) * 0xff51afd7ed558ccdULL;
  h ^= h >> 32;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 29;
  return h;
}

static int words_equal(const int64_t *a, const int64_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

static long sig_find(const sp_profiler *p, uint64_t h, const int64_t *w, size_t n) {
  if (!p->slot_cap) return -1;
  size_t mask = p->slot_cap - 1;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    uint32_t k = p->slots[i];
    if (!k) return -1;
    const sig_rec *r = &p->recs[k - 1];
    if (r->hash == h && r->w_n == n && words_equal(p->arena + r->w_at, w, n))
      return (long)(k - 1);
  }
}

/* Appends n words to the arena; returns their offset, or (size_t)-1. */
static size_t arena_put(sp_profiler *p, const int64_t *w, size_t n) {
  if (p->arena_n + n > p->arena_cap) {
    size_t cap = p->arena_cap ? p->arena_cap : 4096;
    while (cap < p->arena_n + n) cap *= 2;
    int64_t *a = realloc(p->arena, cap * sizeof *a);
    if (!a) return (size_t)-1;
    p->arena = a;
    p->arena_cap = cap;
  }
  memcpy(p->arena + p->arena_n, w, n * sizeof *w);
  p->arena_n += n;
  return p->arena_n - n;
}

/* Appends text; returns its offset, or (size_t)-1. */
static size_t text_put(sp_profiler *p, const char *s, size_t n) {
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

/* Adds a signature known to be absent; returns its index or -1 (NOMEM). */
static long sig_add(sp_profiler *p, uint64_t h, const int64_t *w, size_t n) {
  size_t count = (size_t)p->signatures;
  if (count >= UINT32_MAX - 1) return -1;
  if ((count + 1) * 2 > p->slot_cap) {
    size_t cap = p->slot_cap ? p->slot_cap * 2 : 1024;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t k = 0; k < count; k++) {
      size_t j = (size_t)p->recs[k].hash & (cap - 1);
      while (t[j]) j = (j + 1) & (cap - 1);
      t[j] = (uint32_t)(k + 1);
    }
    free(p->slots);
    p->slots = t;
    p->slot_cap = cap;
  }
  if (count == p->recs_cap) {
    size_t cap = p->recs_cap ? p->recs_cap * 2 : 512;
    sig_rec *r = realloc(p->recs, cap * sizeof *r);
    if (!r) return -1;
    p->recs = r;
    p->recs_cap = cap;
  }
  size_t at = arena_put(p, w, n);
  if (at == (size_t)-1) return -1;
  sig_rec *r = &p->recs[count];
  memset(r, 0, sizeof *r);
  r->hash = h;
  r->w_at = at;
  r->w_n = n;
  size_t mask = p->slot_cap - 1;
  size_t i = (size_t)h & mask;
  while (p->slots[i]) i = (i + 1) & mask;
  p->slots[i] = (uint32_t)(count + 1);
  p->signatures++;
  return (long)count;
}

static int count_op(sp_profiler *p, int id) {
  if (id >= p->op_cap) {
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
  }
  if (p->op_counts[id]++ == 0) p->op_first[id] = p->ops_seen_order++;
  if (p->cur_phase >= 0) p->phase_stats[p->cur_phase].calls++;
  return 1;
}

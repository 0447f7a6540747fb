/* sp_sigtable.c -- The signature table: hashing, lookup, the arena and text caches.
 * It takes only the table (sp_sigtable): the caller says what a failure means.
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
SP_PRIVATE long sig_find(const sp_sigtable *tab, uint64_t h, const int64_t *w, size_t n) {
  if (!tab->slot_cap) return -1;
  size_t mask = tab->slot_cap - 1;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    uint32_t k = tab->slots[i];
    if (!k) return -1;
    const sig_rec *r = &tab->recs[k - 1];
    if (r->hash == h && r->w_n == n && words_equal(r->w, w, n))
      return (long)(k - 1);
  }
}

/* sig_find, for a key salted with salt, but guess (a record, or -1) is
 * tried first: a model runs the same calls in the same order pass after
 * pass, and a loop the same call, so the record that followed the thread's
 * previous call last time is nearly always right for a repeat, and comparing
 * the key costs less than hashing it. */
SP_PRIVATE long sig_lookup(const sp_sigtable *tab, long guess, uint64_t salt, const int64_t *w,
                           size_t n, uint64_t *h) {
  if (guess >= 0 && guess < tab->n_recs) {
    const sig_rec *r = &tab->recs[guess];
    if (r->prim < 0 && r->salt == salt && r->w_n == n && words_equal(r->w, w, n)) {
      *h = r->hash;
      return guess;
    }
  }
  *h = sig_hash(w, n) ^ salt;
  return sig_find(tab, *h, w, n);
}

/* A variant's hash: its inputs key's, mixed with its outputs'. */
SP_PRIVATE uint64_t sig_variant_hash(uint64_t key_hash, const int64_t *out, size_t n) {
  return key_hash ^ (sig_hash(out, n) * 0x94D049BB133111EBULL + 0x2545F4914F6CDD1DULL);
}

/* The record of an inputs key with other outputs than its primary's, or -1. */
SP_PRIVATE long sig_variant_find(const sp_sigtable *tab, uint64_t h, const int64_t *w, size_t n,
                         const int64_t *out, size_t out_n) {
  if (!tab->vslot_cap) return -1;
  size_t mask = tab->vslot_cap - 1;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    uint32_t k = tab->vslots[i];
    if (!k) return -1;
    const sig_rec *r = &tab->recs[k - 1];
    if (r->hash == h && r->w_n == n && r->out_w_n == out_n &&
        words_equal(r->w, w, n) && words_equal(r->out_w, out, out_n))
      return (long)(k - 1);
  }
}

/* The outputs of record r are these. */
SP_PRIVATE int sig_outputs_equal(const sig_rec *r, const sp_enc *out) {
  return r->out_w_n == out->n && words_equal(r->out_w, out->w, out->n);
}

/* Appends n words to the arena; returns where they are (they never move),
 * or NULL. Chunks double up to 8 MiB. */
static const int64_t *arena_put(sp_sigtable *tab, const int64_t *w, size_t n) {
  struct arena_chunk *c = tab->arena;
  if (!c || c->n + n > c->cap) {
    size_t cap = c ? (c->cap < ((size_t)1 << 20) ? c->cap * 2 : c->cap) : 4096;
    if (cap < n) cap = n;
    c = malloc(sizeof *c + cap * sizeof *c->w);
    if (!c) return NULL;
    c->prev = tab->arena;
    c->n = 0;
    c->cap = cap;
    tab->arena = c;
  }
  int64_t *at = c->w + c->n;
  memcpy(at, w, n * sizeof *w);
  c->n += n;
  return at;
}

SP_PRIVATE int sig_time_add(sig_rec *r, int64_t ns) {
  sig_time *tm = r->time;
  if (!tm || (tm->k == tm->cap && tm->cap < SIG_TIME_SAMPLES)) {
    int cap = tm ? tm->cap * 4 : 4;
    if (cap > SIG_TIME_SAMPLES) cap = SIG_TIME_SAMPLES;
    sig_time *g = realloc(tm, sizeof *g + (size_t)cap * sizeof g->s[0]);
    if (!g) return 0;
    if (!tm) memset(g, 0, sizeof *g);
    g->cap = cap;
    r->time = tm = g;
  }
  if (!tm->n || ns < tm->min) tm->min = ns;
  if (!tm->n || ns > tm->max) tm->max = ns;
  tm->n++;
  tm->total += ns;
  if (tm->k == tm->cap) {
    /* Reservoir sampling: the n-th call takes a uniformly chosen sample's
     * place with chance k/n. A fixed hash of (signature, n) picks it, so the
     * same run keeps the same sample. */
    uint64_t x = (uint64_t)tm->n * 0x9E3779B97F4A7C15ULL ^ r->hash;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 29;
    uint64_t j = x % (uint64_t)tm->n;
    if (j >= (uint64_t)tm->k) return 1;
    /* the sample there leaves: the ones after it slide down */
    memmove(tm->s + j, tm->s + j + 1, (size_t)(tm->k - (int)j - 1) * sizeof tm->s[0]);
    tm->k--;
  }
  int i = tm->k; /* insertion, ascending */
  while (i > 0 && tm->s[i - 1] > ns) {
    tm->s[i] = tm->s[i - 1];
    i--;
  }
  tm->s[i] = ns;
  tm->k++;
  return 1;
}

SP_PRIVATE void sig_time_stat(const sig_rec *r, struct time_stat *out) {
  const sig_time *tm = r->time;
  memset(out, 0, sizeof *out);
  if (!tm || !tm->n || !tm->k) return;
  out->n = tm->n;
  out->total = tm->total;
  out->min = tm->min;
  out->max = tm->max;
  int h = tm->k / 2;
  out->median = tm->k % 2 ? tm->s[h] : tm->s[h - 1] + (tm->s[h] - tm->s[h - 1]) / 2;
}

SP_PRIVATE void sig_table_free(sp_sigtable *tab) {
  for (long long i = 0; i < tab->n_recs; i++) free(tab->recs[i].time);
  while (tab->arena) {
    struct arena_chunk *prev = tab->arena->prev;
    free(tab->arena);
    tab->arena = prev;
  }
  free(tab->recs);
  free(tab->slots);
  free(tab->vslots);
  free(tab->text);
  memset(tab, 0, sizeof *tab);
}

/* Appends text; returns its offset, or (size_t)-1. */
SP_PRIVATE size_t sig_text_put(sp_sigtable *tab, const char *s, size_t n) {
  if (tab->text_n + n > tab->text_cap) {
    size_t cap = tab->text_cap ? tab->text_cap : 16384;
    while (cap < tab->text_n + n) cap *= 2;
    char *t = realloc(tab->text, cap);
    if (!t) return (size_t)-1;
    tab->text = t;
    tab->text_cap = cap;
  }
  memcpy(tab->text + tab->text_n, s, n);
  tab->text_n += n;
  return tab->text_n - n;
}

/* Room for one more entry in an index of records (primaries: slots;
 * variants: vslots), kept at most half full; 0 when out of memory. */
static int index_room(sp_sigtable *tab, int variants) {
  uint32_t **slots = variants ? &tab->vslots : &tab->slots;
  size_t *cap = variants ? &tab->vslot_cap : &tab->slot_cap;
  size_t count = variants ? tab->n_variants : tab->n_prims;
  if ((count + 1) * 2 <= *cap) return 1;
  size_t ncap = *cap ? *cap * 2 : 1024;
  uint32_t *t = calloc(ncap, sizeof *t);
  if (!t) return 0;
  for (long long k = 0; k < tab->n_recs; k++) {
    if (tab->recs[k].prim == SIG_UNINDEXED || (tab->recs[k].prim >= 0) != variants) continue;
    size_t j = (size_t)tab->recs[k].hash & (ncap - 1);
    while (t[j]) j = (j + 1) & (ncap - 1);
    t[j] = (uint32_t)(k + 1);
  }
  free(*slots);
  *slots = t;
  *cap = ncap;
  return 1;
}

/* A new record, indexed; its index, or -1 when out of memory. */
static long rec_add(sp_sigtable *tab, uint64_t h, const int64_t *w, size_t w_n, long prim) {
  if (tab->n_recs >= UINT32_MAX - 1 || !index_room(tab, prim >= 0)) return -1;
  if ((size_t)tab->n_recs == tab->recs_cap) {
    size_t cap = tab->recs_cap ? tab->recs_cap * 2 : 512;
    sig_rec *r = realloc(tab->recs, cap * sizeof *r);
    if (!r) return -1;
    tab->recs = r;
    tab->recs_cap = cap;
  }
  long k = (long)tab->n_recs++;
  sig_rec *r = &tab->recs[k];
  memset(r, 0, sizeof *r);
  r->hash = h;
  r->w = w;
  r->w_n = w_n;
  r->prim = prim;
  uint32_t *slots = prim >= 0 ? tab->vslots : tab->slots;
  size_t mask = (prim >= 0 ? tab->vslot_cap : tab->slot_cap) - 1;
  size_t i = (size_t)h & mask;
  while (slots[i]) i = (i + 1) & mask;
  slots[i] = (uint32_t)(k + 1);
  if (prim >= 0) tab->n_variants++;
  else tab->n_prims++;
  return k;
}

/* Adds the primary record of an inputs key known to be absent, without
 * outputs yet (the call is in flight); its index or -1 (NOMEM). */
SP_PRIVATE long sig_add(sp_sigtable *tab, uint64_t h, uint64_t salt, const int64_t *w, size_t n) {
  const int64_t *at = arena_put(tab, w, n);
  long k = at ? rec_add(tab, h, at, n, -1) : -1;
  if (k >= 0) tab->recs[k].salt = salt;
  return k;
}

/* Record k's outputs are out: it is a signature now. 0 when out of memory. */
SP_PRIVATE int sig_set_outputs(sp_sigtable *tab, long k, const sp_enc *out) {
  const int64_t *at = arena_put(tab, out->w, out->n);
  if (!at) return 0;
  tab->recs[k].out_w = at;
  tab->recs[k].out_w_n = out->n;
  tab->recs[k].has_out = 1;
  tab->signatures++;
  return 1;
}

/* Adds the signature of primary prim's inputs with other outputs; its
 * index or -1 (NOMEM). */
SP_PRIVATE long sig_variant_add(sp_sigtable *tab, uint64_t h, long prim, const sp_enc *out) {
  long k = rec_add(tab, h, tab->recs[prim].w, tab->recs[prim].w_n, prim);
  if (k >= 0 && !sig_set_outputs(tab, k, out)) return -1;
  return k;
}

/* A record copied in from elsewhere (a kept graph capture's, adopted):
 * call_id rep_id stands for reps calls. Counted in the summary's
 * signature_counts like any other, never found by a lookup (no key, not
 * indexed). 0 when out of memory. */
SP_PRIVATE int sig_add_counted(sp_sigtable *tab, long long rep_id, long long reps) {
  if (tab->n_recs >= UINT32_MAX - 1) return 0;
  if ((size_t)tab->n_recs == tab->recs_cap) {
    size_t cap = tab->recs_cap ? tab->recs_cap * 2 : 512;
    sig_rec *r = realloc(tab->recs, cap * sizeof *r);
    if (!r) return 0;
    tab->recs = r;
    tab->recs_cap = cap;
  }
  sig_rec *r = &tab->recs[tab->n_recs++];
  memset(r, 0, sizeof *r);
  r->prim = SIG_UNINDEXED;
  r->rep_id = rep_id;
  r->reps = reps;
  return 1;
}

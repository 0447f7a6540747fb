/* sp_thread.c -- Per-thread scratch: encodings and the operator cache; and
 * how our own threads start.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

sp_thread *sp_thread_new(void) {
  sp_thread *t = calloc(1, sizeof *t);
  if (t) {
    t->epoch = registry_op_epoch();
    t->prim = t->sig = -1;
  }
  return t;
}

void sp_thread_free(sp_thread *t) {
  if (!t) return;
  free(t->pub.in.w);
  free(t->pub.out.w);
  free(t->keybuf.w);
  free(t->prefix.p);
  free(t->line.p);
  free(t->timed.p);
  free(t->nvtx_names);
  if (t->roctx_names) /* rocTX's names are the slots' own strings (sp_nvtx.c) */
    for (size_t i = 0; i < SP_NVTX_NAMES; i++) free(t->roctx_names[i].handle);
  free(t->roctx_names);
  free(t);
}

int sp_thread_op(sp_thread *t, const void *key) {
  unsigned e = registry_op_epoch();
  if (e != t->epoch) {
    memset(t->cache, 0, sizeof t->cache);
    t->epoch = e;
    return -1;
  }
  opcache_slot *s = &t->cache[registry_ptr_hash(key) & (SP_OPCACHE_SIZE - 1)];
  return s->key == key ? s->id : -1;
}

void sp_thread_cache_op(sp_thread *t, const void *key, int op_id) {
  opcache_slot *s = &t->cache[registry_ptr_hash(key) & (SP_OPCACHE_SIZE - 1)];
  s->key = key;
  s->id = op_id;
}

int sp_enc_grow(sp_enc *e, size_t extra) {
  size_t cap = e->cap ? e->cap : 64;
  while (cap < e->n + extra) cap *= 2;
  int64_t *w = realloc(e->w, cap * sizeof *w);
  if (!w) {
    e->failed = 1;
    return SP_NOMEM;
  }
  e->w = w;
  e->cap = cap;
  return SP_OK;
}

void sp_enc_bytes(sp_enc *e, const char *s, size_t n) {
  size_t words = (n + 7) / 8;
  if (e->n + 1 + words > e->cap && sp_enc_grow(e, 1 + words) != SP_OK) return;
  e->w[e->n++] = (int64_t)n;
  if (words) {
    e->w[e->n + words - 1] = 0; /* the last word's unused bytes */
    memcpy(e->w + e->n, s, n);
  }
  e->n += words;
}

SP_PRIVATE int thread_start_own(void *(*fn)(void *), const char *name) {
  pthread_t t;
  pthread_attr_t attr;
  sigset_t all, old;
  if (pthread_attr_init(&attr) != 0) return 0;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old); /* inherited by the new thread */
  int ok = pthread_create(&t, &attr, fn, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (ok) pthread_setname_np(t, name); /* a name is only a help: its failure is not ours to report */
  return ok;
}

/* sp_registry.c -- The process-wide registries: dtype names and operators.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

static pthread_mutex_t g_dtype_lock = PTHREAD_MUTEX_INITIALIZER;
/* Per dtype code, the end of a tensor object: '], "dtype": "torch.float32"}'. */
typedef struct dtype_tail {
  char *s;
  size_t n;
} dtype_tail;
static dtype_tail *g_dtype_tails;
static int g_dtype_n;
static size_t g_dtype_tail_max = 64; /* >= every tail, the unknown one too */
static atomic_int g_dtype_warned;
static atomic_int g_dtype_unsaid; /* a dtype without a name was written */

int sp_set_dtype_names(const char *const *names, int n) {
  if (n < 0 || (n && !names)) return SP_ERROR;
  dtype_tail *v = calloc((size_t)(n ? n : 1), sizeof *v);
  if (!v) return SP_NOMEM;
  size_t longest = 64;
  for (int i = 0; i < n; i++) {
    if (!names[i] || !names[i][0]) continue;
    sp_buf b = {0};
    BUF_LIT(&b, "], \"dtype\": ");
    buf_json_str(&b, names[i], strlen(names[i]));
    BUF_LIT(&b, "}");
    if (b.failed || !(v[i].s = buf_dup(&b))) {
      free(b.p);
      for (int j = 0; j < i; j++) free(v[j].s);
      free(v);
      return SP_NOMEM;
    }
    v[i].n = b.n;
    if (b.n > longest) longest = b.n;
    free(b.p);
  }
  lock_mu(&g_dtype_lock, SP_LOCK_DTYPE);
  /* Old tables stay allocated: a writer may be reading one right now. */
  g_dtype_tails = v;
  g_dtype_n = n;
  g_dtype_tail_max = longest;
  lock_mu_release(&g_dtype_lock, SP_LOCK_DTYPE);
  return SP_OK;
}

SP_PRIVATE size_t registry_dtype_tail_max(void) { return g_dtype_tail_max; }

SP_PRIVATE char *registry_put_dtype_tail(char *o, int64_t dtype) {
  if (dtype < g_dtype_n && g_dtype_tails[dtype].s) {
    memcpy(o, g_dtype_tails[dtype].s, g_dtype_tails[dtype].n);
    return o + g_dtype_tails[dtype].n;
  }
  o = PUT_LIT(o, "], \"dtype\": \"torch.unknown");
  o = text_put_i64(o, dtype);
  if (!atomic_exchange(&g_dtype_warned, 1)) atomic_store(&g_dtype_unsaid, 1); /* err_tell */
  return PUT_LIT(o, "\"}");
}

SP_PRIVATE char *registry_put_dtype_name(char *o, int64_t dtype) {
  static const size_t head = sizeof("], \"dtype\": ") - 1;
  if (dtype >= 0 && dtype < g_dtype_n && g_dtype_tails[dtype].s) {
    size_t n = g_dtype_tails[dtype].n - head - 1;
    memcpy(o, g_dtype_tails[dtype].s + head, n);
    return o + n;
  }
  o = PUT_LIT(o, "\"torch.unknown");
  o = text_put_i64(o, dtype);
  *o++ = '"';
  return o;
}

SP_PRIVATE int registry_dtype_unknown_unsaid(void) { return atomic_exchange(&g_dtype_unsaid, 0); }

/* Per table (SP_NAMES_*) and code, the name's JSON string body (escaped,
 * without quotes). Old tables stay allocated, as the dtype tails do. */
#define SP_NAME_MAX 40
typedef struct name_table {
  char **s;
  int n;
} name_table;
static name_table g_names[SP_NAMES_N];

int sp_set_names(int table, const char *const *names, int n) {
  if (table < 0 || table >= SP_NAMES_N || n < 0 || (n && !names)) return SP_ERROR;
  char **v = calloc((size_t)(n ? n : 1), sizeof *v);
  if (!v) return SP_NOMEM;
  for (int i = 0; i < n; i++) {
    if (!names[i] || !names[i][0]) continue;
    size_t len = strlen(names[i]);
    if (len > SP_NAME_MAX) len = SP_NAME_MAX;
    sp_buf b = {0};
    buf_json_str(&b, names[i], len);
    if (b.failed || !(v[i] = malloc(b.n - 1))) {
      free(b.p);
      for (int j = 0; j < i; j++) free(v[j]);
      free(v);
      return SP_NOMEM;
    }
    memcpy(v[i], b.p + 1, b.n - 2); /* without the quotes */
    v[i][b.n - 2] = 0;
    free(b.p);
  }
  lock_mu(&g_dtype_lock, SP_LOCK_DTYPE);
  g_names[table].s = v;
  g_names[table].n = n;
  lock_mu_release(&g_dtype_lock, SP_LOCK_DTYPE);
  return SP_OK;
}

/* The name of code in table, or NULL. */
SP_PRIVATE const char *registry_name_of(int64_t table, int64_t code) {
  if (table < 0 || table >= SP_NAMES_N) return NULL;
  const name_table *t = &g_names[table];
  return code >= 0 && code < t->n ? t->s[code] : NULL;
}

/* Lookups by name: once per dtype or device a caller meets (it keeps them),
 * so a scan. */
int sp_dtype_code(const char *name) {
  static const size_t head = sizeof("], \"dtype\": ") - 1;
  if (!name) return -1;
  size_t len = strlen(name);
  int code = -1;
  lock_mu(&g_dtype_lock, SP_LOCK_DTYPE);
  for (int i = 0; i < g_dtype_n && code < 0; i++) {
    const dtype_tail *d = &g_dtype_tails[i]; /* '], "dtype": "NAME"}' */
    if (d->s && d->n == head + len + 3 && !memcmp(d->s + head + 1, name, len)) code = i;
  }
  lock_mu_release(&g_dtype_lock, SP_LOCK_DTYPE);
  return code;
}

int sp_name_code(int table, const char *name) {
  if (table < 0 || table >= SP_NAMES_N || !name) return -1;
  int code = -1;
  lock_mu(&g_dtype_lock, SP_LOCK_DTYPE);
  const name_table *t = &g_names[table];
  for (int i = 0; i < t->n && code < 0; i++)
    if (t->s[i] && !strcmp(t->s[i], name)) code = i;
  lock_mu_release(&g_dtype_lock, SP_LOCK_DTYPE);
  return code;
}

/* ======================================================================
 * Operator registry (process-wide)
 * ====================================================================== */

typedef struct op_slot {
  const void *key;
  int id;
} op_slot;

#define SP_MAX_OPS 65536
static pthread_mutex_t g_ops_lock = PTHREAD_MUTEX_INITIALIZER;
/* By id. Published once, never moved or freed: readers need no lock. */
static _Atomic(sp_op *) g_ops[SP_MAX_OPS];
static int g_ops_n;
static op_slot *g_op_map; /* key -> id, open addressing */
static size_t g_op_map_cap, g_op_map_used;
static atomic_uint g_op_epoch; /* bumped when a key is forgotten */
static const void *const OP_TOMBSTONE = &g_op_map_cap;

static op_slot *op_map_find(const void *key) {
  if (!g_op_map_cap) return NULL;
  size_t mask = g_op_map_cap - 1;
  for (size_t i = registry_ptr_hash(key) & mask;; i = (i + 1) & mask) {
    if (g_op_map[i].key == key) return &g_op_map[i];
    if (!g_op_map[i].key) return NULL;
  }
}

static int op_map_put(const void *key, int id) {
  if ((g_op_map_used + 1) * 2 > g_op_map_cap) {
    size_t cap = g_op_map_cap ? g_op_map_cap * 2 : 256;
    op_slot *m = calloc(cap, sizeof *m);
    if (!m) return 0;
    size_t used = 0;
    for (size_t i = 0; i < g_op_map_cap; i++) {
      const void *k = g_op_map[i].key;
      if (!k || k == OP_TOMBSTONE) continue;
      size_t j = registry_ptr_hash(k) & (cap - 1);
      while (m[j].key) j = (j + 1) & (cap - 1);
      m[j] = g_op_map[i];
      used++;
    }
    free(g_op_map);
    g_op_map = m;
    g_op_map_cap = cap;
    g_op_map_used = used;
  }
  size_t mask = g_op_map_cap - 1;
  size_t i = registry_ptr_hash(key) & mask;
  while (g_op_map[i].key && g_op_map[i].key != OP_TOMBSTONE) i = (i + 1) & mask;
  if (!g_op_map[i].key) g_op_map_used++;
  g_op_map[i].key = key;
  g_op_map[i].id = id;
  return 1;
}

static void op_free(sp_op *op) {
  if (!op) return;
  free(op->name);
  free(op->json_head);
  if (op->arg_keys)
    for (int i = 0; i < op->n_args; i++) free(op->arg_keys[i]);
  free(op->arg_keys);
  free(op->arg_key_lens);
  free(op);
}

/* overload NULL: a kernel's launch, its operation named as given. */
static sp_op *op_build(const char *qualified, const char *overload, int n_args,
                       const char *const *arg_names, int n_returns) {
  sp_op *op = calloc(1, sizeof *op);
  if (!op) return NULL;
  sp_buf name = {0}, head = {0};
  op->launch = overload == NULL;
  if (op->launch) buf_put(&name, qualified, strlen(qualified));
  /* str(OpOverload): "ns::name" -> "ns.name", then ".overload" or ".default" */
  for (const char *s = qualified; !op->launch && *s; s++) {
    if (s[0] == ':' && s[1] == ':') {
      buf_put(&name, ".", 1);
      s++;
    } else {
      buf_put(&name, s, 1);
    }
  }
  if (!op->launch && overload[0]) {
    buf_put(&name, ".", 1);
    buf_put(&name, overload, strlen(overload));
  } else if (!op->launch) {
    BUF_LIT(&name, ".default");
  }
  BUF_LIT(&head, "\"operation\": ");
  buf_json_str(&head, name.p, name.n);
  BUF_LIT(&head, ", \"inputs\": {");
  op->name = buf_dup(&name);
  op->json_head = buf_dup(&head);
  op->head_len = head.n;
  op->n_args = n_args;
  op->n_returns = n_returns;
  int ok = !name.failed && !head.failed && op->name && op->json_head;
  free(name.p);
  free(head.p);
  if (ok && n_args > 0) {
    op->arg_keys = calloc((size_t)n_args, sizeof *op->arg_keys);
    op->arg_key_lens = calloc((size_t)n_args, sizeof *op->arg_key_lens);
    ok = op->arg_keys != NULL && op->arg_key_lens != NULL;
    for (int i = 0; ok && i < n_args; i++) {
      sp_buf k = {0};
      const char *a = arg_names && arg_names[i] ? arg_names[i] : "";
      buf_json_str(&k, a, strlen(a));
      BUF_LIT(&k, ": ");
      op->arg_keys[i] = k.failed ? NULL : buf_dup(&k);
      op->arg_key_lens[i] = k.n;
      op->keys_len += k.n;
      ok = op->arg_keys[i] != NULL;
      free(k.p);
    }
  }
  if (!ok) {
    op_free(op);
    return NULL;
  }
  return op;
}

static int op_intern(const void *key, const char *qualified, const char *overload,
                     int n_args, const char *const *arg_names, int n_returns, int *id) {
  if (!key || !qualified || n_args < 0 || n_returns < 0 || !id) return SP_ERROR;
  lock_mu(&g_ops_lock, SP_LOCK_OPS);
  op_slot *s = op_map_find(key);
  if (s) {
    *id = s->id;
    lock_mu_release(&g_ops_lock, SP_LOCK_OPS);
    return SP_OK;
  }
  int rc = SP_NOMEM;
  sp_op *op = op_build(qualified, overload, n_args, arg_names, n_returns);
  if (op && g_ops_n < SP_MAX_OPS && op_map_put(key, g_ops_n)) {
    atomic_store_explicit(&g_ops[g_ops_n], op, memory_order_release);
    *id = g_ops_n++;
    rc = SP_OK;
  } else {
    op_free(op);
  }
  lock_mu_release(&g_ops_lock, SP_LOCK_OPS);
  return rc;
}

int sp_op_intern(const void *key, const char *qualified, const char *overload,
                 int n_args, const char *const *arg_names, int n_returns, int *id) {
  return op_intern(key, qualified, overload ? overload : "", n_args, arg_names, n_returns, id);
}

int sp_launch_intern(const void *key, const char *operation, int n_args,
                     const char *const *arg_names, int n_returns, int *id) {
  return op_intern(key, operation, NULL, n_args, arg_names, n_returns, id);
}

void sp_op_forget(const void *key) {
  lock_mu(&g_ops_lock, SP_LOCK_OPS);
  op_slot *s = op_map_find(key);
  if (s) {
    s->key = OP_TOMBSTONE;
    atomic_fetch_add(&g_op_epoch, 1);
  }
  lock_mu_release(&g_ops_lock, SP_LOCK_OPS);
}

SP_PRIVATE sp_op *registry_op(int64_t id) {
  if (id < 0 || id >= SP_MAX_OPS) return NULL;
  return atomic_load_explicit(&g_ops[id], memory_order_acquire);
}

SP_PRIVATE unsigned registry_op_epoch(void) {
  return atomic_load_explicit(&g_op_epoch, memory_order_acquire);
}

SP_PRIVATE void registry_fork_lock(void) {
  lock_mu(&g_ops_lock, SP_LOCK_OPS);
  lock_mu(&g_dtype_lock, SP_LOCK_DTYPE);
}
SP_PRIVATE void registry_fork_unlock(void) {
  lock_mu_release(&g_dtype_lock, SP_LOCK_DTYPE);
  lock_mu_release(&g_ops_lock, SP_LOCK_OPS);
}

/*
 * sp_core.c -- see sp_core.h. Plain C11 + POSIX; no Python, no torch.
 *
 * Concurrency: one spinlock per profiler guards its file, tables and
 * counters (held for a few hundred instructions, never across a kernel);
 * the operator registry has a mutex for writers and lock-free readers; the
 * hot-path "is a logged pass open" test is one atomic load. Only
 * sp_emergency_close_all runs without locks (from fatal-signal handlers).
 */
#define _GNU_SOURCE
#include "sp_core.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The file is cut back to its records after passes end (the flusher), so it
 * grows in small steps: what is allocated and faulted in ahead of the writer
 * is thrown away at the next cut. */
#define SP_FILE_GROW ((size_t)64 << 10)    /* allocated 64 KiB at a time */
#define SP_PREFAULT ((size_t)16 << 10)     /* faulted in 16 KiB at a time */
#define SP_MAP_WINDOW ((size_t)32 << 20)   /* 32 MiB of it mapped at once */
#define SP_OPCACHE_SIZE 1024               /* per-thread op cache entries */
#define SP_ERRMSG_CAP 512
#define SP_FLUSH_EVERY 0.005               /* seconds between flushes while passes run */

/* ======================================================================
 * Growable byte buffer and JSON helpers
 * ====================================================================== */
typedef struct sp_buf {
  char *p;
  size_t n, cap;
  int failed;
} sp_buf;

static int buf_reserve(sp_buf *b, size_t extra) {
  if (b->n + extra <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->n + extra) cap *= 2;
  char *q = realloc(b->p, cap);
  if (!q) {
    b->failed = 1;
    return 0;
  }
  b->p = q;
  b->cap = cap;
  return 1;
}

static void buf_put(sp_buf *b, const char *s, size_t n) {
  if (!buf_reserve(b, n)) return;
  memcpy(b->p + b->n, s, n);
  b->n += n;
}

#define BUF_LIT(b, lit) buf_put((b), (lit), sizeof(lit) - 1)

static const char k_digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static char *put_u64(char *o, uint64_t v) {
  if (v < 10) { /* most sizes and ids are short: skip the general loop */
    *o = (char)('0' + v);
    return o + 1;
  }
  if (v < 100) {
    memcpy(o, k_digit_pairs + 2 * v, 2);
    return o + 2;
  }
  char tmp[20];
  char *e = tmp + sizeof tmp, *q = e;
  while (v >= 100) {
    const char *d = k_digit_pairs + 2 * (v % 100);
    v /= 100;
    *--q = d[1];
    *--q = d[0];
  }
  if (v >= 10) {
    const char *d = k_digit_pairs + 2 * v;
    *--q = d[1];
    *--q = d[0];
  } else {
    *--q = (char)('0' + v);
  }
  size_t n = (size_t)(e - q);
  memcpy(o, q, n);
  return o + n;
}

static char *put_i64(char *o, int64_t v) {
  if (v < 0) {
    *o++ = '-';
    return put_u64(o, (uint64_t)0 - (uint64_t)v);
  }
  return put_u64(o, (uint64_t)v);
}

static size_t fmt_i64(char *out, int64_t v) { return (size_t)(put_i64(out, v) - out); }

static void buf_i64(sp_buf *b, int64_t v) {
  if (!buf_reserve(b, 24)) return;
  b->n += fmt_i64(b->p + b->n, v);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t left) {
  unsigned c = s[0];
  size_t n;
  unsigned min;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000;
  else return 0;
  if (left < n) return 0;
  unsigned cp = c & (0xFF >> (n + 1));
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

/* The one JSON string escaper, for records and summaries alike: writes the
 * literal (quotes included) through put(sink, bytes, n). Invalid UTF-8 becomes
 * U+FFFD, so that every line and the summary stay readable by json.loads.
 * Async-signal-safe (the dying-process summary uses it). */
typedef void (*put_fn)(void *sink, const char *s, size_t n);

static void json_str(put_fn put, void *sink, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  put(sink, "\"", 1);
  size_t i = 0;
  while (i < len) {
    unsigned char c = u[i];
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      size_t j = i + 1;
      while (j < len && u[j] >= 0x20 && u[j] != '"' && u[j] != '\\' && u[j] < 0x80) j++;
      put(sink, s + i, j - i);
      i = j;
      continue;
    }
    if (c >= 0x80) {
      size_t k = utf8_seq_len(u + i, len - i);
      if (k) {
        put(sink, s + i, k);
        i += k;
      } else {
        put(sink, "\\ufffd", 6);
        i++;
      }
      continue;
    }
    char esc[6] = {'\\', 0, 0, 0, 0, 0};
    size_t en = 2;
    switch (c) {
      case '"': esc[1] = '"'; break;
      case '\\': esc[1] = '\\'; break;
      case '\n': esc[1] = 'n'; break;
      case '\r': esc[1] = 'r'; break;
      case '\t': esc[1] = 't'; break;
      case '\b': esc[1] = 'b'; break;
      case '\f': esc[1] = 'f'; break;
      default:
        esc[1] = 'u';
        esc[2] = '0';
        esc[3] = '0';
        esc[4] = hex[c >> 4];
        esc[5] = hex[c & 15];
        en = 6;
    }
    put(sink, esc, en);
    i++;
  }
  put(sink, "\"", 1);
}

static void buf_sink(void *b, const char *s, size_t n) { buf_put((sp_buf *)b, s, n); }

static void buf_json_str(sp_buf *b, const char *s, size_t len) {
  if (!buf_reserve(b, len + 2)) return;
  json_str(buf_sink, b, s, len);
}

static char *dup_buf(const sp_buf *b) {
  char *s = malloc(b->n + 1);
  if (!s) return NULL;
  memcpy(s, b->p, b->n);
  s[b->n] = 0;
  return s;
}

/* Writes one message line to stderr with write(2): usable anywhere. */
static void say(const char *a, const char *b, const char *c) {
  const char *parts[4] = {"sgl_shapeprof: ", a, b, c};
  for (int i = 0; i < 4; i++)
    if (parts[i]) {
      ssize_t r = write(2, parts[i], strlen(parts[i]));
      (void)r;
    }
  ssize_t r = write(2, "\n", 1);
  (void)r;
}

/* ======================================================================
 * dtype names
 * ====================================================================== */
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
    if (b.failed || !(v[i].s = dup_buf(&b))) {
      free(b.p);
      for (int j = 0; j < i; j++) free(v[j].s);
      free(v);
      return SP_NOMEM;
    }
    v[i].n = b.n;
    if (b.n > longest) longest = b.n;
    free(b.p);
  }
  pthread_mutex_lock(&g_dtype_lock);
  /* Old tables stay allocated: a writer may be reading one right now. */
  g_dtype_tails = v;
  g_dtype_n = n;
  g_dtype_tail_max = longest;
  pthread_mutex_unlock(&g_dtype_lock);
  return SP_OK;
}

/* ======================================================================
 * Operator registry (process-wide)
 * ====================================================================== */
typedef struct sp_op {
  char *name;       /* aten.mm.default */
  char *json_head;  /* "operation": "aten.mm.default", "inputs": { */
  char **arg_keys;  /* "self": */
  size_t *arg_key_lens;
  size_t head_len, keys_len; /* keys_len: all keys together (a bound) */
  int n_args;
  int n_returns;
} sp_op;

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

static size_t ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

static op_slot *op_map_find(const void *key) {
  if (!g_op_map_cap) return NULL;
  size_t mask = g_op_map_cap - 1;
  for (size_t i = ptr_hash(key) & mask;; i = (i + 1) & mask) {
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
      size_t j = ptr_hash(k) & (cap - 1);
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
  size_t i = ptr_hash(key) & mask;
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

static sp_op *op_build(const char *qualified, const char *overload, int n_args,
                       const char *const *arg_names, int n_returns) {
  sp_op *op = calloc(1, sizeof *op);
  if (!op) return NULL;
  sp_buf name = {0}, head = {0};
  /* str(OpOverload): "ns::name" -> "ns.name", then ".overload" or ".default" */
  for (const char *s = qualified; *s; s++) {
    if (s[0] == ':' && s[1] == ':') {
      buf_put(&name, ".", 1);
      s++;
    } else {
      buf_put(&name, s, 1);
    }
  }
  buf_put(&name, ".", 1);
  if (overload && overload[0]) buf_put(&name, overload, strlen(overload));
  else BUF_LIT(&name, "default");
  BUF_LIT(&head, "\"operation\": ");
  buf_json_str(&head, name.p, name.n);
  BUF_LIT(&head, ", \"inputs\": {");
  op->name = dup_buf(&name);
  op->json_head = dup_buf(&head);
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
      op->arg_keys[i] = k.failed ? NULL : dup_buf(&k);
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

int sp_op_intern(const void *key, const char *qualified, const char *overload,
                 int n_args, const char *const *arg_names, int n_returns) {
  if (!key || !qualified || n_args < 0 || n_returns < 0) return -1;
  pthread_mutex_lock(&g_ops_lock);
  op_slot *s = op_map_find(key);
  if (s) {
    int id = s->id;
    pthread_mutex_unlock(&g_ops_lock);
    return id;
  }
  int id = -1;
  sp_op *op = op_build(qualified, overload, n_args, arg_names, n_returns);
  if (op && g_ops_n < SP_MAX_OPS && op_map_put(key, g_ops_n)) {
    atomic_store_explicit(&g_ops[g_ops_n], op, memory_order_release);
    id = g_ops_n++;
  } else {
    op_free(op);
  }
  pthread_mutex_unlock(&g_ops_lock);
  return id;
}

void sp_op_forget(const void *key) {
  pthread_mutex_lock(&g_ops_lock);
  op_slot *s = op_map_find(key);
  if (s) {
    s->key = OP_TOMBSTONE;
    atomic_fetch_add(&g_op_epoch, 1);
  }
  pthread_mutex_unlock(&g_ops_lock);
}

static sp_op *op_get(int64_t id) {
  if (id < 0 || id >= SP_MAX_OPS) return NULL;
  return atomic_load_explicit(&g_ops[id], memory_order_acquire);
}

/* ======================================================================
 * Per-thread scratch
 * ====================================================================== */
typedef struct opcache_slot {
  const void *key;
  int id;
} opcache_slot;

struct sp_thread {
  struct sp_thread_public pub; /* must stay first: see sp_thread_enc */
  unsigned epoch;
  opcache_slot cache[SP_OPCACHE_SIZE];
  /* The call in flight. */
  sp_op *op;
  uint64_t sig_hash;
  int seen_before; /* signature already written (dedupe on) */
  int counted;     /* a deduplicated repeat, already counted at begin */
  long sig;        /* the call's signature record, or -1 */
  int new_sig;     /* the record was added by this call */
  size_t head_at;  /* where '"operation"' starts in prefix */
  int spec;        /* our prefix sits speculatively at the file's tail */
  size_t spec_at;  /* where it starts */
  sp_buf prefix;   /* the record up to the inputs' closing brace */
  size_t id_digits_at, id_digits_end; /* where call_id's digits are in it */
  sp_buf line;     /* the rest of the record */
};

sp_thread *sp_thread_new(void) {
  sp_thread *t = calloc(1, sizeof *t);
  if (t) t->epoch = atomic_load(&g_op_epoch);
  return t;
}

void sp_thread_free(sp_thread *t) {
  if (!t) return;
  free(t->pub.in.w);
  free(t->pub.out.w);
  free(t->prefix.p);
  free(t->line.p);
  free(t);
}

int sp_thread_op(sp_thread *t, const void *key) {
  unsigned e = atomic_load_explicit(&g_op_epoch, memory_order_acquire);
  if (e != t->epoch) {
    memset(t->cache, 0, sizeof t->cache);
    t->epoch = e;
    return -1;
  }
  opcache_slot *s = &t->cache[ptr_hash(key) & (SP_OPCACHE_SIZE - 1)];
  return s->key == key ? s->id : -1;
}

void sp_thread_cache_op(sp_thread *t, const void *key, int op_id) {
  opcache_slot *s = &t->cache[ptr_hash(key) & (SP_OPCACHE_SIZE - 1)];
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

/* ======================================================================
 * Records file: a MAP_SHARED window over a file grown with fallocate
 * ====================================================================== */
typedef struct sp_file {
  int fd;
  char *map;
  size_t map_off, map_len;
  size_t size;      /* bytes allocated on disk */
  size_t faulted;   /* file offset up to which the window is pre-faulted */
  int no_populate;  /* MADV_POPULATE_WRITE is not supported here */
  size_t len;       /* bytes of complete records */
  size_t spec_end;  /* end of an in-flight call's prefix (>= len) */
  const sp_thread *spec_owner;
} sp_file;

static size_t g_page;

static int file_grow(sp_file *f, size_t need) {
  if (need <= f->size) return 0;
  size_t size = (need + SP_FILE_GROW - 1) / SP_FILE_GROW * SP_FILE_GROW;
  /* fallocate reserves the blocks, so a full disk fails here, not as a
   * SIGBUS when a mapped page is first touched. */
  int r = fallocate(f->fd, 0, (off_t)f->size, (off_t)(size - f->size));
  if (r != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
    /* ext2, some network and FUSE file systems: a sparse file would turn a
     * full disk into a SIGBUS on first touch. posix_fallocate writes the
     * blocks instead, so a full disk fails here too. */
    int e = posix_fallocate(f->fd, (off_t)f->size, (off_t)(size - f->size));
    if (e) return e;
    r = 0;
  }
  if (r != 0) return errno ? errno : EIO;
  f->size = size;
  return 0;
}

static int file_map(sp_file *f, size_t off, size_t n) {
  if (f->map && off >= f->map_off && off + n <= f->map_off + f->map_len)
    return 0;
  if (f->map) munmap(f->map, f->map_len);
  f->map = NULL;
  size_t start = off / g_page * g_page;
  size_t len = SP_MAP_WINDOW;
  if (off + n - start > len) len = (off + n - start + g_page - 1) / g_page * g_page;
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, (off_t)start);
  if (m == MAP_FAILED) return errno ? errno : EIO;
  f->map = m;
  f->map_off = start;
  f->map_len = len;
  f->faulted = start;
  return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Faults in the pages ahead of the writer in one call per SP_PREFAULT
 * instead of one page fault per 4 KiB. Best effort. */
static void file_prefault(sp_file *f, size_t end) {
  if (end <= f->faulted) return;
  size_t from = f->faulted > f->map_off ? f->faulted : f->map_off;
  size_t to = (end + SP_PREFAULT - 1) / SP_PREFAULT * SP_PREFAULT;
  if (to > f->size) to = f->size;
  if (to > f->map_off + f->map_len) to = f->map_off + f->map_len;
  if (to <= from) return;
  if (!f->no_populate &&
      madvise(f->map + (from - f->map_off), to - from, MADV_POPULATE_WRITE) != 0)
    f->no_populate = 1; /* old kernel: ordinary page faults it is */
  f->faulted = to;
}

/* Copies data to file offset off. Returns 0 or an errno value. */
static int file_write_at(sp_file *f, size_t off, const char *data, size_t n) {
  /* Common case: inside the mapped, allocated, pre-faulted part. */
  if (f->map && off >= f->map_off && off + n <= f->faulted && off + n <= f->size &&
      off + n <= f->map_off + f->map_len) {
    memcpy(f->map + (off - f->map_off), data, n);
    return 0;
  }
  int e = file_grow(f, off + n);
  if (!e) e = file_map(f, off, n);
  if (e) return e;
  file_prefault(f, off + n);
  memcpy(f->map + (off - f->map_off), data, n);
  return 0;
}

/* Between passes the file holds exactly its records (JSON Lines readers
 * reject a NUL tail). Forgets the allocated tail, which the caller then cuts
 * with ftruncate outside the spinlock: pages past the new end are dropped,
 * so they are allocated and faulted in again before the next write. Returns
 * the length to cut to, or -1 if there is nothing to cut. Spinlock held. */
static off_t file_forget_tail(sp_file *f) {
  if (f->fd < 0 || f->size <= f->len) return -1;
  f->size = f->len;
  if (f->faulted > f->len) f->faulted = f->len / g_page * g_page;
  f->spec_owner = NULL;
  f->spec_end = f->len;
  return (off_t)f->len;
}

/* ======================================================================
 * Profiler
 * ====================================================================== */
/* One distinct input signature. Records never move (they are found by index)
 * and keep the text rendered for them, so that writing a call whose shapes
 * were seen before is a copy, not formatting. */
typedef struct sig_rec {
  uint64_t hash;
  size_t w_at, w_n;         /* the signature's words, in arena */
  size_t in_at, in_n;       /* '"operation": ..., "inputs": {...}' in text; 0: none */
  size_t out_w_at, out_w_n; /* the outputs encoding out_at is the text of */
  size_t out_at, out_n;     /* ', "outputs": ...}\n' in text; 0: none yet */
  /* The record that stands for the signature's deduplicated calls: its
   * call_id (0: none written yet), and the calls it stands for, itself and
   * the repeats not written (the summary's signature_counts). */
  long long rep_id, reps;
} sig_rec;

/* A signature_counts entry, as the summary copies it. */
struct sig_count {
  long long id, n;
};

/* The profiler's lock guards a few hundred instructions of table lookups and
 * copying and never blocks: a spinlock costs a tenth of a mutex. */
typedef struct sp_lock {
  atomic_flag f;
} sp_lock;

static inline void lock_acquire(sp_lock *l) {
  unsigned spins = 0;
  while (atomic_flag_test_and_set_explicit(&l->f, memory_order_acquire)) {
    if (++spins > 64) sched_yield();
#if defined(__x86_64__) || defined(__i386__)
    else __builtin_ia32_pause();
#endif
  }
}
static inline int lock_try(sp_lock *l) {
  return !atomic_flag_test_and_set_explicit(&l->f, memory_order_acquire);
}
static inline void lock_release(sp_lock *l) {
  atomic_flag_clear_explicit(&l->f, memory_order_release);
}

/* A phase label and what was counted for it. */
struct phase_stat {
  char *name;              /* owned; never moves or changes once made */
  long long passes, calls; /* logged passes; calls observed in them */
};

/* What a summary says: copied from the profiler under its lock, then
 * written without it (or taken from the live profiler by a dying process). */
typedef struct summary_src {
  sp_stats c;                /* the counters, as sp_get_stats gives them */
  int n_ops;                 /* operators observed, in summary order: */
  int *ops;                  /* their ids */
  const long long *counts, *first; /* by op id */
  int n_phases;
  const struct phase_stat *phases;
  /* signature_counts: a copy (counts, n_counts), or the live records (recs,
   * n_recs) for a dying process */
  const struct sig_count *counts_by_sig;
  long long n_counts;
  const sig_rec *recs;
  long long n_recs;
  const char *ended_by;
  int failed;
} summary_src;

struct sp_profiler {
  sp_lock lock;
  /* Orders pass boundaries, the flusher's trim and close, which do
   * syscalls outside the spinlock. Taken before the spinlock. */
  pthread_mutex_t pass_mu;
  /* Orders summary writes (flusher, close) and guards the snapshot buffers.
   * Taken before pass_mu. */
  pthread_mutex_t summary_mu;
  atomic_int flush_wanted; /* a pass ended since the last flush */
  sp_config cfg;
  char *path, *summary_path, *phases;
  char errmsg[SP_ERRMSG_CAP];
  pid_t owner_pid;
  atomic_int logging;   /* a logged pass is open and all is well */
  atomic_int orphaned;  /* we are a forked child: hands off the file */
  atomic_int refs;      /* the owner's, and each thread's that points here */
  int closed, failed;
  const char *ended_by; /* "close", "SIGSEGV", ... */
  sp_file file;
  /* passes */
  long long passes, logged_passes;
  int in_pass, pass_logged;
  int last_logged;      /* the pass that ended last was logged (for reopen) */
  int cur_phase;        /* index in phases, or -1 */
  struct phase_stat *phase_stats; /* every label a logged pass had */
  int n_phases, phase_cap;
  /* the summary's copy (summary_mu): op ids; counts, first-seen order by id */
  int *snap_ops;
  long long *snap_counts, *snap_first;
  int snap_cap;
  struct phase_stat *snap_phases;
  int snap_phase_cap;
  struct sig_count *snap_sigs;
  long long snap_sig_cap;
  sp_buf pass_json; /* ', "forward_pass": N[, "phase": "p"]' */
  /* the next call_id, as decimal text: incremented, never formatted */
  char id_text[24];
  size_t id_len;
  /* counters */
  long long records, dedupe_skipped, signatures, errors, ops_seen_order;
  long long *op_counts, *op_first; /* by op id */
  int *op_order;                   /* scratch for sorting, same size */
  int op_cap;
  /* signatures: records, an open-addressing index of them, and their data */
  sig_rec *recs;
  size_t recs_cap;
  uint32_t *slots; /* record index + 1; 0 = empty */
  size_t slot_cap;
  int64_t *arena;  /* signature and outputs words */
  size_t arena_n, arena_cap;
  char *text;      /* cached JSON text */
  size_t text_n, text_cap;
  struct sp_profiler *next_open; /* in g_open */
};

static int write_summary_now(sp_profiler *p, const char *ended_by);
static void request_flush(sp_profiler *p);

static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
static sp_profiler *g_open;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t g_flush_mu;
static pthread_cond_t g_flush_cv;
static atomic_int g_flush_pending;
static int g_flusher_started;

static void at_fork_prepare(void) {
  pthread_mutex_lock(&g_open_lock); /* the flusher is between flushes */
  pthread_mutex_lock(&g_ops_lock);
  pthread_mutex_lock(&g_dtype_lock);
  pthread_mutex_lock(&g_flush_mu);
}
static void at_fork_parent(void) {
  pthread_mutex_unlock(&g_flush_mu);
  pthread_mutex_unlock(&g_dtype_lock);
  pthread_mutex_unlock(&g_ops_lock);
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
    if (p->file.map) munmap(p->file.map, p->file.map_len);
    p->file.map = NULL;
    if (p->file.fd >= 0) close(p->file.fd);
    p->file.fd = -1;
  }
  /* The flusher thread is not in the child: a profiler made here starts
   * its own. */
  g_flusher_started = 0;
  atomic_store(&g_flush_pending, 0);
  pthread_cond_init(&g_flush_cv, NULL);
  at_fork_parent();
}
static void global_init(void) {
  long pg = sysconf(_SC_PAGESIZE);
  g_page = pg > 0 ? (size_t)pg : 4096;
  pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child);
}

static void set_err(sp_profiler *p, const char *a, const char *b, int err) {
  snprintf(p->errmsg, sizeof p->errmsg, "%s%s%s%s", a, b ? b : "",
           err ? ": " : "", err ? strerror(err) : "");
}

/* A failure while running: say it once, stop logging, keep what was written. */
static void fail(sp_profiler *p, const char *what, int err) {
  if (p->failed) return;
  p->failed = 1;
  atomic_store(&p->logging, 0);
  set_err(p, what, p->path, err);
  char n[32];
  n[fmt_i64(n, p->records)] = 0;
  say(p->errmsg, "; profiling stopped, records kept: ", n);
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
  if (!p->path || !p->summary_path || (cfg->phases && cfg->phases[0] && !p->phases)) {
    set_err(p, "out of memory", NULL, 0);
    return SP_NOMEM;
  }
  sp_summary_path_for(p->path, p->summary_path, cap);
  p->cfg.path = p->path;
  p->cfg.phases = p->phases;
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
  p->cur_phase = -1;
  p->id_text[0] = '1';
  p->id_len = 1;
  /* An earlier run's summary must not stand beside the new records. */
  int e = write_summary_now(p, "running");
  if (e) {
    set_err(p, "cannot write summary file ", p->summary_path, e);
    p->closed = 1;
    close(fd);
    p->file.fd = -1;
    return SP_IOERR;
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

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int sp_pass_begin(sp_profiler *p, const char *phase) {
  if (!p || atomic_load(&p->orphaned)) return 0;
  pthread_mutex_lock(&p->pass_mu); /* after any trim of the last pass's end */
  lock_acquire(&p->lock);
  int logged = 0;
  if (!p->closed) {
    p->passes++;
    if (p->passes > p->cfg.skip_warmup && phase_wanted(p, phase) &&
        (p->cfg.log_n_passes == 0 || p->logged_passes < p->cfg.log_n_passes) &&
        !p->failed) {
      logged = 1;
      p->logged_passes++;
      p->pass_json.n = 0;
      BUF_LIT(&p->pass_json, ", \"forward_pass\": ");
      buf_i64(&p->pass_json, p->passes);
      p->cur_phase = -1;
      if (phase && phase[0]) {
        BUF_LIT(&p->pass_json, ", \"phase\": ");
        buf_json_str(&p->pass_json, phase, strlen(phase));
        p->cur_phase = phase_index(p, phase);
        if (p->cur_phase >= 0) p->phase_stats[p->cur_phase].passes++;
      }
      if (p->pass_json.failed) {
        fail(p, "out of memory formatting a pass header for ", 0);
        logged = 0;
      }
    }
    p->in_pass = 1;
    p->pass_logged = logged;
  }
  atomic_store(&p->logging, logged);
  lock_release(&p->lock);
  pthread_mutex_unlock(&p->pass_mu);
  return logged;
}

int sp_pass_reopen(sp_profiler *p) {
  if (!p || atomic_load(&p->orphaned)) return 0;
  pthread_mutex_lock(&p->pass_mu);
  lock_acquire(&p->lock);
  int logged = 0;
  if (!p->closed) {
    if (p->in_pass) {
      logged = p->pass_logged; /* still open: nothing to reopen */
    } else {
      logged = p->last_logged && !p->failed;
      p->in_pass = 1; /* same number, header and phase: not counted again */
      p->pass_logged = logged;
    }
  }
  atomic_store(&p->logging, logged);
  lock_release(&p->lock);
  pthread_mutex_unlock(&p->pass_mu);
  return logged;
}

void sp_pass_end(sp_profiler *p) {
  if (!p || atomic_load(&p->orphaned)) return;
  pthread_mutex_lock(&p->pass_mu);
  lock_acquire(&p->lock);
  int was_logged = p->in_pass && p->pass_logged && !p->closed;
  int was_pass = p->in_pass && !p->closed;
  if (p->in_pass) p->last_logged = was_logged;
  p->in_pass = 0;
  p->pass_logged = 0;
  atomic_store(&p->logging, 0);
  lock_release(&p->lock);
  pthread_mutex_unlock(&p->pass_mu);
  /* The file is cut to its records and the summary rewritten by the
   * flusher thread, off this thread, within SP_FLUSH_EVERY. */
  if (was_pass) request_flush(p);
}

static void counters(const sp_profiler *p, sp_stats *o);

void sp_get_stats(sp_profiler *p, sp_stats *o) {
  memset(o, 0, sizeof *o);
  if (!p) return;
  int locked = !atomic_load(&p->orphaned);
  if (locked) lock_acquire(&p->lock);
  counters(p, o);
  if (locked) lock_release(&p->lock);
}

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

/* ---- formatting --------------------------------------------------------
 * Records are formatted with a raw cursor into a buffer reserved once per
 * record: the bound below covers any encoding (each int64 word formats to at
 * most 20 digits plus separators; a tensor's words also carry its tail). */
#define PUT_LIT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) + sizeof(lit) - 1)

static size_t enc_bound(const sp_enc *e) {
  return e->n * (44 + g_dtype_tail_max) + 64;
}

/* One <tensor> or <entry> at w[*i]. */
static char *put_tensor(char *o, const int64_t *w, size_t *i) {
  int64_t dtype = w[(*i)++];
  if (dtype < 0) return PUT_LIT(o, "null");
  int64_t ndim = w[(*i)++];
  o = PUT_LIT(o, "{\"shape\": [");
  for (int64_t d = 0; d < ndim; d++) {
    if (d) o = PUT_LIT(o, ", ");
    o = put_i64(o, w[(*i)++]);
  }
  if (dtype < g_dtype_n && g_dtype_tails[dtype].s) {
    memcpy(o, g_dtype_tails[dtype].s, g_dtype_tails[dtype].n);
    return o + g_dtype_tails[dtype].n;
  }
  o = PUT_LIT(o, "], \"dtype\": \"torch.unknown");
  o = put_i64(o, dtype);
  if (!atomic_exchange(&g_dtype_warned, 1))
    say("a tensor has a dtype this build does not know; it is written as "
        "\"torch.unknown<code>\"",
        NULL, NULL);
  return PUT_LIT(o, "\"}");
}

static char *put_list(char *o, const int64_t *w, size_t *i) {
  int64_t n = w[(*i)++];
  *o++ = '[';
  for (int64_t k = 0; k < n; k++) {
    if (k) o = PUT_LIT(o, ", ");
    o = put_tensor(o, w, i);
  }
  *o++ = ']';
  return o;
}

/* '{"call_id": N, "forward_pass": P[, "phase": ...], ' at the start of
 * t->prefix (reserved by the caller), noting where call_id's digits and the
 * operation start. Returns the cursor after it. */
static char *put_record_head(sp_profiler *p, sp_thread *t) {
  sp_buf *b = &t->prefix;
  char *o = PUT_LIT(b->p, "{\"call_id\": ");
  t->id_digits_at = (size_t)(o - b->p);
  memcpy(o, p->id_text, p->id_len); /* p->records + 1 */
  o += p->id_len;
  t->id_digits_end = (size_t)(o - b->p);
  memcpy(o, p->pass_json.p, p->pass_json.n);
  o += p->pass_json.n;
  o = PUT_LIT(o, ", ");
  t->head_at = (size_t)(o - b->p);
  return o;
}

/* The record up to the inputs' closing brace, call_id included. */
static int fmt_prefix(sp_profiler *p, sp_thread *t) {
  sp_buf *b = &t->prefix;
  const sp_enc *in = &t->pub.in;
  const sp_op *op = t->op;
  b->n = 0;
  if (!buf_reserve(b, 32 + p->pass_json.n + op->head_len + op->keys_len + enc_bound(in)))
    return 0;
  char *o = put_record_head(p, t);
  memcpy(o, op->json_head, op->head_len);
  o += op->head_len;
  int first = 1;
  for (size_t i = 1; i < in->n;) {
    int64_t tag = in->w[i++];
    int64_t arg = in->w[i++];
    if (!first) o = PUT_LIT(o, ", ");
    first = 0;
    if (arg >= 0 && arg < op->n_args) {
      memcpy(o, op->arg_keys[arg], op->arg_key_lens[arg]);
      o += op->arg_key_lens[arg];
    } else {
      o = PUT_LIT(o, "\"?\": ");
    }
    o = tag == SP_ENC_TENSOR ? put_tensor(o, in->w, &i) : put_list(o, in->w, &i);
  }
  *o++ = '}';
  b->n = (size_t)(o - b->p);
  return 1;
}

/* The same from a signature's cached text: only call_id and pass vary. */
static int fmt_prefix_cached(sp_profiler *p, sp_thread *t, const sig_rec *r) {
  sp_buf *b = &t->prefix;
  b->n = 0;
  if (!buf_reserve(b, 32 + p->pass_json.n + r->in_n)) return 0;
  char *o = put_record_head(p, t);
  memcpy(o, p->text + r->in_at, r->in_n);
  b->n = (size_t)(o - b->p) + r->in_n;
  return 1;
}

/* The call's prefix, from the signature's cache when there is one (and
 * filling the cache when there is not). */
static int make_prefix(sp_profiler *p, sp_thread *t) {
  sig_rec *r = t->sig >= 0 ? &p->recs[t->sig] : NULL;
  if (r && r->in_n) return fmt_prefix_cached(p, t, r);
  if (!fmt_prefix(p, t)) return 0;
  if (r) {
    size_t at = text_put(p, t->prefix.p + t->head_at, t->prefix.n - t->head_at);
    if (at != (size_t)-1) {
      r = &p->recs[t->sig];
      r->in_at = at;
      r->in_n = t->prefix.n - t->head_at;
    }
  }
  return 1;
}

/* ', "outputs": ...}\n' into t->line. */
static int fmt_outputs(sp_thread *t) {
  const sp_enc *out = &t->pub.out;
  sp_buf *b = &t->line;
  b->n = 0;
  if (!buf_reserve(b, 32 + enc_bound(out))) return 0;
  char *o = PUT_LIT(b->p, ", \"outputs\": ");
  if (out->failed || !out->tensors) {
    o = PUT_LIT(o, "null");
  } else {
    int many = t->op->n_returns != 1;
    if (many) *o++ = '[';
    size_t i = 0;
    for (int r = 0; i < out->n; r++) {
      if (r) o = PUT_LIT(o, ", ");
      int64_t tag = out->w[i++];
      if (tag == SP_ENC_TENSOR) o = put_tensor(o, out->w, &i);
      else if (tag == SP_ENC_LIST) o = put_list(o, out->w, &i);
      else o = PUT_LIT(o, "null");
    }
    if (many) *o++ = ']';
  }
  o = PUT_LIT(o, "}\n");
  b->n = (size_t)(o - b->p);
  return 1;
}

/* ---- the call protocol -------------------------------------------------- */
int sp_call_begin(sp_profiler *p, sp_thread *t) {
  sp_enc *in = &t->pub.in;
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed)) return 0;
  if (in->failed || in->n < 1) return 0;
  t->op = op_get(in->w[0]);
  if (!t->op) return 0;
  t->sig_hash = sig_hash(in->w, in->n);
  t->spec = 0;
  t->seen_before = 0;
  t->counted = 0;
  t->new_sig = 0;
  lock_acquire(&p->lock);
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed)) {
    lock_release(&p->lock);
    return 0;
  }
  t->sig = sig_find(p, t->sig_hash, in->w, in->n);
  if (t->sig >= 0) {
    t->seen_before = 1;
    if (p->cfg.dedupe) {
      if (in->tensors > 0) {
        /* A repeat with tensor inputs is logged for sure: count it now,
         * and nothing more happens unless it raises. */
        if (count_op(p, (int)in->w[0])) {
          p->dedupe_skipped++;
          p->recs[t->sig].reps++;
          t->counted = 1;
        }
        lock_release(&p->lock);
        return t->counted ? SP_CALL_COUNTED : 0;
      }
      lock_release(&p->lock);
      return SP_CALL_RECORDING;
    }
  } else if (in->tensors > 0) {
    /* Tensor inputs: this call will be logged, so its signature can be
     * registered now, and its text cached as it is formatted. */
    t->sig = sig_add(p, t->sig_hash, in->w, in->n);
    if (t->sig < 0) {
      fail(p, "out of memory recording signatures for ", 0);
      lock_release(&p->lock);
      return 0;
    }
    t->new_sig = 1;
  }
  /* Put the inputs on disk before the kernel runs: if it kills the
   * process, this half line is what is left of the call. */
  if (!make_prefix(p, t)) {
    fail(p, "out of memory formatting a record for ", 0);
  } else {
    int e = file_write_at(&p->file, p->file.len, t->prefix.p, t->prefix.n);
    if (e) {
      fail(p, "cannot write records file ", e);
    } else {
      t->spec = 1;
      t->spec_at = p->file.len;
      p->file.spec_end = p->file.len + t->prefix.n;
      p->file.spec_owner = t;
    }
  }
  lock_release(&p->lock);
  return SP_CALL_RECORDING;
}

static void next_call_id(sp_profiler *p) {
  p->records++;
  size_t i = p->id_len;
  while (i > 0 && p->id_text[i - 1] == '9') p->id_text[--i] = '0';
  if (i > 0) {
    p->id_text[i - 1]++;
  } else { /* 99..9 -> 100..0 */
    memmove(p->id_text + 1, p->id_text, p->id_len);
    p->id_text[0] = '1';
    p->id_len++;
  }
}

/* Writes the record's rest (suffix) and commits it. Lock held; t->prefix is
 * made (at begin, or by the caller when there was no speculative write). */
static void commit(sp_profiler *p, sp_thread *t, const char *suffix, size_t suffix_n) {
  sp_file *f = &p->file;
  int e = 0;
  if (t->spec && f->spec_owner == t && t->spec_at == f->len) {
    /* Our prefix is still at the tail: add the suffix behind it. */
    e = file_write_at(f, f->spec_end, suffix, suffix_n);
    if (!e) f->len = f->spec_end + suffix_n;
  } else {
    /* Another thread wrote since, or nothing was written at begin (the
     * caller made the prefix then): the whole record. */
    if (t->spec) {
      /* Renumber: the call_id written at begin may be taken. */
      char id[24];
      size_t n = (size_t)(put_i64(id, p->records + 1) - id);
      sp_buf *b = &t->prefix;
      size_t old = t->id_digits_end - t->id_digits_at;
      if (!buf_reserve(b, n)) {
        fail(p, "out of memory formatting a record for ", 0);
        return;
      }
      memmove(b->p + t->id_digits_at + n, b->p + t->id_digits_end, b->n - t->id_digits_end);
      memcpy(b->p + t->id_digits_at, id, n);
      b->n = b->n - old + n;
    }
    e = file_write_at(f, f->len, t->prefix.p, t->prefix.n);
    if (!e) e = file_write_at(f, f->len + t->prefix.n, suffix, suffix_n);
    if (!e) f->len += t->prefix.n + suffix_n;
  }
  if (f->spec_owner == t || f->spec_end < f->len) {
    f->spec_owner = NULL;
    f->spec_end = f->len;
  }
  if (e) {
    fail(p, "cannot write records file ", e);
    return;
  }
  if (t->sig >= 0 && !p->recs[t->sig].rep_id) {
    /* the signature's first record: it stands for its repeats */
    p->recs[t->sig].rep_id = p->records + 1;
    p->recs[t->sig].reps++;
  }
  next_call_id(p);
}

static void drop_spec(sp_profiler *p, sp_thread *t) {
  sp_file *f = &p->file;
  if (t->spec && f->spec_owner == t) {
    /* Blank the half line, so that a crash now does not show a call that
     * did not crash. Zeros read as the file's unused tail. */
    if (f->map && t->spec_at >= f->map_off && f->spec_end <= f->map_off + f->map_len &&
        f->spec_end <= f->size)
      memset(f->map + (t->spec_at - f->map_off), 0, f->spec_end - t->spec_at);
    f->spec_owner = NULL;
    f->spec_end = f->len;
  }
  t->spec = 0;
}

/* Counts the call as observed; returns 1 if it should be written. */
static int observe(sp_profiler *p, sp_thread *t, int raised) {
  const sp_enc *in = &t->pub.in;
  if (t->counted) { /* counted as a deduplicated repeat at begin */
    if (!raised) return 0;
    p->dedupe_skipped--;
    p->recs[t->sig].reps--;
    return 1;
  }
  if (!count_op(p, (int)in->w[0])) {
    fail(p, "out of memory counting operators for ", 0);
    return 0;
  }
  int known = t->seen_before;
  if (t->sig < 0) { /* not registered at begin (no tensor inputs) */
    t->sig = sig_find(p, t->sig_hash, in->w, in->n);
    known = t->sig >= 0;
    if (!known) {
      t->sig = sig_add(p, t->sig_hash, in->w, in->n);
      if (t->sig < 0) {
        fail(p, "out of memory recording signatures for ", 0);
        return 0;
      }
      t->new_sig = 1;
    }
  }
  if (known && p->cfg.dedupe && !raised) {
    p->dedupe_skipped++;
    p->recs[t->sig].reps++;
    return 0;
  }
  return 1;
}

/* The outputs' text: the signature's cached text when the outputs are the
 * ones it was made for, else freshly formatted into t->line (and cached if
 * the signature has none yet). */
static int outputs_text(sp_profiler *p, sp_thread *t, const char **s, size_t *n) {
  const sp_enc *out = &t->pub.out;
  sig_rec *r = t->sig >= 0 ? &p->recs[t->sig] : NULL;
  if (r && r->out_n && !out->failed && r->out_w_n == out->n &&
      memcmp(p->arena + r->out_w_at, out->w, out->n * sizeof *out->w) == 0) {
    *s = p->text + r->out_at;
    *n = r->out_n;
    return 1;
  }
  if (!fmt_outputs(t)) return 0;
  if (r && !r->out_n && !out->failed) {
    size_t wat = arena_put(p, out->w, out->n);
    size_t tat = wat == (size_t)-1 ? wat : text_put(p, t->line.p, t->line.n);
    if (tat != (size_t)-1) {
      r = &p->recs[t->sig];
      r->out_w_at = wat;
      r->out_w_n = out->n;
      r->out_at = tat;
      r->out_n = t->line.n;
    }
  }
  *s = t->line.p;
  *n = t->line.n;
  return 1;
}

void sp_call_end(sp_profiler *p, sp_thread *t) {
  if (t->counted) return; /* a repeat, already counted */
  sp_enc *out = &t->pub.out;
  lock_acquire(&p->lock);
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed) || p->closed) {
    drop_spec(p, t);
    lock_release(&p->lock);
    return;
  }
  int has_tensor = t->pub.in.tensors > 0 || (!out->failed && out->tensors > 0);
  if (!has_tensor || !observe(p, t, 0)) {
    drop_spec(p, t);
    lock_release(&p->lock);
    return;
  }
  /* The prefix first: making it may grow the text cache that the outputs'
   * text points into. */
  const char *text;
  size_t text_n;
  if ((!t->spec && !make_prefix(p, t)) || !outputs_text(p, t, &text, &text_n))
    fail(p, "out of memory formatting a record for ", 0);
  else
    commit(p, t, text, text_n);
  lock_release(&p->lock);
}

void sp_call_fail(sp_profiler *p, sp_thread *t, const char *type,
                  const char *msg) {
  lock_acquire(&p->lock);
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed) || p->closed ||
      !observe(p, t, 1)) {
    drop_spec(p, t);
    lock_release(&p->lock);
    return;
  }
  sp_buf *s = &t->line;
  s->n = 0;
  BUF_LIT(s, ", \"outputs\": null, \"error\": {\"error_type\": ");
  type = type && type[0] ? type : "RuntimeError";
  buf_json_str(s, type, strlen(type));
  BUF_LIT(s, ", \"error_message\": ");
  msg = msg ? msg : "";
  buf_json_str(s, msg, strlen(msg));
  BUF_LIT(s, "}}\n");
  if (s->failed || (!t->spec && !make_prefix(p, t))) {
    s->failed = 0;
    fail(p, "out of memory formatting a record for ", 0);
  } else {
    commit(p, t, s->p, s->n);
    p->errors++;
  }
  lock_release(&p->lock);
}

/* ======================================================================
 * Summary and close
 * ====================================================================== */
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
  fdw_put(w, t, fmt_i64(t, v));
}
static void fdw_sink(void *w, const char *s, size_t n) { fdw_put((fdw *)w, s, n); }
static void fdw_json_str(fdw *w, const char *s) { json_str(fdw_sink, w, s, strlen(s)); }

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
static void counters(const sp_profiler *p, sp_stats *o) {
  o->records = p->records;
  o->passes = p->passes;
  o->logged_passes = p->logged_passes;
  o->dedupe_skipped = p->dedupe_skipped;
  o->signatures = p->signatures;
  o->errors = p->errors;
  o->bytes = (long long)p->file.len;
}

/* The summary's counters (not the per-operator and per-phase tables). */
static void src_counters(const sp_profiler *p, summary_src *s) {
  counters(p, &s->c);
  s->n_phases = p->n_phases;
  s->ended_by = p->ended_by;
  s->failed = p->failed;
}

/* Copies what the summary says; spinlock held. Returns 0, or 1 when the
 * copy needs more room: *need_ops op slots and *need_phases phase slots (the
 * caller grows it without the lock and retries). */
static int snapshot_locked(sp_profiler *p, summary_src *s, int *need_ops, int *need_phases,
                           long long *need_sigs) {
  long long sigs = p->cfg.dedupe ? p->signatures : 0;
  if (p->op_cap > p->snap_cap || p->n_phases > p->snap_phase_cap || sigs > p->snap_sig_cap) {
    *need_ops = p->op_cap;
    *need_phases = p->n_phases;
    *need_sigs = sigs;
    return 1;
  }
  long long n = 0;
  for (long long i = 0; i < sigs; i++)
    if (p->recs[i].rep_id && p->recs[i].reps > 1) {
      p->snap_sigs[n].id = p->recs[i].rep_id;
      p->snap_sigs[n++].n = p->recs[i].reps;
    }
  s->counts_by_sig = p->snap_sigs;
  s->n_counts = n;
  s->recs = NULL;
  s->n_recs = 0;
  int k = 0;
  for (int id = 0; id < p->op_cap; id++)
    if (p->op_counts[id]) p->snap_ops[k++] = id;
  if (p->op_cap) {
    memcpy(p->snap_counts, p->op_counts, (size_t)p->op_cap * sizeof *p->snap_counts);
    memcpy(p->snap_first, p->op_first, (size_t)p->op_cap * sizeof *p->snap_first);
  }
  if (p->n_phases)
    memcpy(p->snap_phases, p->phase_stats, (size_t)p->n_phases * sizeof p->snap_phases[0]);
  src_counters(p, s);
  s->n_ops = k;
  s->ops = p->snap_ops;
  s->counts = p->snap_counts;
  s->first = p->snap_first;
  s->phases = p->snap_phases;
  return 0;
}

static int grow_snapshot(sp_profiler *p, int need, int need_phases, long long need_sigs) {
  if (need_sigs > p->snap_sig_cap) {
    long long cap = p->snap_sig_cap ? p->snap_sig_cap : 256;
    while (cap < need_sigs) cap *= 2;
    struct sig_count *c = realloc(p->snap_sigs, (size_t)cap * sizeof *c);
    if (!c) return 0;
    p->snap_sigs = c;
    p->snap_sig_cap = cap;
  }
  if (need_phases > p->snap_phase_cap) {
    struct phase_stat *ph = realloc(p->snap_phases, (size_t)need_phases * sizeof *ph);
    if (!ph) return 0;
    p->snap_phases = ph;
    p->snap_phase_cap = need_phases;
  }
  if (need <= p->snap_cap) return 1;
  int cap = p->snap_cap ? p->snap_cap : 64;
  while (cap < need) cap *= 2;
  int *o = realloc(p->snap_ops, (size_t)cap * sizeof *o);
  if (o) p->snap_ops = o;
  long long *c = realloc(p->snap_counts, (size_t)cap * sizeof *c);
  if (c) p->snap_counts = c;
  long long *f = realloc(p->snap_first, (size_t)cap * sizeof *f);
  if (f) p->snap_first = f;
  if (!o || !c || !f) return 0;
  p->snap_cap = cap;
  return 1;
}

/* Takes the spinlock to copy the summary's data; summary_mu held (it guards
 * the copy). 0 on out of memory. */
static int snapshot(sp_profiler *p, summary_src *s) {
  for (;;) {
    int need_ops = 0, need_phases = 0;
    long long need_sigs = 0;
    lock_acquire(&p->lock);
    if (!snapshot_locked(p, s, &need_ops, &need_phases, &need_sigs)) {
      lock_release(&p->lock);
      sort_ops(s->ops, s->n_ops, s->counts, s->first);
      return 1;
    }
    lock_release(&p->lock);
    if (!grow_snapshot(p, need_ops, need_phases, need_sigs)) return 0;
  }
}

/* The live profiler as a summary, for a dying process: no malloc, no lock. */
static void live_src(sp_profiler *p, summary_src *s) {
  int k = 0;
  for (int id = 0; id < p->op_cap; id++)
    if (p->op_counts[id]) p->op_order[k++] = id;
  sort_ops(p->op_order, k, p->op_counts, p->op_first);
  src_counters(p, s);
  s->n_ops = k;
  s->ops = p->op_order;
  s->counts = p->op_counts;
  s->first = p->op_first;
  s->phases = p->phase_stats;
  s->counts_by_sig = NULL;
  s->n_counts = 0;
  s->recs = p->recs;
  s->n_recs = p->cfg.dedupe ? p->signatures : 0;
}

static atomic_uint g_tmp_seq;

/* Opens a temporary file beside path that nobody else can have planted:
 * a name of our own (pid, sequence), O_EXCL, never through a symlink.
 * Async-signal-safe. Returns the fd, or -1 with errno set. */
static int open_tmp_beside(const char *path, char *tmp, size_t cap) {
  size_t n = strlen(path);
  if (n + 48 > cap) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (int attempt = 0; attempt < 8; attempt++) {
    char *o = tmp;
    memcpy(o, path, n);
    o += n;
    *o++ = '.';
    o = put_u64(o, (uint64_t)getpid());
    *o++ = '.';
    o = put_u64(o, atomic_fetch_add(&g_tmp_seq, 1));
    memcpy(o, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

/* Writes the summary to a temporary file and renames it into place. No
 * malloc, no locks. */
static int write_summary(const sp_profiler *p, const summary_src *s) {
  char tmp[4096];
  fdw w;
  w.n = 0;
  w.err = 0;
  w.fd = open_tmp_beside(p->summary_path, tmp, sizeof tmp);
  if (w.fd < 0) return errno ? errno : EIO;
  fdw_str(&w, "{\n  \"rank\": ");
  fdw_i64(&w, p->cfg.rank);
  fdw_str(&w, ",\n  \"total_operations\": ");
  fdw_i64(&w, s->c.records);
  fdw_str(&w, ",\n  \"forward_passes\": ");
  fdw_i64(&w, s->c.passes);
  fdw_str(&w, ",\n  \"unique_operations\": ");
  fdw_i64(&w, s->n_ops);
  fdw_str(&w, ",\n  \"operation_counts\": {");
  for (int i = 0; i < s->n_ops; i++) {
    fdw_str(&w, i ? ",\n    " : "\n    ");
    sp_op *op = op_get(s->ops[i]);
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
  fdw_str(&w, ",\n  \"profiler_failed\": ");
  fdw_str(&w, s->failed ? "true" : "false");
  fdw_str(&w, "\n}\n");
  fdw_flush(&w);
  int err = w.err;
  if (close(w.fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, p->summary_path) != 0) err = errno;
  if (err) unlink(tmp);
  return err;
}

/* Writes the summary as it stands; summary_mu held (or p not yet shared),
 * spinlock not. */
static int write_summary_now(sp_profiler *p, const char *ended_by) {
  summary_src s;
  if (!snapshot(p, &s)) return ENOMEM;
  if (ended_by) s.ended_by = ended_by;
  return write_summary(p, &s);
}

/* ======================================================================
 * The flusher: after passes end, one thread per process cuts each records
 * file to its records and rewrites its summary, so that between passes the
 * files on disk are exact (a SIGKILL then loses nothing) while the passes
 * themselves pay no syscall. Bursts of passes are coalesced: at most one
 * flush per SP_FLUSH_EVERY, the first one at once.
 * ====================================================================== */
static pthread_mutex_t g_flush_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_flush_cv = PTHREAD_COND_INITIALIZER;
static atomic_int g_flush_pending; /* some profiler wants a flush */
static int g_flusher_started;      /* g_flush_mu */

/* g_open_lock held. */
static void flush_one(sp_profiler *p) {
  if (!atomic_exchange(&p->flush_wanted, 0)) return;
  pthread_mutex_lock(&p->summary_mu);
  pthread_mutex_lock(&p->pass_mu);
  if (p->closed || atomic_load(&p->orphaned) || p->in_pass) {
    /* closed: close wrote it; in a pass: that pass's end asks again */
    pthread_mutex_unlock(&p->pass_mu);
    pthread_mutex_unlock(&p->summary_mu);
    return;
  }
  lock_acquire(&p->lock);
  off_t cut = file_forget_tail(&p->file);
  lock_release(&p->lock);
  /* No pass can begin (pass_mu) and none runs: nothing writes the file. */
  if (cut >= 0 && ftruncate(p->file.fd, cut) != 0) {
    int e = errno;
    lock_acquire(&p->lock);
    fail(p, "cannot trim records file ", e);
    lock_release(&p->lock);
  }
  summary_src s;
  int ok = snapshot(p, &s);
  pthread_mutex_unlock(&p->pass_mu);
  if (ok) {
    s.ended_by = "running";
    write_summary(p, &s);
  }
  pthread_mutex_unlock(&p->summary_mu);
}

static void flush_all(void) {
  pthread_mutex_lock(&g_open_lock);
  for (sp_profiler *p = g_open; p; p = p->next_open) flush_one(p);
  pthread_mutex_unlock(&g_open_lock);
}

static void *flusher_main(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the host's threads' */
  double last = -1e9;
  for (;;) {
    pthread_mutex_lock(&g_flush_mu);
    while (!atomic_load(&g_flush_pending)) pthread_cond_wait(&g_flush_cv, &g_flush_mu);
    pthread_mutex_unlock(&g_flush_mu);
    double wait = last + SP_FLUSH_EVERY - now_seconds();
    if (wait > 0) {
      struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
      }
    }
    atomic_store(&g_flush_pending, 0);
    flush_all();
    last = now_seconds();
  }
  return NULL;
}

static void request_flush(sp_profiler *p) {
  atomic_store(&p->flush_wanted, 1);
  if (atomic_exchange(&g_flush_pending, 1)) return; /* asked already */
  pthread_mutex_lock(&g_flush_mu);
  if (!g_flusher_started) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    g_flusher_started = pthread_create(&t, &attr, flusher_main, NULL) == 0;
    pthread_attr_destroy(&attr);
  }
  int started = g_flusher_started;
  if (started) pthread_cond_signal(&g_flush_cv);
  pthread_mutex_unlock(&g_flush_mu);
  if (!started) { /* no thread to be had: flush on this one */
    atomic_store(&g_flush_pending, 0);
    flush_all();
  }
}

static void unlink_open(sp_profiler *p) {
  pthread_mutex_lock(&g_open_lock);
  for (sp_profiler **q = &g_open; *q; q = &(*q)->next_open)
    if (*q == p) {
      *q = p->next_open;
      break;
    }
  pthread_mutex_unlock(&g_open_lock);
}

static void release_file(sp_file *f) {
  if (f->map) munmap(f->map, f->map_len);
  f->map = NULL;
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
}

int sp_close(sp_profiler *p) {
  if (!p) return SP_OK;
  if (atomic_load(&p->orphaned) || p->owner_pid != getpid()) {
    /* Forked child: let go of the parent's file without touching it. */
    if (!p->closed) {
      p->closed = 1;
      release_file(&p->file);
      unlink_open(p);
    }
    return SP_OK;
  }
  pthread_mutex_lock(&p->summary_mu);
  pthread_mutex_lock(&p->pass_mu);
  lock_acquire(&p->lock);
  if (p->closed) {
    lock_release(&p->lock);
    pthread_mutex_unlock(&p->pass_mu);
    pthread_mutex_unlock(&p->summary_mu);
    return SP_OK;
  }
  atomic_store(&p->logging, 0);
  p->closed = 1;
  /* Calls still in flight on other threads see the map gone and write
   * nothing; the syscalls come after the lock. */
  sp_file file = p->file;
  p->file.map = NULL;
  p->file.fd = -1;
  p->file.size = p->file.len;
  p->file.spec_owner = NULL;
  p->file.spec_end = p->file.len;
  lock_release(&p->lock);
  pthread_mutex_unlock(&p->pass_mu);
  int rc = SP_OK;
  if (ftruncate(file.fd, (off_t)file.len) != 0) {
    set_err(p, "cannot trim records file ", p->path, errno);
    rc = SP_IOERR;
  }
  release_file(&file);
  int e = write_summary_now(p, NULL);
  if (e) {
    set_err(p, "cannot write summary file ", p->summary_path, e);
    rc = SP_IOERR;
  }
  pthread_mutex_unlock(&p->summary_mu);
  unlink_open(p);
  return rc;
}

void sp_ref(sp_profiler *p) { atomic_fetch_add(&p->refs, 1); }

static void destroy(sp_profiler *p);

void sp_unref(sp_profiler *p) {
  if (atomic_fetch_sub(&p->refs, 1) == 1) destroy(p);
}

void sp_free(sp_profiler *p) {
  if (!p) return;
  if (!p->closed) sp_close(p);
  sp_unref(p);
}

static void destroy(sp_profiler *p) {
  release_file(&p->file);
  unlink_open(p);
  free(p->path);
  free(p->summary_path);
  free(p->phases);
  free(p->pass_json.p);
  free(p->op_counts);
  free(p->op_first);
  free(p->op_order);
  free(p->recs);
  free(p->slots);
  free(p->arena);
  free(p->text);
  free(p->snap_ops);
  free(p->snap_counts);
  free(p->snap_first);
  free(p->snap_sigs);
  for (int i = 0; i < p->n_phases; i++) free(p->phase_stats[i].name);
  free(p->phase_stats);
  free(p->snap_phases);
  /* A forked child's copy may be locked by a thread that is not there. */
  if (p->owner_pid == getpid() && !atomic_load(&p->orphaned)) {
    pthread_mutex_destroy(&p->pass_mu);
    pthread_mutex_destroy(&p->summary_mu);
  }
  free(p);
}

/* ======================================================================
 * Fatal signals
 * ====================================================================== */
static const char *signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGTERM: return "SIGTERM";
    default: return "signal";
  }
}

static atomic_int g_emergency_sig;

void sp_emergency_close_all(void) {
  pid_t me = getpid();
  int sig = atomic_load(&g_emergency_sig);
  for (sp_profiler *p = g_open; p; p = p->next_open) {
    if (p->closed || p->owner_pid != me || atomic_load(&p->orphaned)) continue;
    /* If this thread was interrupted while holding the lock, go on without
     * it: a dying process wants its data more than consistency. */
    int locked = lock_try(&p->lock);
    atomic_store(&p->logging, 0);
    p->closed = 1;
    p->ended_by = sig ? signal_name(sig) : "emergency";
    /* Keep an in-flight call's inputs: they are the point of a crash. */
    size_t keep = p->file.spec_end > p->file.len ? p->file.spec_end : p->file.len;
    if (p->file.fd >= 0 && ftruncate(p->file.fd, (off_t)keep) != 0) { /* nothing more to do */
    }
    summary_src s;
    live_src(p, &s);
    write_summary(p, &s);
    if (locked) lock_release(&p->lock);
  }
}

static const int k_fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM};
#define N_FATAL (sizeof k_fatal / sizeof k_fatal[0])
static struct sigaction g_old_action[N_FATAL];
static atomic_int g_handlers_installed;

static void on_fatal_signal(int sig) {
  size_t i = 0;
  while (i < N_FATAL && k_fatal[i] != sig) i++;
  int expected = 0;
  if (atomic_compare_exchange_strong(&g_emergency_sig, &expected, sig))
    sp_emergency_close_all();
  /* Hand the signal to whoever had it before (the default: die). It is
   * blocked while we run, so it arrives as soon as we return. */
  if (i < N_FATAL) sigaction(sig, &g_old_action[i], NULL);
  raise(sig);
}

void sp_install_signal_handlers(void) {
  if (atomic_exchange(&g_handlers_installed, 1)) return;
  for (size_t i = 0; i < N_FATAL; i++) {
    struct sigaction cur;
    if (sigaction(k_fatal[i], NULL, &cur) != 0) continue;
    /* SIGTERM with a handler of its own (Python's, SGLang's) is not fatal:
     * the program shuts down and closes us itself. */
    if (k_fatal[i] == SIGTERM && cur.sa_handler != SIG_DFL) continue;
    if (cur.sa_handler == SIG_IGN) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK;
    if (sigaction(k_fatal[i], &sa, &g_old_action[i]) != 0)
      g_old_action[i] = cur;
  }
}

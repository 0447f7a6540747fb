/* sp_cupti.c -- GPU kernel times (sp_config.time == SP_TIME_KERNELS): each
 * recorded call's kernels, from CUPTI's activity API, correlated to the
 * call through an external correlation id.
 *
 * How: a call that a kernels-timed profiler records begins by pushing a
 * fresh id (CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) and pops it as it
 * ends; CUPTI then precedes every driver or runtime API record made in
 * between with a record tying the API call's correlation id to ours, and
 * each kernel record names the API call that launched it. A kernel a CUDA
 * graph's replay runs names its graph node: the node was made while the
 * capture's call had its id pushed (the resource callback below notes
 * which), or was cloned from one that was (instantiation). The call's end
 * says what became of the id: the record it was written as (call_id), or
 * the record whose repeat it was (deduplication).
 *
 * All of it goes, as lines, to the kernels file beside the records
 * (FORMAT.md "Kernels"): this file writes what CUPTI and the core said,
 * and the reader (records/kernels.py) joins them, so that the join is
 * tested on a synthetic stream where no GPU is. Nothing is joined here.
 *
 * CUPTI is loaded at run time (dlopen) from the library the Python layer
 * names (the nvidia-cuda-cupti wheel torch depends on), never linked: the
 * module loads where there is none. Built only where CUPTI's headers were
 * found (SP_HAVE_CUPTI, setup.py): the records' layout is the header's,
 * and a library of another major version is refused.
 *
 * One CUPTI client per process: starting fails, in one line, when another
 * subscriber (torch.profiler's Kineto, nsys) holds CUPTI.
 *
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

/* The profiler the collector runs for (NULL: none): only its calls push
 * ids and say what they became, and only its passes are the window; a
 * second kernels-timed profiler of the process is refused and records its
 * CPU times only. Compared, never dereferenced. */
static _Atomic(const sp_profiler *) g_owner;

#ifdef SP_HAVE_CUPTI
#include <cupti.h>
#if CUDA_VERSION < 12000 /* CUDA 11's CUPTI has no CUpti_ActivityKernel9: not read */
#undef SP_HAVE_CUPTI
#endif
#endif

#ifdef SP_HAVE_CUPTI
int sp_cupti_built(void) { return CUPTI_API_VERSION; }

/* The ids pushed: 1, 2, ... for the process (0: none). */
static _Atomic uint64_t g_ext_next;

/* The kernel record of the header's CUPTI: the fields read here are in
 * every version since CUDA 11.0 (graphId since CUpti_ActivityKernel5). */
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 sp_kernel_rec;
#else
typedef CUpti_ActivityKernel9 sp_kernel_rec;
#endif

#define CUPTI_FUNCS(X)                                                           \
  X(cuptiGetVersion) X(cuptiGetResultString) X(cuptiSubscribe) X(cuptiUnsubscribe) \
  X(cuptiEnableCallback) X(cuptiGetGraphNodeId) X(cuptiActivityRegisterCallbacks) \
  X(cuptiActivityEnable) X(cuptiActivityDisable) X(cuptiActivityFlushAll)       \
  X(cuptiActivityGetNextRecord) X(cuptiActivityPushExternalCorrelationId)       \
  X(cuptiActivityPopExternalCorrelationId) X(cuptiGetTimestamp) X(cuptiActivityGetNumDroppedRecords)
#define DECLARE(name) static __typeof__(&name) f_##name;
CUPTI_FUNCS(DECLARE)
#undef DECLARE
/* Optional (CUPTI 12.x on): CUPTI's timestamps read our clock. */
static __typeof__(&cuptiActivityRegisterTimestampCallback) f_timestamp_cb;

static void *g_lib;
static CUpti_SubscriberHandle g_subscriber;
/* Start and stop, one at a time. */
static pthread_mutex_t g_start_mu = PTHREAD_MUTEX_INITIALIZER;
/* What waits to go to the kernels file: the core's lines and each completed
 * buffer's, appended under g_out_mu (held only to append or to swap: the
 * threads whose calls end take it). The file is written under g_write_mu,
 * taken before g_out_mu, so that lines go out in the order appended. */
static pthread_mutex_t g_out_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_write_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -1;
static sp_buf g_out;
static int g_out_failed; /* a write failed: said once at the stop */
/* CUPTI's buffer thread's own (and the stopping thread's flush), under
 * g_api_mu, which no calling thread takes: */
static pthread_mutex_t g_api_mu = PTHREAD_MUTEX_INITIALIZER;
static long long g_dropped;    /* records CUPTI dropped (its buffers full) */
static long long g_incomplete; /* records not finished when their buffer came back */

/* The calling thread's ids pushed, innermost last (a graph node made now
 * belongs to the innermost). Deeper nesting is pushed to CUPTI but not
 * noted for nodes. */
#define EXT_DEPTH 16
static _Thread_local uint64_t t_ext[EXT_DEPTH];
static _Thread_local int t_ext_n;

/* The kinds enabled, in the order enabled (disabled in reverse). */
static const CUpti_ActivityKind KINDS[] = {
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
#define N_KINDS (sizeof KINDS / sizeof KINDS[0])

/* The API records seen last, by correlation id: when a kernel was launched
 * and on which thread (its record names only the API call). A kernel whose
 * launch is no longer here (or not yet: records of one API call and its
 * kernel may come in different buffers) has no "launch_ns". */
#define API_SLOTS 65536
static struct api_slot {
  uint32_t corr;
  uint32_t thread;
  uint64_t start;
} *g_api; /* under g_api_mu */

static uint64_t CUPTIAPI monotonic_ts(void) { return (uint64_t)sp_clock_ns(); }

/* Writes what waits: swapped out under g_out_mu, written under g_write_mu
 * (held by the caller), so that appending never waits for the disk. */
static sp_buf g_writing; /* under g_write_mu */
static void out_write_locked(void) {
  pthread_mutex_lock(&g_out_mu);
  sp_buf b = g_out;
  g_out = g_writing;
  g_out.n = 0;
  int fd = g_fd;
  pthread_mutex_unlock(&g_out_mu);
  size_t at = 0;
  while (fd >= 0 && at < b.n) {
    ssize_t w = write(fd, b.p + at, b.n - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      pthread_mutex_lock(&g_out_mu);
      g_out_failed = errno ? errno : EIO;
      pthread_mutex_unlock(&g_out_mu);
      break;
    }
    at += (size_t)w;
  }
  b.n = 0;
  g_writing = b;
}

/* One line (or several) to the kernels file, from the core or CUPTI's
 * thread; past 64 KiB waiting, written now unless another thread writes. */
static void out_line(const char *s, size_t n) {
  pthread_mutex_lock(&g_out_mu);
  int full = 0;
  if (g_fd >= 0) {
    buf_put(&g_out, s, n);
    if (g_out.failed) { /* the line is lost: said at the stop */
      g_out_failed = ENOMEM;
      g_out.failed = 0;
      g_out.n = 0;
    }
    full = g_out.n >= (1u << 16);
  }
  pthread_mutex_unlock(&g_out_mu);
  if (full && pthread_mutex_trylock(&g_write_mu) == 0) {
    out_write_locked();
    pthread_mutex_unlock(&g_write_mu);
  }
}

static const char *result_text(CUptiResult r) {
  const char *s = NULL;
  if (f_cuptiGetResultString) f_cuptiGetResultString(r, &s);
  return s ? s : "unknown CUPTI error";
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  enum { SIZE = 8 << 20 };
  *buffer = aligned_alloc(8, SIZE);
  *size = *buffer ? SIZE : 0;
  *max_records = 0;
}

/* A kernel record's line into b. */
static void kernel_line(sp_buf *b, const sp_kernel_rec *k) {
  char num[32];
  BUF_LIT(b, "{\"kernel\": ");
  const char *name = k->name ? k->name : "";
  buf_json_str(b, name, strlen(name));
#define NUM(key, v) BUF_LIT(b, key), buf_put(b, num, (size_t)(text_put_i64(num, (int64_t)(v)) - num))
  NUM(", \"correlation\": ", k->correlationId);
  NUM(", \"start_ns\": ", k->start);
  NUM(", \"end_ns\": ", k->end);
  NUM(", \"device\": ", k->deviceId);
  NUM(", \"stream\": ", k->streamId);
  NUM(", \"grid\": [", k->gridX);
  NUM(", ", k->gridY);
  NUM(", ", k->gridZ);
  NUM("], \"block\": [", k->blockX);
  NUM(", ", k->blockY);
  NUM(", ", k->blockZ);
  BUF_LIT(b, "]");
  if (k->graphId) {
    NUM(", \"graph\": ", k->graphId);
    NUM(", \"graph_node\": ", k->graphNodeId);
  }
  const struct api_slot *a = &g_api[k->correlationId % API_SLOTS];
  if (a->corr == k->correlationId && a->start) {
    NUM(", \"launch_ns\": ", a->start);
    NUM(", \"thread\": ", a->thread);
  }
#undef NUM
  BUF_LIT(b, "}\n");
}

/* CUPTI hands back a buffer it filled (on its own thread, or on the one
 * that flushes): its kernels and correlations as lines, made without the
 * lock the calling threads take. A record still running when its buffer
 * came back (a forced flush) ends the buffer's reading: counted. */
static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
  (void)size;
  sp_buf b = {0};
  char num[32];
  CUpti_Activity *r = NULL;
  pthread_mutex_lock(&g_api_mu);
  CUptiResult rc = CUPTI_SUCCESS;
  while (valid && (rc = f_cuptiActivityGetNextRecord(buffer, valid, &r)) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME || r->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
      const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
      struct api_slot *s = &g_api[a->correlationId % API_SLOTS];
      s->corr = a->correlationId;
      s->thread = a->threadId;
      s->start = a->start;
    } else if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const sp_kernel_rec *k = (const sp_kernel_rec *)r;
      if (!k->start && !k->end) g_incomplete++; /* not run yet when flushed: no time to say */
      else kernel_line(&b, k);
    } else if (r->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const CUpti_ActivityExternalCorrelation *e = (const CUpti_ActivityExternalCorrelation *)r;
      if (e->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) continue;
      BUF_LIT(&b, "{\"correlation\": ");
      buf_put(&b, num, (size_t)(text_put_i64(num, e->correlationId) - num));
      BUF_LIT(&b, ", \"ext\": ");
      buf_put(&b, num, (size_t)(text_put_i64(num, (int64_t)e->externalId) - num));
      BUF_LIT(&b, "}\n");
    }
  }
  if (valid && rc != CUPTI_ERROR_MAX_LIMIT_REACHED) g_incomplete++; /* the rest of the buffer is unread */
  size_t dropped = 0;
  if (f_cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
    g_dropped += (long long)dropped;
  pthread_mutex_unlock(&g_api_mu);
  free(buffer);
  if (b.failed) {
    pthread_mutex_lock(&g_out_mu);
    g_out_failed = ENOMEM;
    pthread_mutex_unlock(&g_out_mu);
  } else if (b.n) {
    out_line(b.p, b.n);
  }
  free(b.p);
}

/* A graph node made while a call had its id pushed belongs to that call;
 * one cloned (a graph instantiated, or cloned) to the node it came from. */
static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data) {
  (void)user;
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  const CUpti_ResourceData *rd = (const CUpti_ResourceData *)data;
  const CUpti_GraphData *g = (const CUpti_GraphData *)rd->resourceDescriptor;
  uint64_t node = 0, from = 0;
  if (!g || !g->node || f_cuptiGetGraphNodeId(g->node, &node) != CUPTI_SUCCESS) return;
  char line[96], *o = line;
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED && t_ext_n > 0) {
    o = PUT_LIT(o, "{\"graph_node\": ");
    o = text_put_i64(o, (int64_t)node);
    o = PUT_LIT(o, ", \"ext\": ");
    o = text_put_i64(o, (int64_t)t_ext[(t_ext_n > EXT_DEPTH ? EXT_DEPTH : t_ext_n) - 1]);
  } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED && g->originalNode &&
             f_cuptiGetGraphNodeId(g->originalNode, &from) == CUPTI_SUCCESS) {
    o = PUT_LIT(o, "{\"graph_node\": ");
    o = text_put_i64(o, (int64_t)node);
    o = PUT_LIT(o, ", \"cloned_from\": ");
    o = text_put_i64(o, (int64_t)from);
  } else {
    return;
  }
  o = PUT_LIT(o, "}\n");
  out_line(line, (size_t)(o - line));
}

static int load(const char *path, char *err, size_t n) {
  if (g_lib) return 0;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(err, n, "cannot load %s: %s", path, dlerror());
    return -1;
  }
#define LOOK(name)                                                 \
  if (!(f_##name = (__typeof__(&name))dlsym(lib, #name))) {         \
    snprintf(err, n, "%s has no %s", path, #name);                  \
    dlclose(lib);                                                   \
    return -1;                                                      \
  }
  CUPTI_FUNCS(LOOK)
#undef LOOK
  f_timestamp_cb = (__typeof__(&cuptiActivityRegisterTimestampCallback))dlsym(
      lib, "cuptiActivityRegisterTimestampCallback");
  uint32_t version = 0;
  f_cuptiGetVersion(&version);
  /* the records' layout is the header's: another major version may differ */
  if (version / 10000 != CUPTI_API_VERSION / 10000) {
    snprintf(err, n, "%s is CUPTI %u; this build reads CUPTI %d's records", path, version,
             CUPTI_API_VERSION);
    dlclose(lib);
    return -1;
  }
  g_lib = lib;
  return 0;
}

/* The kinds enabled so far are disabled, the subscriber let go. */
static void undo(size_t kinds) {
  while (kinds > 0) f_cuptiActivityDisable(KINDS[--kinds]);
  if (g_subscriber) f_cuptiUnsubscribe(g_subscriber);
  g_subscriber = NULL;
}

/* A forked child has the parent's collector's state but not its CUPTI
 * thread, and shares its file's offset: the child collects nothing and
 * never writes to the file (the parent's lines stay the parent's). */
static void cupti_at_fork_child(void) {
  atomic_store(&g_owner, NULL);
  g_fd = -1; /* the parent's: not closed here (fork's copy; CLOEXEC for exec) */
  g_out.n = 0;
  g_writing.n = 0;
  pthread_mutex_init(&g_out_mu, NULL);
  pthread_mutex_init(&g_write_mu, NULL);
  pthread_mutex_init(&g_api_mu, NULL);
  pthread_mutex_init(&g_start_mu, NULL);
}

static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static void watch_fork(void) { pthread_atfork(NULL, NULL, cupti_at_fork_child); }

static int start_locked(const sp_profiler *owner, const char *lib_path, const char *out_path, char *err,
                        size_t n) {
  if (atomic_load(&g_owner)) {
    snprintf(err, n, "another profiler of this process collects GPU kernel times already");
    return SP_CUPTI_REFUSED;
  }
  if (load(lib_path, err, n)) return SP_CUPTI_NO_LIBRARY;
  if (!g_api && !(g_api = calloc(API_SLOTS, sizeof *g_api))) {
    snprintf(err, n, "out of memory");
    return SP_CUPTI_REFUSED;
  }
  CUpti_SubscriberHandle sub = NULL;
  CUptiResult r = f_cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_callback, NULL);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    snprintf(err, n, "CUPTI is held by another tool (%s): one CUPTI client per process; "
             "stop torch.profiler, nsys or the other one first", result_text(r));
    return SP_CUPTI_REFUSED;
  }
  if (r != CUPTI_SUCCESS) {
    snprintf(err, n, "CUPTI refused to start (cuptiSubscribe: %s): no CUDA driver or device?", result_text(r));
    return SP_CUPTI_REFUSED;
  }
  g_subscriber = sub;
  size_t kinds = 0;
  const char *what = "cuptiEnableCallback";
  if ((r = f_cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                 CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED)) != CUPTI_SUCCESS ||
      (r = f_cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                 CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED)) != CUPTI_SUCCESS)
    goto fail;
  what = "cuptiActivityRegisterCallbacks";
  if ((r = f_cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS)
    goto fail;
  /* after the buffers' callbacks, before any kind (CUPTI's order) */
  int monotonic = f_timestamp_cb && f_timestamp_cb(monotonic_ts) == CUPTI_SUCCESS;
  uint64_t cupti_ns = 0;
  f_cuptiGetTimestamp(&cupti_ns);
  int64_t mono_ns = sp_clock_ns();
  int fd = open(out_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644); /* never another's file */
  if (fd < 0) {
    snprintf(err, n, "cannot create %s: %s", out_path, strerror(errno));
    undo(0);
    return SP_CUPTI_REFUSED;
  }
  pthread_mutex_lock(&g_out_mu);
  g_fd = fd;
  g_out_failed = 0;
  g_out.n = 0;
  pthread_mutex_unlock(&g_out_mu);
  pthread_mutex_lock(&g_api_mu);
  g_dropped = g_incomplete = 0;
  pthread_mutex_unlock(&g_api_mu);
  char head[256];
  int len = snprintf(head, sizeof head,
                     "{\"kernels_file\": 1, \"clock\": \"%s\", \"cupti_ns\": %llu, \"monotonic_ns\": %lld, "
                     "\"cupti_version\": %d}\n",
                     monotonic ? "monotonic" : "cupti", (unsigned long long)cupti_ns, (long long)mono_ns,
                     CUPTI_API_VERSION);
  out_line(head, (size_t)len);
  what = "cuptiActivityEnable";
  for (; kinds < N_KINDS; kinds++)
    if ((r = f_cuptiActivityEnable(KINDS[kinds])) != CUPTI_SUCCESS) goto fail_open;
  pthread_once(&g_fork_once, watch_fork);
  atomic_store_explicit(&g_owner, owner, memory_order_release); /* after the functions it calls were loaded */
  return 0;
fail_open:
  pthread_mutex_lock(&g_out_mu);
  close(g_fd);
  g_fd = -1;
  g_out.n = 0;
  pthread_mutex_unlock(&g_out_mu);
  unlink(out_path); /* ours: made above */
fail:
  undo(kinds);
  snprintf(err, n, "%s: %s", what, result_text(r));
  return SP_CUPTI_REFUSED;
}

int sp_cupti_start(const sp_profiler *owner, const char *lib_path, const char *out_path, char *err, size_t n) {
  pthread_mutex_lock(&g_start_mu);
  int rc = start_locked(owner, lib_path, out_path, err, n);
  pthread_mutex_unlock(&g_start_mu);
  return rc;
}

int sp_cupti_stop(char *err, size_t n) {
  pthread_mutex_lock(&g_start_mu);
  if (!atomic_exchange(&g_owner, NULL)) {
    pthread_mutex_unlock(&g_start_mu);
    return 0;
  }
  /* what CUPTI holds of finished work first, then every buffer, the last
   * partly filled ones too (the caller waited for the device), then
   * nothing more is made */
  f_cuptiActivityFlushAll(0);
  CUptiResult r = f_cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  undo(N_KINDS);
  f_cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  pthread_mutex_lock(&g_api_mu);
  long long dropped = g_dropped, incomplete = g_incomplete;
  pthread_mutex_unlock(&g_api_mu);
  char tail[96];
  int len = snprintf(tail, sizeof tail, "{\"end\": true, \"dropped\": %lld, \"incomplete\": %lld}\n", dropped,
                     incomplete);
  out_line(tail, (size_t)len);
  pthread_mutex_lock(&g_write_mu);
  out_write_locked();
  pthread_mutex_lock(&g_out_mu);
  int failed = g_out_failed;
  if (g_fd >= 0) close(g_fd);
  g_fd = -1;
  pthread_mutex_unlock(&g_out_mu);
  pthread_mutex_unlock(&g_write_mu);
  pthread_mutex_unlock(&g_start_mu);
  if (failed) {
    snprintf(err, n, "the kernels file lost lines: %s", strerror(failed));
    return -1;
  }
  if (r != CUPTI_SUCCESS) {
    snprintf(err, n, "cuptiActivityFlushAll: %s", result_text(r));
    return -1;
  }
  return 0;
}

SP_PRIVATE uint64_t cupti_push(void) {
  uint64_t id = atomic_fetch_add_explicit(&g_ext_next, 1, memory_order_relaxed) + 1;
  if (f_cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id) !=
      CUPTI_SUCCESS)
    return 0;
  if (t_ext_n < EXT_DEPTH) t_ext[t_ext_n] = id;
  t_ext_n++;
  return id;
}

SP_PRIVATE void cupti_pop(void) {
  uint64_t last = 0;
  f_cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
  if (t_ext_n > 0) t_ext_n--;
}

#else /* no CUPTI headers */
int sp_cupti_built(void) { return 0; }
int sp_cupti_start(const sp_profiler *owner, const char *lib_path, const char *out_path, char *err, size_t n) {
  (void)owner;
  (void)lib_path;
  (void)out_path;
  snprintf(err, n, "this build has no CUPTI (its headers were not found when it was built)");
  return SP_CUPTI_REFUSED;
}
int sp_cupti_stop(char *err, size_t n) {
  (void)err;
  (void)n;
  return 0;
}
SP_PRIVATE uint64_t cupti_push(void) { return 0; }
SP_PRIVATE void cupti_pop(void) {}
static void out_line(const char *s, size_t n) {
  (void)s;
  (void)n;
}
#endif

SP_PRIVATE int cupti_for(const sp_profiler *p) {
  return atomic_load_explicit(&g_owner, memory_order_acquire) == p;
}

/* The call that pushed ext was written as record call_id (repeat 0), or was
 * a repeat of record call_id: its kernels are that record's. */
SP_PRIVATE void cupti_called(uint64_t ext, long long call_id, int repeat) {
  if (!ext || call_id <= 0 || !atomic_load_explicit(&g_owner, memory_order_relaxed)) return;
  char line[96], *o = line;
  o = PUT_LIT(o, "{\"ext\": ");
  o = text_put_i64(o, (int64_t)ext);
  o = repeat ? PUT_LIT(o, ", \"repeat_of\": ") : PUT_LIT(o, ", \"call_id\": ");
  o = text_put_i64(o, call_id);
  o = PUT_LIT(o, "}\n");
  out_line(line, (size_t)(o - line));
}

/* A logged pass began (1) or ended (0) on this thread, now: the window in
 * which a kernel no record explains is the ledger's. */
SP_PRIVATE void cupti_pass(const sp_profiler *p, int begun) {
  if (!p || !cupti_for(p)) return;
  char line[64], *o = line;
  o = begun ? PUT_LIT(o, "{\"pass_begin_ns\": ") : PUT_LIT(o, "{\"pass_end_ns\": ");
  o = text_put_i64(o, sp_clock_ns());
  o = PUT_LIT(o, "}\n");
  out_line(line, (size_t)(o - line));
}

/* For a launch recorded after it ran (sp_launch.c): an id pushed around the
 * launch, handed to its record (sp_call_begin then pushes none). */
uint64_t sp_cupti_region_begin(void) { return atomic_load_explicit(&g_owner, memory_order_acquire) ? cupti_push() : 0; }
void sp_cupti_region_end(uint64_t ext) {
  if (ext) cupti_pop();
}

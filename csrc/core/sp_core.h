/*
 * sp_core.h -- the plain C core of sgl_shapeprof.
 *
 * Knows neither Python nor torch. The torch side (sp_fallback.cpp) describes
 * each operator call as a flat array of integers (an "encoding", below); the
 * core hashes it, deduplicates it, counts it, turns it into a JSON Lines
 * record and writes that record into a MAP_SHARED window of the records file,
 * so that a SIGKILL loses nothing that was written.
 *
 * Handles are opaque; functions return SP_OK or an SP_* code, and
 * sp_errmsg() says what went wrong.
 */
#ifndef SP_CORE_H
#define SP_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SP_OK 0
#define SP_ERROR 1  /* bad argument or state; see sp_errmsg */
#define SP_NOMEM 2
#define SP_IOERR 3  /* open/grow/map/write of an output file failed */
#define SP_BUSY 4   /* the records file is held by another open profiler */
#define SP_EXISTS 5 /* sp_config.exclusive: the records file's name is taken */

typedef struct sp_profiler sp_profiler;
typedef struct sp_thread sp_thread;

typedef struct sp_config {
  const char *path;        /* records file; the summary goes beside it */
  long long rank;          /* written to the summary */
  long long skip_warmup;   /* passes 1..skip_warmup are not logged */
  long long log_n_passes;  /* logged passes at most; 0 = unlimited */
  int dedupe;              /* write each signature once (FORMAT.md: its
                              operation, inputs, outputs, arguments but
                              floats where recorded, phase and graph) */
  const char *phases;      /* comma list of phases to log; NULL/"" = all */
  int args;                /* record non-tensor arguments and each input
                              tensor's strides, offset and device too */
  const char *worker;      /* the summary's "worker": a JSON object written
                              as given (the caller's json.dumps); NULL: none */
  long long max_bytes;     /* the records file's cap: recording stops before a
                              record would pass it (the summary says so).
                              0: the default, SP_DEFAULT_MAX_BYTES, and on a
                              RAM-backed filesystem (tmpfs) at most a quarter
                              of its free space when the file opens; -1: none */
  int exclusive;           /* create the file: SP_EXISTS if the name is taken
                              (a request's file is never an earlier one) */
  int time;                /* measure each recorded call's wall time on its
                              thread (FORMAT.md: "time_us", and with dedupe
                              the summary's "signature_times");
                              SP_TIME_KERNELS: its GPU kernels too, while
                              the collector runs (sp_cupti_start) */
  int nvtx;                /* a range per recorded call, named by its
                              operation and input shapes: SP_RANGES_NVTX
                              (sp_nvtx_built()) or SP_RANGES_ROCTX
                              (sp_roctx_load() first); 0: none */
  const char *dispatch_key; /* the summary's "dispatch_key": the key the calls
                               reach the recorder through (the torch layer's
                               route, sp_fallback_key()); NULL: not written */
} sp_config;

/* The default cap (sp_config.max_bytes): 1 GiB, more than a thousand
 * passes of a large model undeduplicated, less than a server's disk. */
#define SP_DEFAULT_MAX_BYTES ((long long)1 << 30)

/* Opens (truncates) the records file. On failure other than SP_NOMEM, *out
 * still holds a handle whose sp_errmsg() explains; sp_free() it. */
int sp_open(const sp_config *cfg, sp_profiler **out);
/* Ends profiling: trims the records file, writes the summary. Idempotent.
 * In a forked child it only lets go of the parent's file. */
int sp_close(sp_profiler *p);
/* Closes p if open and drops the owner's reference: p is freed once no
 * thread's pass holds it either (a thread whose pass of p is still open
 * after another thread closed p must not read freed memory, nor a profiler
 * made later at the same address). */
void sp_free(sp_profiler *p);
const char *sp_errmsg(const sp_profiler *p);
const char *sp_records_path(const sp_profiler *p);
const char *sp_summary_path(const sp_profiler *p);
/* Writes the summary path for a records path into buf (NUL-terminated). */
int sp_summary_path_for(const char *records_path, char *buf, size_t cap);

/* Passes. A pass is the calling thread's: several threads run passes of one
 * profiler at once, each numbered as it began (skip_warmup and log_n_passes
 * count them all), and begin, end and reopen act on the calling thread's
 * pass only. sp_pass_begin returns 1 when the pass is logged, 0 when not
 * (warm-up, past the pass limit, phase filtered out, profiler closed or
 * failed). A begin while this thread's pass is open (of any profiler) ends
 * that pass first. The caller holds a reference to p (its owner's). */
int sp_pass_begin(sp_profiler *p, const char *phase);
/* May wait: the flusher thread holds the pass lock while it cuts the file
 * (a caller holding an interpreter lock lets go of it first). */
void sp_pass_end(sp_profiler *p);
/* sp_pass_end if it needs no waiting (the pass lock is free and the flusher
 * thread runs): returns 1 if the pass was ended, 0 if the caller should call
 * sp_pass_end. */
int sp_pass_end_nowait(sp_profiler *p);
/* Reopens this thread's pass that ended last, under its number and phase, without
 * counting a new pass: for work that belongs to it but runs after its end
 * (SGLang's delayed sampling). Returns 1 if it was logged. End it with
 * sp_pass_end. */
int sp_pass_reopen(sp_profiler *p);
/* Nonzero while some thread's logged pass is open and the profiler works: 1, with
 * SP_LOGGING_ARGS added when calls are described with their arguments
 * (sp_config.args; the encoding below). Lock-free. */
#define SP_LOGGING_ARGS 2
#define SP_LOGGING_TIME 4 /* sp_config.time */
#define SP_LOGGING_KERNELS 8 /* SP_TIME_KERNELS, with the collector running */
int sp_logging(const sp_profiler *p);

/* Graph captures (CUDA graphs and the like): the calls run while a graph is
 * captured are the calls every replay of it repeats. sp_graph_begin opens a
 * capture "pass" for the graph the caller names by key (SGLang: the padded
 * batch size): its records carry "forward_pass": 0 and "graph": key, their
 * signatures are deduplicated per graph, and it does not count as a forward
 * pass (nor against skip_warmup or log_n_passes); the phase filter applies.
 * Returns 1 when it is logged. End it with sp_pass_end. */
int sp_graph_begin(sp_profiler *p, const char *phase, long long key);
/* n replays of graph key, counted (returns 1) when they happen inside a
 * logged forward pass of the calling thread: the summary's "graphs" says,
 * per key, the captures recorded and the replays counted. real: the size
 * those replays really served (the batch before it was padded to the
 * graph's size), or -1 when the caller does not know it; the summary
 * counts replays per real size too. */
int sp_graph_replay(sp_profiler *p, long long key, long long real, long long n);
/* A graph capture that another profiler kept (a profiler armed for
 * requests records its graph captures apart, at start-up): written into p
 * as if p had recorded it, when a logged forward pass of p on the calling
 * thread replays that graph. kept is closed, recorded exactly one capture
 * with p's dedupe and args settings, and text (n bytes) is its records
 * file's content. Each record is written under p's next call_id, and p's
 * counts gain kept's: operators, phases, signatures and their counts,
 * errors, the capture in "graphs". Whole or not at all: not when p's phase
 * filter leaves the capture's phase out, when its cap would be passed (p
 * stops there, as any record would), or the text is not kept's records.
 * Returns 1 when adopted. */
int sp_graph_adopt(sp_profiler *p, sp_profiler *kept, const char *text, size_t n);
/* A graph that exists (a server captured it) though p did not record its
 * capture: listed in the summary's "graphs" from now on, with the captures
 * and replays p counts for it (0 until then), when p's phase filter takes
 * its phase: a graph the window never replayed is then said to be unused. */
int sp_graph_known(sp_profiler *p, long long key, const char *phase);
/* The batch size (the server's: requests) of the calling thread's open
 * logged forward pass, as the server gave it. When that pass ends without
 * having replayed a graph (sp_graph_replay), it is counted in the summary's
 * "eager_sizes" by its phase and this size: the batches that ran eagerly.
 * Returns 1 when noted (a logged forward pass of p is open here). */
int sp_pass_size(sp_profiler *p, long long size);

/* The calling thread's pass, the one source of truth for which profiler a
 * thread's calls go to (the fallback's key follows it). sp_pass_current:
 * the profiler of this thread's open pass (NULL: none) and in *mode its
 * sp_logging when that pass is logged, else 0. sp_pass_target: the
 * profiler a call on this thread goes to: its open pass's (with *mode as
 * sp_pass_current says), else, on a thread that began no pass (one that
 * inherited the key: autograd's), the one whose logged pass began last,
 * with *mode its sp_logging; NULL and 0 when there is none. Lock-free: one
 * call per operator. The pointer is valid while this thread's pass holds
 * it (an inherited one: while its owner keeps it). */
sp_profiler *sp_pass_current(int *mode);
sp_profiler *sp_pass_target(int *mode);

/* Counters, as the summary reports them. */
typedef struct sp_stats {
  long long records;          /* total_operations */
  long long passes;           /* forward_passes */
  long long logged_passes;
  long long dedupe_skipped;   /* dedupe_skipped_count */
  long long signatures;       /* unique_op_signatures: of calls that returned */
  long long errors;           /* records of calls that raised */
  long long bytes;            /* bytes of records written */
} sp_stats;
void sp_get_stats(sp_profiler *p, sp_stats *out);

/* ---- GPU kernel times (sp_cupti.c; FORMAT.md "Kernels") ---------------- */
enum { SP_TIME_CALLS = 1, SP_TIME_KERNELS = 2 }; /* sp_config.time */
/* The CUPTI_API_VERSION this build reads CUPTI with, or 0: its headers were
 * not found when it was built. */
int sp_cupti_built(void);
/* Starts the process's one collector, for owner's calls and passes only:
 * CUPTI from the library at lib_path, its lines to a new file at out_path
 * (never an existing one). 0, or with why in err (n bytes):
 * SP_CUPTI_NO_LIBRARY, the library at lib_path cannot be used (it does not
 * load, lacks CUPTI's functions or is another major version: another may
 * do), or SP_CUPTI_REFUSED (no CUPTI in this build, another tool holds
 * CUPTI, another profiler collects, CUPTI refuses, ...). */
enum { SP_CUPTI_REFUSED = -1, SP_CUPTI_NO_LIBRARY = -2 };
int sp_cupti_start(const sp_profiler *owner, const char *lib_path, const char *out_path, char *err, size_t n);
/* Flushes what CUPTI holds and stops (the caller waits for the device
 * first: CUPTI does not): 0, or -1 with why (lines lost). Nothing to
 * stop: 0. */
int sp_cupti_stop(char *err, size_t n);
/* A launch recorded after it ran (sp_launch.c): the id pushed around it
 * (0: none: no collector), handed to its call as pub.gpu_ext, and popped. */
uint64_t sp_cupti_region_begin(void);
void sp_cupti_region_end(uint64_t ext);

/* Whether this build has NVTX ranges (sp_config.nvtx): its headers were
 * found when it was built. */
int sp_nvtx_built(void);
enum { SP_RANGES_NVTX = 1, SP_RANGES_ROCTX = 2 };
/* rocTX's ranges (SP_RANGES_ROCTX: ROCm's rocprof and RPD see them), from
 * the library at path (ROCm's libroctx64.so): 0, or -1 with why in err
 * (n bytes). Once loaded, it stays for the process. */
int sp_roctx_load(const char *path, char *err, size_t n);

/* ---- dtype names (process-wide) ---------------------------------------- */
/* names[i] is the Python spelling ("torch.float32") of dtype code i. Copied.
 * A code without a name is written as "torch.unknown<code>" and reported
 * once on stderr. */
int sp_set_dtype_names(const char *const *names, int n);

/* ---- operators (process-wide registry) -------------------------------- */
/* key: any pointer that identifies the operator while it is registered.
 * qualified: "ns::name"; overload: "" for the default overload. Sets *id
 * to the operator id (>= 0) and returns SP_OK; SP_NOMEM, or SP_ERROR for a
 * bad argument (more than 65536 operators also give SP_NOMEM). */
int sp_op_intern(const void *key, const char *qualified, const char *overload,
                 int n_args, const char *const *arg_names, int n_returns, int *id);
/* The operator behind key was deregistered; key may come back as another. */
void sp_op_forget(const void *key);
/* A call outside the dispatcher (a Triton kernel's launch, a kernel
 * library's API call), described with the same encoding: its inputs by
 * arg_names (its parameters, a launch's options), n_returns outputs (a
 * launch none, an API call one: its tensor, or a list for a tuple of them).
 * Its operation is written as given, and its non-tensor values always are
 * (its "args", floats left out of its signature), with or without
 * sp_config.args. */
int sp_launch_intern(const void *key, const char *operation, int n_args,
                     const char *const *arg_names, int n_returns, int *id);

/* The code of a dtype by its name ("torch.float32"), or -1; the code of a
 * name in an enum table (SP_NAMES_*, below), or -1. */
int sp_dtype_code(const char *name);
int sp_name_code(int table, const char *name);

/* ---- names of enum values (process-wide) ------------------------------- */
/* The spelling of each code of the enums that arguments carry, set once by
 * the torch side: device types ("cuda"), layouts ("torch.strided"), memory
 * formats ("torch.channels_last"). Copied; at most 40 bytes each. */
enum { SP_NAMES_DEVICE = 0, SP_NAMES_LAYOUT = 1, SP_NAMES_MEMORY_FORMAT = 2, SP_NAMES_N = 3 };
int sp_set_names(int table, const char *const *names, int n);

/* ---- one thread's scratch: op cache and the call being described -------- */
/*
 * The call encoding, an int64 array built by the caller:
 *   inputs:  [op_id] then per logged argument:
 *              SP_ENC_TENSOR, arg_index, <tensor>
 *              SP_ENC_LIST,   arg_index, n, <entry> x n
 *   outputs: per return, in schema order:
 *              SP_ENC_TENSOR, <tensor> | SP_ENC_LIST, n, <entry> x n |
 *              SP_ENC_NONE
 *   <tensor> = dtype_code, ndim, size x ndim;  <entry> = <tensor> or -1 (None)
 * The inputs part, float values left out, and the outputs are a call's part
 * of its signature (deduplication's key; with its pass's phase and graph).
 *
 * With arguments (SP_LOGGING_ARGS), input tensors are "strided":
 *   dtype_code | SP_ENC_STRIDED, ndim, size x ndim, stride x ndim, offset,
 *   device_type, device_index (-1: none)
 * and every other argument is in the inputs part too, by schema index:
 *   SP_ENC_INT, arg, v            SP_ENC_INTS,   arg, n, v x n
 *   SP_ENC_FLOAT, arg, bits       SP_ENC_FLOATS, arg, n, bits x n
 *   SP_ENC_BOOL, arg, 0|1         SP_ENC_BOOLS,  arg, n, 0|1 x n
 *   SP_ENC_NULL, arg              SP_ENC_COMPLEX, arg, bits(real), bits(imag)
 *   SP_ENC_STR, arg, nbytes, bytes packed 8 to a word
 *   SP_ENC_DTYPE, arg, dtype_code SP_ENC_NAME, arg, table (SP_NAMES_*), code
 *   SP_ENC_DEVICE, arg, device_type, device_index
 *   SP_ENC_OPAQUE, arg, nbytes, bytes: a value of another type, by type name
 * (bits: a double's IEEE-754 bits). They are written as the record's "args".
 */
/* Each layer that reads this header checks what the encoding relies on:
 * the core and the Python layer in C, the torch layer in C++. */
#ifdef __cplusplus
#define SP_STATIC_ASSERT(cond, why) static_assert(cond, why)
#else
#define SP_STATIC_ASSERT(cond, why) _Static_assert(cond, why)
#endif
SP_STATIC_ASSERT(sizeof(double) == sizeof(int64_t), "a float value is one word: its IEEE-754 bits");
enum { SP_ENC_NONE = 0, SP_ENC_TENSOR = 1, SP_ENC_LIST = 2, SP_ENC_INT, SP_ENC_FLOAT,
       SP_ENC_BOOL, SP_ENC_NULL, SP_ENC_INTS, SP_ENC_FLOATS, SP_ENC_BOOLS, SP_ENC_COMPLEX,
       SP_ENC_STR, SP_ENC_DTYPE, SP_ENC_NAME, SP_ENC_DEVICE, SP_ENC_OPAQUE };
#define SP_ENC_STRIDED ((int64_t)1 << 16)

typedef struct sp_enc {
  int64_t *w;
  size_t n, cap;
  int tensors; /* tensors seen so far */
  int failed;  /* an allocation failed; the call is not recorded */
} sp_enc;

struct sp_thread_public {
  sp_enc in, out;
  /* Set before sp_call_begin by a caller whose call runs inside another
   * one's record on this thread (a kernel launched by a custom op's kernel):
   * that call's op id + 1, else 0. Written as "within"; part of the
   * signature. */
  int within;
  /* After sp_call_begin returned SP_CALL_COUNTED: the words the outputs
   * must encode to for the call to be the repeat it was counted as. */
  const int64_t *expect;
  size_t expect_n;
  /* A timed profiler's call (sp_config.time): when it began and returned,
   * sp_clock_ns. sp_call_begin sets t0 (else it stays 0); the caller sets
   * t1 as the call returns (sp_call_returned), or the call's end takes the
   * clock then. A caller that timed the call itself (a launch recorded
   * after it ran) sets both (sp_call_span). */
  int64_t t0, t1;
  /* A launch recorded after it ran, under a kernels-timed profiler: the id
   * its caller pushed around it (sp_cupti_region_begin), else 0. */
  uint64_t gpu_ext;
};

/* The one clock of every call's time: CLOCK_MONOTONIC, in ns (Python's
 * time.perf_counter_ns() on Linux reads the same clock). */
static inline int64_t sp_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

sp_thread *sp_thread_new(void);
void sp_thread_free(sp_thread *t);
static inline struct sp_thread_public *sp_thread_enc(sp_thread *t) {
  return (struct sp_thread_public *)t; /* first member of sp_thread */
}
/* Op id cached for key on this thread, or -1. */
int sp_thread_op(sp_thread *t, const void *key);
void sp_thread_cache_op(sp_thread *t, const void *key, int op_id);

int sp_enc_grow(sp_enc *e, size_t extra);
static inline void sp_enc_reset(sp_enc *e) {
  e->n = 0;
  e->tensors = 0;
  e->failed = 0;
}
static inline void sp_enc_push(sp_enc *e, int64_t v) {
  if (e->n == e->cap && sp_enc_grow(e, 1) != SP_OK) return;
  e->w[e->n++] = v;
}
/* n words from src to dst (they do not overlap). Most tensors have at most
 * four dimensions: those are copied straight, without the loop's set-up
 * (a few words, copied per described tensor on the hot path). */
static inline void sp_words_copy(int64_t *dst, const int64_t *src, int n) {
  switch (n) {
    case 4: dst[3] = src[3]; /* fall through */
    case 3: dst[2] = src[2]; /* fall through */
    case 2: dst[1] = src[1]; /* fall through */
    case 1: dst[0] = src[0]; /* fall through */
    case 0: return;
    default:
      for (int i = 0; i < n; i++) dst[i] = src[i];
  }
}
/* Whether n words at a and b are the same; straight for at most four, as
 * sp_words_copy. */
static inline int sp_words_same(const int64_t *a, const int64_t *b, int n) {
  switch (n) {
    case 4: if (a[3] != b[3]) return 0; /* fall through */
    case 3: if (a[2] != b[2]) return 0; /* fall through */
    case 2: if (a[1] != b[1]) return 0; /* fall through */
    case 1: return a[0] == b[0];
    case 0: return 1;
    default:
      for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
      return 1;
  }
}
/* head_n words (a tag, an argument index), then <tensor>: one capacity
 * check, the sizes copied through a local pointer (the hot path). */
static inline void sp_enc_tensor_after(sp_enc *e, const int64_t *head, int head_n, int dtype,
                                       int ndim, const int64_t *sizes) {
  size_t need = (size_t)head_n + 2 + (size_t)ndim;
  if (e->n + need > e->cap && sp_enc_grow(e, need) != SP_OK) return;
  int64_t *w = e->w + e->n;
  for (int i = 0; i < head_n; i++) *w++ = head[i];
  w[0] = dtype;
  w[1] = ndim;
  sp_words_copy(w + 2, sizes, ndim);
  e->n += need;
  e->tensors++;
}
/* Whether sp_enc_tensor_after would write w[*at..] (w holds n words), for
 * comparing a call's outputs with expected words without encoding them;
 * moves *at past them. */
static inline int sp_enc_tensor_is(const int64_t *w, size_t n, size_t *at, const int64_t *head,
                                   int head_n, int dtype, int ndim, const int64_t *sizes) {
  size_t i = *at;
  if (n - i < (size_t)head_n + 2 + (size_t)ndim) return 0; /* i <= n always */
  for (int k = 0; k < head_n; k++)
    if (w[i++] != head[k]) return 0;
  if (w[i] != dtype || w[i + 1] != ndim || !sp_words_same(w + i + 2, sizes, ndim)) return 0;
  *at = i + 2 + (size_t)ndim;
  return 1;
}
static inline void sp_enc_tensor(sp_enc *e, int dtype, int ndim, const int64_t *sizes) {
  sp_enc_tensor_after(e, NULL, 0, dtype, ndim, sizes);
}

/* A strided input tensor (see the encoding). */
static inline void sp_enc_strided(sp_enc *e, int dtype, int ndim, const int64_t *sizes,
                                  const int64_t *strides, int64_t offset, int device_type,
                                  int device_index) {
  if (e->n + 5 + 2 * (size_t)ndim > e->cap &&
      sp_enc_grow(e, 5 + 2 * (size_t)ndim) != SP_OK)
    return;
  e->w[e->n++] = dtype | SP_ENC_STRIDED;
  e->w[e->n++] = ndim;
  for (int i = 0; i < ndim; i++) e->w[e->n++] = sizes[i];
  for (int i = 0; i < ndim; i++) e->w[e->n++] = strides[i];
  e->w[e->n++] = offset;
  e->w[e->n++] = device_type;
  e->w[e->n++] = device_index;
  e->tensors++;
}
/* Bytes, packed 8 to a word after their count (SP_ENC_STR, SP_ENC_OPAQUE). */
void sp_enc_bytes(sp_enc *e, const char *s, size_t n);

/* ---- calls ------------------------------------------------------------- */
enum {
  SP_CALL_SKIP = 0,      /* not recorded: nothing more to do */
  SP_CALL_RECORDING = 1, /* fill t's outputs, then sp_call_end, or sp_call_fail */
  SP_CALL_COUNTED = 2    /* counted as a repeat of a deduplicated signature:
                            the same, and sp_call_end, which checks that the
                            outputs are that signature's (t's expect words),
                            writes nothing if they are (errors are always
                            written); or sp_call_repeat */
};
/* The caller has filled t's inputs. Returns one of SP_CALL_*. After a
 * nonzero return, no other sp_call_begin may come on this thread before the
 * call ends. A call belongs to its thread's pass (sp_pass_begin), or, on a
 * thread that runs no pass of p (one that inherited the caller's dispatch
 * state), to the latest logged pass begun. */
int sp_call_begin(sp_profiler *p, sp_thread *t);
/* The call returned; t's outputs are filled. */
void sp_call_end(sp_profiler *p, sp_thread *t);
/* The call just returned (or raised): its time ends here, not at the end's
 * own work. A load and a branch when the profiler is not timed. */
static inline void sp_call_returned(sp_thread *t) {
  struct sp_thread_public *pub = sp_thread_enc(t);
  if (pub->t0) pub->t1 = sp_clock_ns();
}
/* For a call that ran before its sp_call_begin (a launch recorded after it
 * returned, a call that raised before it was described): it ran from start
 * to end (sp_clock_ns), as its caller measured it, when the profiler is
 * timed (sp_call_begin set t0). Without a span (start 0, or end before
 * start) it has no time: not the time of its description. */
static inline void sp_call_span(sp_thread *t, int64_t start, int64_t end) {
  struct sp_thread_public *pub = sp_thread_enc(t);
  if (!pub->t0) return;
  int ok = start > 0 && end >= start;
  pub->t0 = ok ? start : 0;
  pub->t1 = ok ? end : 0;
}
/* A call that began SP_CALL_COUNTED returned, and the caller found that its
 * outputs encode to exactly t's expect words (compared in place, which costs
 * less than filling t's outputs for sp_call_end): it is that repeat. */
void sp_call_repeat(sp_profiler *p, sp_thread *t);
/* The call raised error_type(message). */
void sp_call_fail(sp_profiler *p, sp_thread *t, const char *error_type,
                  const char *message);
/* The same with lengths: type and msg may hold NUL bytes (written as
 * \u0000) and invalid UTF-8, lone surrogates as "surrogatepass" bytes among
 * it (written as U+FFFD: records hold only valid Unicode). */
void sp_call_fail_n(sp_profiler *p, sp_thread *t, const char *type, size_t type_n,
                    const char *msg, size_t msg_n);

/* ---- process-wide ------------------------------------------------------ */
/* Closes every open profiler's files as far as a dying process can (called
 * from fatal-signal handlers; async-signal-safe as far as the core goes). */
void sp_emergency_close_all(void);
/* Installs the fatal-signal handlers once (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
 * SIGABRT, and SIGTERM where nobody else handles it). */
void sp_install_signal_handlers(void);
/* How a fatal-signal handler finds the dying thread's sp_thread (the caller
 * of sp_call_begin keeps them): its call in flight is put back on disk if
 * another thread's record took its place. getter must be async-signal-safe. */
void sp_set_thread_getter(sp_thread *(*getter)(void));

#ifdef SP_DEBUG
/* Test builds only (make test-core): the grower thread, which makes room in
 * records files ahead of their writers, held before its next job (1) or let
 * go (0); whether it has a job queued or under way. */
void sp_debug_hold_grower(int hold);
int sp_debug_grower_busy(void);
#endif

#ifdef __cplusplus
}
#endif
#endif /* SP_CORE_H */

/*
 * sp_internal.h -- what the parts of the core share: types, limits, the
 * profiler's lock, and the functions one part calls in another.
 *
 * Every part (sp_lock.c ... sp_signal.c) includes this header first and
 * compiles alone. sp_core.c includes them all in one translation unit, the
 * amalgamation (as SQLite's), which is how the module is built: a speed
 * choice only, so that the compiler inlines across parts as within one. Each
 * part owns its globals (static); what another part needs of it is a
 * function declared below, by part. SP_PRIVATE marks those: static in the
 * amalgamation (sp_core.c defines SP_AMALGAMATION), hidden symbols when the
 * parts are compiled separately. make test-core checks both builds, and the
 * amalgamation with its parts in reverse order.
 *
 * The parts are layers: sp_core.c includes them in their dependency order,
 * and each calls only parts included before it (tests/test_core_c.py checks
 * the call graph). What a lower part needs from a higher one is a function
 * pointer the higher one gives it (flusher_init, p->destroy). A function
 * one part calls in another (SP_PRIVATE), or a header one of a part's
 * section, is named with its part's prefix, as SQLite's are: each section's
 * banner below gives its part's prefixes in [brackets], no two parts share
 * one, and tests/test_core_c.py checks both. The sections are by part, in
 * the amalgamation's order.
 */
/*
 * THE LOCK ORDER. A thread that holds some of these takes only ones further
 * down the list (a try-lock may take any: it never waits). Debug builds
 * (-DSP_DEBUG) assert it at every lock and unlock (lock_mu, lock_acquire:
 * a per-thread mask of the levels held, in sp_lock.c); release builds check
 * nothing.
 *
 *   SP_LOCK_OPEN     g_open_lock      sp_profiler.c  the open profilers' list; held
 *                                                    across the flusher's flushes
 *   SP_LOCK_OPS      g_ops_lock       sp_registry.c  operator registry writers
 *   SP_LOCK_DTYPE    g_dtype_lock     sp_registry.c  dtype and enum name tables
 *   SP_LOCK_FLUSHER  g_flush_mu       sp_flusher.c   the flusher's wake-up
 *   SP_LOCK_GROWER   g_grow_mu        sp_grower.c    the grower's queue
 *   SP_LOCK_SUMMARY  p->summary_mu    a profiler's summary writes (flusher, close)
 *   SP_LOCK_PASS     p->pass_mu       a profiler's pass boundaries, trims, close
 *   SP_LOCK_GROW     p->grow_mu       a profiler's file growth, against trims, close
 *   SP_LOCK_SPIN     p->lock          a profiler's spinlock: file, tables, counters
 *
 * The registry's, the flusher's and the grower's locks are taken together
 * only across fork(2) (sp_profiler.c's at_fork_*), in this order; none is
 * taken while a profiler's lock is held. A thread holds one profiler's
 * locks at a time.
 *
 * The GPU kernel collector's mutexes (sp_cupti.c: start, write, out, api)
 * are outside this order: none is taken while any lock above is held (a
 * call says what its id became after letting go of its profiler's lock),
 * and they are taken among themselves in that order.
 */

#ifndef SP_INTERNAL_H
#define SP_INTERNAL_H

#define _GNU_SOURCE
#include "sp_core.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
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
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

/* The file is cut back to its records after passes end (the flusher), so it
 * grows in small steps: what is allocated and faulted in ahead of the writer
 * is thrown away at the next cut. */
#define SP_FILE_GROW ((size_t)1 << 20)     /* allocated 1 MiB at a time */
#define SP_PREFAULT ((size_t)128 << 10)    /* faulted in 128 KiB at a time */
#define SP_PREFAULT_NOW ((size_t)64 << 10) /* ... 64 KiB by a writer that ran out */
/* The grower thread keeps up to SP_AHEAD faulted in ahead of the writers
 * once records stream: SP_STREAM written since the file was last cut. A
 * writer then asks it for more when less than SP_AHEAD / 2 is left. Short
 * passes between cuts (an idle server, vLLM's steps of a few hundred calls
 * with gaps) never ask: a cut drops what is faulted in ahead, and the
 * grower's 512 KiB would be zeroed again after each. */
#define SP_AHEAD ((size_t)512 << 10)
#define SP_STREAM ((size_t)256 << 10)
#define SP_MAP_WINDOW ((size_t)32 << 20)   /* 32 MiB of it mapped at once */
#define SP_OPCACHE_SIZE 1024               /* per-thread op cache entries */
#define SP_ERRMSG_CAP 512
#define SP_OPEN_SLOTS 64        /* open forward passes the summary can name */
#define SP_FLUSH_QUIET 0.001   /* s: a flush this long after the last pass end */
#define SP_FLUSH_BUSY 0.1      /* s: at most this long after the first ask */
#define SP_SUMMARY_EVERY 0.05  /* s: a summary alone (mid-pass) at most this often */
#define SP_CUT_EVERY 0.005     /* s: the records file cut at most this often */
#define SP_FLUSH_IDLE 0.1      /* s: the flusher polls this long after a flush */

#ifdef SP_AMALGAMATION
#define SP_PRIVATE static
#else
#define SP_PRIVATE __attribute__((visibility("hidden")))
#endif
/* Kept out of a hot function's body: the hot path then spans fewer cache
 * lines of code (torch's own code crowds the instruction cache). */
#define SP_OUTLINE __attribute__((noinline))

/* The calling protocol (sp_core.h) is checked in test builds (-DSP_DEBUG,
 * make test-core), as Lua's api_check does; release builds check nothing. */
#ifdef SP_DEBUG
#include <assert.h>
#define sp_api_check(cond) assert(cond)
#define sp_lock_check(cond) assert(cond) /* the lock order (top of this file) */
#else
#define sp_api_check(cond) ((void)0)
#define sp_lock_check(cond) ((void)0)
#endif

/* The lock order (top of this file), checked in debug builds. */
enum {
  SP_LOCK_OPEN,
  SP_LOCK_OPS,
  SP_LOCK_DTYPE,
  SP_LOCK_FLUSHER,
  SP_LOCK_GROWER,
  SP_LOCK_SUMMARY,
  SP_LOCK_PASS,
  SP_LOCK_GROW,
  SP_LOCK_SPIN
};
#ifdef SP_DEBUG
/* sp_lock.c: this thread's locks held, a bit per level. */
SP_PRIVATE unsigned *lock_held(void);
/* Taking a lock of this level waits: nothing at or after it may be held. */
static inline void lock_order_take(int level) {
  unsigned *held = lock_held();
  sp_lock_check(*held >> level == 0);
  *held |= 1u << level;
}
static inline void lock_order_tried(int level) { *lock_held() |= 1u << level; }
static inline void lock_order_let_go(int level) {
  unsigned *held = lock_held();
  sp_lock_check(*held & (1u << level));
  *held &= ~(1u << level);
}
#else
#define lock_order_take(level) ((void)(level))
#define lock_order_tried(level) ((void)(level))
#define lock_order_let_go(level) ((void)(level))
#endif

/* The mutexes, each taken as its level (SP_LOCK_*) says. */
static inline int lock_mu(pthread_mutex_t *m, int level) {
  lock_order_take(level);
  return pthread_mutex_lock(m);
}
static inline int lock_mu_try(pthread_mutex_t *m, int level) {
  int rc = pthread_mutex_trylock(m);
  if (rc == 0) lock_order_tried(level);
  return rc;
}
static inline int lock_mu_release(pthread_mutex_t *m, int level) {
  lock_order_let_go(level);
  return pthread_mutex_unlock(m);
}

typedef struct sp_buf {
  char *p;
  size_t n, cap;
  int failed;
} sp_buf;

#define BUF_LIT(b, lit) buf_put((b), (lit), sizeof(lit) - 1)

typedef void (*put_fn)(void *sink, const char *s, size_t n);

typedef struct sp_op {
  char *name;       /* aten.mm.default */
  char *json_head;  /* "operation": "aten.mm.default", "inputs": { */
  char **arg_keys;  /* "self": */
  size_t *arg_key_lens;
  size_t head_len, keys_len; /* keys_len: all keys together (a bound) */
  int n_args;
  int n_returns;
  int launch;       /* a kernel's launch (sp_launch_intern): arguments always
                       recorded, so its key leaves out float values too */
} sp_op;

typedef struct opcache_slot {
  const void *key;
  int id;
} opcache_slot;

/* A registered NVTX range name (sp_nvtx.c), by its call's inputs key hash. */
#define SP_NVTX_NAMES 256
struct nvtx_name {
  uint64_t hash;
  void *handle; /* nvtxStringHandle_t */
};

struct sp_thread {
  struct sp_thread_public pub; /* must stay first: see sp_thread_enc */
  unsigned epoch;
  opcache_slot cache[SP_OPCACHE_SIZE];
  /* The call in flight. */
  sp_op *op;
  const struct sp_pass *pass; /* the pass it is recorded in (NULL: the
                                 profiler's latest, for a thread that
                                 inherited the key and runs no pass) */
  int phase;       /* that pass's phase slot, or -1 */
  uint64_t salt;     /* its pass's signature salt (sp_pass) */
  uint64_t sig_hash; /* of its inputs key, salted */
  const int64_t *key; /* the inputs key: the inputs, float values masked */
  size_t key_n;
  int floats;      /* the inputs hold float values: no cached prefix text */
  sp_enc keybuf;   /* the masked copy, when floats */
  long prim;       /* the record of its inputs (first outputs seen), or -1 */
  long last;                 /* the primary record of this thread's latest
                                call that had one (sig_lookup's guess), */
  const sp_profiler *last_p; /* ...of this profiler */
  int counted;     /* a deduplicated repeat, already counted at begin: its
                      outputs must be pub.expect (read at the end without
                      the lock: the arena never moves) */
  long sig;        /* the record of the call's signature, or -1 */
  size_t head_at;  /* where '"operation"' starts in prefix */
  int spec;        /* our prefix sits speculatively at the file's tail */
  size_t spec_at;  /* where it starts */
  sp_buf prefix;   /* the record up to the inputs' closing brace */
  size_t id_digits_at, id_digits_end; /* where call_id's digits are in it */
  sp_buf line;     /* the rest of the record */
  sp_buf timed;    /* a timed call's rest: its "start_us" and "time_us", then line's */
  int64_t call_start; /* the ended timed call's start, sp_clock_ns (call_ended) */
  struct nvtx_name *nvtx_names; /* NVTX range names registered (sp_nvtx.c), or NULL */
  struct nvtx_name *roctx_names; /* rocTX range names made (sp_nvtx.c: handle a string), or NULL */
  int nvtx_open;   /* the call in flight pushed a range: SP_RANGES_NVTX or _ROCTX */
  uint64_t gpu_ext;  /* the call in flight's CUPTI id (sp_cupti.c), or 0 */
  int gpu_pushed;    /* ...pushed at its begin (popped as it ends) */
  long long gpu_call; /* what its id became: the record written, or (gpu_repeat) */
  int gpu_repeat;     /* ...the record it repeats; 0: none */
  int grow_ask;    /* its record asked the grower for room (spinlock held) */
#ifdef SP_DEBUG
  int in_call;     /* sp_call_begin returned nonzero; end or fail not yet */
#endif
};
_Static_assert(offsetof(struct sp_thread, pub) == 0, "sp_thread_enc (sp_core.h) casts an sp_thread to its pub");

/* The arena: words that never move while their profiler lives, so that a
 * call can read its expected outputs at its end without the lock. */
struct arena_chunk {
  struct arena_chunk *prev;
  size_t n, cap;
  int64_t w[];
};

/* A signature (FORMAT.md; the one meaning of the word here): what makes a
 * call distinct to a reader of the file. Its operation, its inputs' and
 * outputs' shapes and dtypes, its arguments where they are recorded (all but
 * float values), and its pass's phase and graph. Records are found by index and
 * never move. The first outputs seen with some inputs make the inputs'
 * "primary" record, found by the inputs alone (slots): most calls are its
 * repeats. Other outputs with the same inputs make "variant" records, found
 * by inputs and outputs (vslots). Records keep the text rendered for them,
 * so that writing a call whose shapes were seen before is a copy. */
/* A signature's measured times (a timed profiler, with dedupe), in ns: every
 * call's count, total, min and max, and a sorted uniform sample of its calls
 * (all of them while they are at most SIG_TIME_SAMPLES) for the median. */
#define SIG_TIME_SAMPLES 256
typedef struct sig_time {
  long long n;
  int64_t total, min, max;
  int k, cap;       /* samples held, and room for */
  int64_t s[];      /* ascending */
} sig_time;

/* What the summary says of a signature's times. */
struct time_stat {
  long long n;
  int64_t total, min, median, max;
};

typedef struct sig_rec {
  uint64_t hash;            /* of the key (and outputs, for a variant) */
  const int64_t *w;         /* the inputs key, in the arena */
  size_t w_n;
  long prim;                /* a variant's primary record; -1 for a primary;
                               SIG_UNINDEXED for an adopted record's count */
  uint64_t salt;            /* a primary's: its phase and graph (see sp_pass) */
  long next;                /* a primary's: the primary a thread's call after
                               one of its calls had, last time (index + 1; 0:
                               none), tried first for the next (sig_lookup) */
  int has_out;              /* outputs known: the record is a signature */
  size_t in_at, in_n;       /* '"operation": ..., "inputs": {...}' in text; 0: none */
  const int64_t *out_w;     /* the outputs, in the arena */
  size_t out_w_n;
  size_t out_at, out_n;     /* ', "outputs": ...}\n' in text; 0: none yet */
  /* The record that stands for the signature's deduplicated calls: its
   * call_id (0: none written yet), and the calls it stands for, itself and
   * the repeats not written (the summary's signature_counts). */
  long long rep_id, reps;
  sig_time *time;           /* NULL: not timed (sp_config.time, dedupe) */
} sig_rec;

#define SIG_UNINDEXED (-2L) /* sig_add_counted's records: no key, in no index */

/* A signature_counts entry, as the summary copies it. */
struct sig_count {
  long long id, n;
  struct time_stat time; /* time.n 0: not timed */
};

/* The profiler's lock guards a few hundred instructions of table lookups and
 * copying and never blocks: a spinlock costs a tenth of a mutex. */
typedef struct sp_lock {
  atomic_flag f;
} sp_lock;

static inline void lock_acquire(sp_lock *l) {
  lock_order_take(SP_LOCK_SPIN);
  unsigned spins = 0;
  while (atomic_flag_test_and_set_explicit(&l->f, memory_order_acquire)) {
    if (++spins > 64) sched_yield();
#if defined(__x86_64__) || defined(__i386__)
    else __builtin_ia32_pause();
#endif
  }
}
static inline int lock_try(sp_lock *l) {
  int got = !atomic_flag_test_and_set_explicit(&l->f, memory_order_acquire);
  if (got) lock_order_tried(SP_LOCK_SPIN);
  return got;
}
static inline void lock_release(sp_lock *l) {
  lock_order_let_go(SP_LOCK_SPIN);
  atomic_flag_clear_explicit(&l->f, memory_order_release);
}

/* The records file. Its fields are guarded by its owner's spinlock (lock),
 * its growth by the owner's grow_mu; it knows nothing else of the profiler,
 * so that it can be tested alone (csrc/tests/test_file.c). */
typedef struct sp_file {
  sp_lock *lock;             /* the owner's spinlock */
  pthread_mutex_t *grow_mu;  /* the owner's (see sp_profiler) */
  int closed;       /* its profiler closed (or closed by a dying thread): no growth */
  int fd;
  char *map;
  size_t map_off, map_len;
  size_t size;      /* bytes allocated on disk */
  size_t faulted;   /* file offset up to which the window is pre-faulted */
  int no_populate;  /* MADV_POPULATE_WRITE is not supported here */
  size_t len;       /* bytes of complete records */
  size_t spec_end;  /* end of an in-flight call's prefix (>= len) */
  const sp_thread *spec_owner;
  unsigned cuts;    /* trims so far: room asked for before one is not made */
  size_t cut_len;   /* len at the last trim */
  size_t cap;       /* len never passes it (0: no cap): room past it is refused */
} sp_file;

/* file_make_room: the room asked for would pass the file's cap. Not an
 * errno value: the disk is not full, the profiler stops by design. */
#define SP_E_CAP (-1)

/* A phase label and what was counted for it. */
struct phase_stat {
  char *name;              /* owned; never moves or changes once made */
  long long passes, calls; /* logged passes; calls observed in them */
};

/* A graph (sp_graph_begin's key): captures recorded, replays counted
 * (real -1); or the replays of that graph that served a real size (real
 * >= 0, captures 0). Kept sorted by (key, real), so a graph's own entry
 * comes first and its real sizes follow it. */
struct graph_stat {
  long long key, real, captures, replays;
};

/* Logged forward passes that replayed no graph, by phase slot and the batch
 * size the server gave (sp_pass_size). Kept sorted by (phase, size). */
struct size_stat {
  int phase;
  long long size, passes;
};

/* The signature table (sp_sigtable.c): records, open-addressing indexes of
 * them, and the arena and text they point into. Zeroed is empty. */
typedef struct sp_sigtable {
  sig_rec *recs;
  long long n_recs; /* records (signatures, and inputs whose call is in flight) */
  size_t recs_cap;
  uint32_t *slots; /* primaries by inputs: record index + 1; 0 = empty */
  size_t slot_cap, n_prims;
  uint32_t *vslots; /* variants by inputs and outputs */
  size_t vslot_cap, n_variants;
  struct arena_chunk *arena; /* inputs keys and outputs words (the newest chunk) */
  char *text;      /* cached JSON text */
  size_t text_n, text_cap;
  long long signatures; /* records with outputs */
} sp_sigtable;

/* What the passes ran: passes, phases, graphs and sizes (counted by
 * sp_pass.c, in tables sp_tally.c grows and frees), operators (sp_tally.c).
 * Zeroed is empty. */
typedef struct sp_tally {
  /* passes: each thread's own (struct sp_pass); these count them */
  long long passes, logged_passes;
  int open_passes, open_logged; /* open now, on all threads */
  /* the numbers of the logged forward passes open now (0: a free slot), for
   * the summary: the passes a crash interrupted (at most SP_OPEN_SLOTS) */
  long long open_nums[SP_OPEN_SLOTS];
  struct phase_stat *phase_stats; /* every label a logged pass had */
  int n_phases, phase_cap;
  struct graph_stat *graphs;
  int n_graphs, graph_cap;
  struct size_stat *sizes;
  int n_sizes, size_cap;
  long long ops_seen_order;
  long long *op_counts, *op_first; /* by op id */
  int *op_order;                   /* scratch for sorting, same size */
  int op_cap;
} sp_tally;

/* The summary's copy of a tally (sp_summary.c): op ids; counts, first-seen
 * order by id; phases, graphs, signature counts. Zeroed is empty. */
typedef struct sp_snapshot {
  int *ops;
  long long *counts, *first;
  int cap;
  struct phase_stat *phases;
  int phase_cap;
  struct graph_stat *graphs;
  int graph_cap;
  struct size_stat *sizes;
  int size_cap;
  struct sig_count *sigs;
  long long sig_cap;
} sp_snapshot;

/* What a summary says: copied from the profiler under its lock, then
 * written without it (or taken from the live profiler by a dying process). */
typedef struct summary_src {
  sp_stats c;                /* the counters, as sp_get_stats gives them */
  int n_ops;                 /* operators observed, in summary order: */
  int *ops;                  /* their ids */
  const long long *counts, *first; /* by op id */
  int n_phases;
  const struct phase_stat *phases;
  int n_graphs;
  const struct graph_stat *graphs;
  int n_sizes;
  const struct size_stat *sizes;
  /* signature_counts: a copy (counts, n_counts), or the live records (recs,
   * n_recs) for a dying process */
  const struct sig_count *counts_by_sig;
  long long n_counts;
  const sig_rec *recs;
  long long n_recs;
  const char *ended_by;
  int failed, capped;
  long long open_nums[SP_OPEN_SLOTS]; /* a copy: the forward passes open (0: none) */
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
  /* The grower was asked for room ahead (queued or at work), when the
   * file had been cut grow_cuts times; it failed since the last cut (a
   * full disk: the writers make room themselves, and report it) (spinlock).
   * The queue's link (the grower's lock). */
  int grow_asked, grow_off;
  unsigned grow_cuts;
  struct sp_profiler *next_grow;
  double summary_at, cut_at; /* the flusher's last summary and cut (summary_mu) */
  sp_config cfg;
  char *path, *summary_path, *phases;
  /* The records file's folder, opened with it: the summary is written
   * there by name (openat, renameat), never through a path whose folders
   * someone could swap for a symbolic link meanwhile. */
  int dir_fd;
  char *worker; /* the summary's "worker" JSON object, or NULL */
  char *dispatch_key; /* the summary's "dispatch_key", or NULL */
  int64_t time_origin; /* sp_clock_ns when it opened: timed records' "start_us" count from it */
  char errmsg[SP_ERRMSG_CAP];
  unsigned long long serial; /* names this profiler to threads' passes */
  pid_t owner_pid;
  atomic_int logging;   /* some thread's logged pass is open and all is well */
  atomic_int orphaned;  /* we are a forked child: hands off the file */
  atomic_int refs;      /* who holds one: see prof_ref */
  void (*destroy)(struct sp_profiler *p); /* frees p (sp_profiler.c): prof_unref */
  int failed;
  int capped;           /* failed because the records reached file.cap */
  int failure_unsaid;   /* err_fail() ran; err_tell says it, outside the spinlock */
  atomic_int summary_said; /* the summary could not be written: said once */
  /* It could not for want of space (ENOSPC, EDQUOT, EFBIG): the records
   * file is then about to fail too, and err_tell says both in one line;
   * or this alone once the records file has grown after all, no logged pass
   * is open, or at close; not at all if a later summary was written (both
   * under the spinlock). */
  int summary_full;
  size_t summary_full_size; /* file.size when it failed */
  const char *ended_by; /* "close", "SIGSEGV", ... */
  /* Orders the records file's growth (allocate, map, fault in: syscalls,
   * made outside the spinlock) against trims and close. Taken after
   * pass_mu, before the spinlock. */
  pthread_mutex_t grow_mu;
  sp_file file;
  sp_tally tally;   /* what the passes ran (spinlock) */
  sp_snapshot snap; /* the summary's copy of it (summary_mu) */
  /* the latest logged pass begun, for threads that inherited the key and
   * run no pass of their own (autograd's): its header, phase, salt */
  sp_buf pass_json; /* ', "forward_pass": N[, "phase": "p"][, "graph": K]' */
  int latest_phase;
  uint64_t latest_salt;
  /* the next call_id, as decimal text: incremented, never formatted */
  char id_text[24];
  size_t id_len;
  /* counters */
  long long records, dedupe_skipped, errors;
  sp_sigtable sigs; /* the signatures (spinlock) */
  struct sp_profiler *next_open; /* in g_open */
};

/* The summary's name in p's folder (p->dir_fd). */
static inline const char *summary_base(const sp_profiler *p) {
  const char *slash = strrchr(p->summary_path, '/');
  return slash ? slash + 1 : p->summary_path;
}

#define PUT_LIT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) + sizeof(lit) - 1)

/* A thread's pass. Passes belong to the thread that begins them: several
 * threads run passes of one profiler at once, each numbered as it began. */
struct sp_pass {
  sp_profiler *p;   /* whose pass is open here (a reference); NULL: none */
  int logged;
  int capture;      /* a graph capture, not a forward pass */
  long long num;    /* its forward_pass number when logged (0: not, or a capture) */
  int phase;        /* p->tally.phase_stats slot, or -1 */
  long long size;   /* the batch size the server gave (sp_pass_size), or -1 */
  int replayed;     /* it replayed a graph (its size is not counted) */
  uint64_t salt;    /* signature salt: the phase and the graph */
  sp_buf header;    /* ', "forward_pass": N[, "phase": "p"][, "graph": K]' */
  unsigned long long last; /* serial of the profiler whose pass ended last here */
  int last_logged;  /* ...logged, and not a capture (sp_pass_reopen) */
};

/* ---- sp_lock.c [lock_]: the lock order's check (debug builds; see the top) ---- */

/* ---- sp_text.c [buf_ text_]: buffers, JSON strings, numbers ---- */
SP_PRIVATE int buf_reserve(sp_buf *b, size_t extra);
SP_PRIVATE void buf_put(sp_buf *b, const char *s, size_t n);
SP_PRIVATE void buf_i64(sp_buf *b, int64_t v);
SP_PRIVATE void buf_json_str(sp_buf *b, const char *s, size_t len);
SP_PRIVATE void buf_sink(void *b, const char *s, size_t n); /* a put_fn */
SP_PRIVATE char *buf_dup(const sp_buf *b);
/* The one JSON string escaper (see sp_text.c); async-signal-safe. */
SP_PRIVATE void text_json_str(put_fn put, void *sink, const char *s, size_t len);
/* Decimal digits at o; returns their end (at most 20 characters). */
SP_PRIVATE char *text_put_u64(char *o, uint64_t v);
SP_PRIVATE char *text_put_i64(char *o, int64_t v);
SP_PRIVATE size_t text_fmt_i64(char *out, int64_t v);
/* ns as microseconds, exactly: "12.345" (at most 24 bytes). */
SP_PRIVATE char *text_put_us(char *o, int64_t ns);
SP_PRIVATE char *text_strdup(const char *s); /* NULL stays NULL */
/* One line "sgl_shapeprof: abc" on stderr, by write(2); NULL parts skipped. */
SP_PRIVATE void text_say(const char *a, const char *b, const char *c);

/* ---- sp_registry.c [registry_]: dtype and enum names, operators ---- */
static inline size_t registry_ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}
/* A tensor object's end, '], "dtype": "torch.float32"}', at o; returns its
 * end. No longer than registry_dtype_tail_max(). */
SP_PRIVATE char *registry_put_dtype_tail(char *o, int64_t dtype);
SP_PRIVATE size_t registry_dtype_tail_max(void);
/* A dtype as a value: '"torch.float32"'. */
SP_PRIVATE char *registry_put_dtype_name(char *o, int64_t dtype);
/* A dtype without a name was written since the last call: say so (once). */
SP_PRIVATE int registry_dtype_unknown_unsaid(void);
/* The name of code in table (SP_NAMES_*), or NULL. */
SP_PRIVATE const char *registry_name_of(int64_t table, int64_t code);
SP_PRIVATE sp_op *registry_op(int64_t id);
/* Bumped whenever an operator key is forgotten: threads' op caches clear. */
SP_PRIVATE unsigned registry_op_epoch(void);
/* The registry's locks, across fork(2). */
SP_PRIVATE void registry_fork_lock(void);
SP_PRIVATE void registry_fork_unlock(void);

/* ---- sp_error.c [err_]: failures, said once (a leaf: calls text and registry only) ---- */
/* p's message (sp_errmsg): a, b, and errno value err's text if err. */
SP_PRIVATE void err_set(sp_profiler *p, const char *a, const char *b, int err);
/* A failure while running (spinlock held): noted, logging stops. */
SP_PRIVATE void err_fail(sp_profiler *p, const char *what, int err);
/* The next record would pass the records file's cap: stop, as err_fail. */
SP_PRIVATE void err_cap(sp_profiler *p);
/* Says what err_fail noted, once; no lock held. */
SP_PRIVATE void err_tell(sp_profiler *p);
SP_PRIVATE void err_summary_failed(sp_profiler *p, int e);
SP_PRIVATE void err_summary_written(sp_profiler *p);
/* Whether errno value e means a full disk, a quota or a size limit. */
static inline int err_no_space(int e) { return e == ENOSPC || e == EDQUOT || e == EFBIG; }

/* ---- sp_thread.c [thread_]: threads (the callers' scratch is sp_core.h's) ---- */
/* Starts one of our own threads (the grower, the flusher): detached, born
 * with every signal blocked (signals are the host's threads'), and named
 * `name` (at most 15 characters), so that top -H and py-spy say whose it is.
 * 1 if it started. */
SP_PRIVATE int thread_start_own(void *(*fn)(void *), const char *name);

/* ---- sp_file.c [file_]: the records file ---- */
/* [off, off + n) can be written with a memcpy: mapped, allocated and faulted
 * in. Writers hold the spinlock, which never waits for a syscall: room is
 * made ahead of them by file_make_room. */
static inline int file_room(const sp_file *f, size_t off, size_t n) {
  return f->map && off >= f->map_off && off + n <= f->faulted && off + n <= f->size &&
         off + n <= f->map_off + f->map_len;
}

/* Where the next write can end: past the records and any in-flight prefix. */
static inline size_t file_tail(const sp_file *f) {
  return f->spec_end > f->len ? f->spec_end : f->len;
}

/* need bytes can be written past the tail (where the next write may end). */
static inline int file_tail_room(const sp_file *f, size_t need) {
  return file_room(f, f->len, file_tail(f) - f->len + need);
}

SP_PRIVATE void file_init(void); /* once per process, before any file */
SP_PRIVATE int file_write_at(sp_file *f, size_t off, const char *data, size_t n);
SP_PRIVATE void file_blank(sp_file *f, size_t from, size_t to);
/* unit: what is faulted in is rounded up to it. cuts: the file's trims
 * when the room was asked for (-1: any); after another, nothing is made. */
SP_PRIVATE int file_make_room(sp_file *f, size_t need, size_t unit, long cuts);
/* Room faulted in past the tail (where the next write may end). Spinlock held. */
static inline size_t file_runway(const sp_file *f) {
  size_t end = f->faulted;
  if (f->size < end) end = f->size;
  if (f->map_off + f->map_len < end) end = f->map_off + f->map_len;
  size_t tail = file_tail(f);
  return f->map && end > tail ? end - tail : 0;
}
SP_PRIVATE off_t file_forget_tail(sp_file *f);
/* Unmaps and closes (no lock: the caller owns f). */
SP_PRIVATE void file_release(sp_file *f);

/* ---- sp_sigtable.c [sig_]: the signature table ---- */
SP_PRIVATE uint64_t sig_hash(const int64_t *w, size_t n);
SP_PRIVATE long sig_find(const sp_sigtable *tab, uint64_t h, const int64_t *w, size_t n);
SP_PRIVATE long sig_lookup(const sp_sigtable *tab, long guess, uint64_t salt, const int64_t *w,
                           size_t n, uint64_t *h);
SP_PRIVATE long sig_add(sp_sigtable *tab, uint64_t h, uint64_t salt, const int64_t *w, size_t n);
SP_PRIVATE int sig_set_outputs(sp_sigtable *tab, long k, const sp_enc *out);
SP_PRIVATE uint64_t sig_variant_hash(uint64_t key_hash, const int64_t *out, size_t n);
SP_PRIVATE long sig_variant_find(const sp_sigtable *tab, uint64_t h, const int64_t *w, size_t n,
                             const int64_t *out, size_t out_n);
SP_PRIVATE long sig_variant_add(sp_sigtable *tab, uint64_t h, long prim, const sp_enc *out);
SP_PRIVATE int sig_outputs_equal(const sig_rec *r, const sp_enc *out);
SP_PRIVATE size_t sig_text_put(sp_sigtable *tab, const char *s, size_t n);
SP_PRIVATE void sig_table_free(sp_sigtable *tab); /* empty again */
SP_PRIVATE int sig_add_counted(sp_sigtable *tab, long long rep_id, long long reps);
/* One more call of r took ns; 0 when out of memory. */
SP_PRIVATE int sig_time_add(sig_rec *r, int64_t ns);
/* r's times as the summary gives them (n 0: none). No allocation. */
SP_PRIVATE void sig_time_stat(const sig_rec *r, struct time_stat *out);

/* ---- sp_tally.c [tally_]: operators counted, the pass tables ---- */
SP_PRIVATE int tally_count_op(sp_tally *t, int id, int phase);
SP_PRIVATE void tally_uncount_op(sp_tally *t, int id, int phase);
SP_PRIVATE int tally_merge(sp_tally *into, const sp_tally *from);
/* The slot of a phase label (added if new: any length, any number of them;
 * labels are few, searched in turn); of (graph key, real size) in graphs,
 * kept sorted by both; of (phase slot, batch size) in sizes, likewise. A
 * new slot's counts are zero; -1 only when out of memory. */
SP_PRIVATE int tally_phase(sp_tally *t, const char *phase);
SP_PRIVATE int tally_graph(sp_tally *t, long long key, long long real);
SP_PRIVATE int tally_size(sp_tally *t, int phase, long long size);
SP_PRIVATE void tally_free(sp_tally *t); /* empty again */

/* ---- sp_summary.c [summary_]: the summary file ---- */
SP_PRIVATE void summary_counters(const sp_profiler *p, sp_stats *o);
SP_PRIVATE int summary_snapshot(sp_profiler *p, summary_src *s);
SP_PRIVATE void summary_live_src(sp_profiler *p, summary_src *s);
SP_PRIVATE int summary_write(const sp_profiler *p, const summary_src *s);
SP_PRIVATE int summary_write_now(sp_profiler *p, const char *ended_by);
SP_PRIVATE void summary_snapshot_free(sp_snapshot *s); /* empty again */

/* ---- sp_grower.c [grower_]: the grower thread ---- */
/* Asks the grower to make room ahead of p's writers (p->grow_asked was
 * set under the spinlock, which is not held now). */
SP_PRIVATE void grower_ask(sp_profiler *p);
/* The grower's work for p, on any thread: SP_AHEAD faulted in past the
 * tail, SP_PREFAULT at a time, unless the file was cut since the ask. */
SP_PRIVATE void grower_ahead(sp_profiler *p);
SP_PRIVATE void grower_fork_prepare(void);
SP_PRIVATE void grower_fork_parent(void);
SP_PRIVATE void grower_fork_child(void);

/* ---- sp_flusher.c [flusher_]: the flusher thread ---- */
/* The open profilers' walk (sp_profiler.c's), given once before any opens:
 * the flusher calls down only. */
SP_PRIVATE void flusher_init(int (*each_open)(int (*fn)(sp_profiler *p, int arg), int arg));
SP_PRIVATE void flusher_request(sp_profiler *p);
SP_PRIVATE int flusher_running(void); /* the thread was started (and not lost to a fork) */
SP_PRIVATE void flusher_fork_prepare(void);
SP_PRIVATE void flusher_fork_parent(void);
SP_PRIVATE void flusher_fork_child(void);

/* ---- sp_profiler.c [prof_]: a profiler's lifetime (open, close, references, the
 * open list, fork) ---- */
/* A reference: the owner's, a pass's, a queued grower job's, the inherited
 * slot's (prof_inherit). The last one let go of frees p (p->destroy, set by
 * sp_open). */
static inline void prof_ref(sp_profiler *p) { atomic_fetch_add(&p->refs, 1); }
static inline void prof_unref(sp_profiler *p) {
  if (atomic_fetch_sub(&p->refs, 1) == 1) p->destroy(p);
}
/* fn(p) for each open profiler, without their list's lock: for a dying
 * process (async-signal-safe). */
SP_PRIVATE void prof_each_open_unlocked(void (*fn)(sp_profiler *p));
/* The profiler whose logged pass began last, for threads that inherited
 * the fallback's key (no reference taken: see g_inherited). */
SP_PRIVATE sp_profiler *prof_inherited(void);
/* p's logged pass began: p becomes the inherited one (a reference). */
SP_PRIVATE void prof_inherit(sp_profiler *p);
/* p is no longer inherited if it logs no more (no logged pass is open,
 * or it was closed). The caller holds a reference. */
SP_PRIVATE void prof_uninherit(sp_profiler *p);

/* ---- sp_cupti.c [cupti_]: GPU kernel times (sp_config.time == SP_TIME_KERNELS) ---- */
/* Whether the collector runs for p (its owner): only p's calls push ids. */
SP_PRIVATE int cupti_for(const sp_profiler *p);
/* A fresh id pushed on this thread (0: CUPTI refused), and popped. */
SP_PRIVATE uint64_t cupti_push(void);
SP_PRIVATE void cupti_pop(void);
/* What the call that pushed ext became: record call_id, or a repeat of it. */
SP_PRIVATE void cupti_called(uint64_t ext, long long call_id, int repeat);
/* One of p's logged passes began (1) or ended (0) now: the ledger's window. */
SP_PRIVATE void cupti_pass(const sp_profiler *p, int begun);

/* ---- sp_pass.c [pass_]: passes and graph captures ---- */
/* This thread's pass of p, for a call it records (spinlock held). */
/* Whether p logs passes of this phase label (its phase filter). */
SP_PRIVATE int pass_phase_wanted(const sp_profiler *p, const char *phase);
SP_PRIVATE int pass_of_call(const sp_profiler *p, const struct sp_pass **ps, int *phase,
                            uint64_t *salt);

/* ---- sp_format.c [format_]: records as text ---- */
/* Where the encoded item at w[i] (its tag) ends. */
SP_PRIVATE size_t format_item_end(const int64_t *w, size_t i);
/* t's call's range name (its operation and input shapes), NUL-ended in b. */
SP_PRIVATE int format_range_name(const sp_thread *t, sp_buf *b);
/* The record's text up to its outputs into t->prefix, call_id included,
 * from the signature's cached text when it has one (and caching it when
 * not). 0 when out of memory. */
SP_PRIVATE int format_prefix(sp_profiler *p, sp_thread *t);
/* ', "outputs": ...}\n' into t->line. 0 when out of memory. */
SP_PRIVATE int format_outputs(sp_thread *t);
/* Upper bound on what writing t's record takes in the file. */
SP_PRIVATE size_t format_record_bound(const sp_profiler *p, const sp_thread *t, size_t extra);

/* ---- sp_nvtx.c [nvtx_]: NVTX ranges, one per recorded call (sp_config.nvtx) ---- */
/* t's call's range (ranges: sp_config.nvtx), pushed as it begins, popped as it ends. */
SP_PRIVATE void nvtx_push(sp_thread *t, int ranges);
SP_PRIVATE void nvtx_pop(sp_thread *t);

/* ---- sp_record.c [record_]: the hot path (its API is sp_core.h's) ---- */
SP_PRIVATE void record_rescue_in_flight(sp_profiler *p, sp_thread *t);

/* ---- sp_signal.c [signal_]: fatal signals (its API is sp_core.h's) ---- */

#endif /* SP_INTERNAL_H */

/* sp_record.c -- The call protocol (the hot path): a call begins, is
 * filed against its signature, and ends as a record (sp_format.c writes
 * its text) or a count.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

/* Releases the spinlock while file_make_room works, then takes it back.
 * Returns 1 if [file_tail, +need) is writable now; 0 if not (the file was
 * closed, or a failure was reported and logging is off). Spinlock held. */
static int make_room(sp_profiler *p, size_t need) {
  for (int tries = 0; tries < 8; tries++) {
    /* A thread with no pass of its own (it inherited the key) may get here
     * while the last pass ends: after the flusher's cut nothing is grown,
     * and it writes only if a pass is open again. */
    unsigned cuts = p->file.cuts;
    lock_release(&p->lock);
    int e = file_make_room(&p->file, need, SP_PREFAULT_NOW, (long)cuts);
    lock_acquire(&p->lock);
    if (e == ESHUTDOWN && !p->file.closed && p->file.cuts != cuts) {
      if (!atomic_load_explicit(&p->logging, memory_order_relaxed)) return 0;
      continue;
    }
    if (e == SP_E_CAP) {
      err_cap(p);
      return 0;
    }
    if (e) {
      if (e != ESHUTDOWN && !p->file.closed) err_fail(p, "cannot grow records file ", e);
      return 0;
    }
    if (file_tail_room(&p->file, need)) return 1;
    /* other threads took the room in between: again */
  }
  err_fail(p, "cannot keep room in records file ", EAGAIN);
  return 0;
}

/* Room for need more bytes before a record is written: a compare, unless
 * the file must grow. Spinlock held (let go while it grows). */
static inline void room_for(sp_profiler *p, size_t need) {
  if (!file_tail_room(&p->file, need)) make_room(p, need);
}

static inline int call_begin(sp_profiler *p, sp_thread *t);

/* A call that a timed or NVTX profiler records begins: its range is pushed
 * (not a launch's: it ran already), its CUPTI id (a kernels-timed
 * profiler's, while the collector runs for it: a launch's was pushed
 * around it by its caller), then its time starts. */
static SP_OUTLINE void call_begun(const sp_profiler *p, sp_thread *t) {
  if (p->cfg.nvtx && !t->op->launch) nvtx_push(t, p->cfg.nvtx);
  if (p->cfg.time) {
    t->gpu_ext = 0; /* none stale: only a timed call's is said (gpu_said) */
    t->gpu_call = 0;
    t->gpu_repeat = 0;
    if (p->cfg.time == SP_TIME_KERNELS && cupti_for(p)) {
      if (t->op->launch) t->gpu_ext = t->pub.gpu_ext;
      else t->gpu_pushed = (t->gpu_ext = cupti_push()) != 0;
    }
    t->pub.t1 = 0;
    t->pub.t0 = sp_clock_ns();
  }
  t->pub.gpu_ext = 0;
}

int sp_call_begin(sp_profiler *p, sp_thread *t) {
  sp_api_check(p && t);
#ifdef SP_DEBUG
  sp_api_check(!t->in_call); /* the last call's end or fail is missing */
#endif
  int r = call_begin(p, t);
#ifdef SP_DEBUG
  t->in_call = r != 0;
#endif
  if (__builtin_expect(p->cfg.time | p->cfg.nvtx, 0) && r) call_begun(p, t);
  return r;
}

/* The call returned: its NVTX range ends, and its CUPTI id is popped (on
 * every path, timed or not: CUPTI's stack of ids is per thread). */
static SP_OUTLINE void ranges_end(sp_thread *t) {
  if (t->nvtx_open) nvtx_pop(t);
  if (t->gpu_pushed) {
    cupti_pop();
    t->gpu_pushed = 0;
  }
}

/* The call ended (its end, repeat or failure: once): its NVTX range is
 * popped; its time in ns, or -1 when the profiler is not timed. */
static inline int64_t call_ended(sp_thread *t) {
  if (__builtin_expect(t->nvtx_open | t->gpu_pushed, 0)) ranges_end(t); /* the call returned */
  int64_t t0 = t->pub.t0;
  if (__builtin_expect(!t0, 1)) return -1;
  int64_t end = t->pub.t1 ? t->pub.t1 : sp_clock_ns();
  t->call_start = t0;
  t->pub.t0 = t->pub.t1 = 0;
  return end > t0 ? end - t0 : 0;
}

/* A kernels-timed call's id: what it became, for the kernels file (the
 * record it was written as, or repeats), said once its call is done, with
 * no lock held. A call that became neither leaves its id unclaimed. Only
 * timed calls have one (ns >= 0: a test of a register on the untimed path;
 * a stale id is replaced at the next call's begin). */
static inline void gpu_said(sp_thread *t, int64_t ns) {
  if (__builtin_expect(ns < 0, 1) || !t->gpu_ext) return;
  if (t->gpu_call) cupti_called(t->gpu_ext, t->gpu_call, t->gpu_repeat);
  t->gpu_ext = 0;
  t->gpu_call = 0;
  t->gpu_repeat = 0;
}

/* ...the record of signature sig, whose repeat it was. Spinlock held. */
static inline void gpu_repeat_of(const sp_profiler *p, sp_thread *t, long sig) {
  if (!t->gpu_ext || sig < 0 || sig >= p->sigs.n_recs) return;
  t->gpu_call = p->sigs.recs[sig].rep_id;
  t->gpu_repeat = 1;
}

/* A signature's call took ns (a deduplicated file's signature_times).
 * Spinlock held. */
static SP_OUTLINE void time_signature(sp_profiler *p, long sig, int64_t ns) {
  if (sig < 0 || !p->cfg.dedupe || sig >= p->sigs.n_recs) return;
  if (!sig_time_add(&p->sigs.recs[sig], ns)) err_fail(p, "out of memory timing signatures for ", 0);
}

/* A repeat counted at its begin (of signature t->prim) took ns (-1: not
 * timed); its kernels, if any, are its signature's. */
static SP_OUTLINE void repeat_ended(sp_profiler *p, sp_thread *t, int64_t ns) {
  lock_acquire(&p->lock);
  if (ns >= 0) time_signature(p, t->prim, ns);
  gpu_repeat_of(p, t, t->prim);
  lock_release(&p->lock);
  gpu_said(t, ns);
}

/* The room a record's "start_us" and "time_us" take. */
#define TIME_TEXT_BOUND 80

/* ', "start_us": 67.890, "time_us": 12.345' at o: the call's start since
 * the profiler opened (its time origin) and its time. */
static char *put_time(const sp_profiler *p, const sp_thread *t, char *o, int64_t ns) {
  o = PUT_LIT(o, ", \"start_us\": ");
  o = text_put_us(o, t->call_start - p->time_origin);
  o = PUT_LIT(o, ", \"time_us\": ");
  return text_put_us(o, ns);
}

/* The call's times then the record's rest (n bytes at s), in t->timed;
 * 0 when out of memory. */
static int timed_rest(const sp_profiler *p, sp_thread *t, int64_t ns, const char *s, size_t n) {
  sp_buf *b = &t->timed;
  b->n = 0;
  if (!buf_reserve(b, TIME_TEXT_BOUND + n)) return 0;
  char *o = put_time(p, t, b->p, ns);
  memcpy(o, s, n);
  b->n = (size_t)(o - b->p) + n;
  return 1;
}

/* With arguments recorded: the key is a copy of the inputs with their
 * float values zeroed, if they hold any. */
static SP_OUTLINE int mask_floats(sp_thread *t) {
  const sp_enc *in = &t->pub.in;
  for (size_t i = 1; i < in->n && !t->floats; i = format_item_end(in->w, i)) {
    int64_t tag = in->w[i];
    t->floats = tag == SP_ENC_FLOAT || tag == SP_ENC_FLOATS || tag == SP_ENC_COMPLEX;
  }
  if (!t->floats) return 1;
  sp_enc *k = &t->keybuf;
  k->n = 0;
  if (k->cap < in->n && sp_enc_grow(k, in->n) != SP_OK) return 0;
  memcpy(k->w, in->w, in->n * sizeof *k->w);
  k->n = in->n;
  for (size_t i = 1; i < in->n; i = format_item_end(in->w, i)) {
    int64_t tag = in->w[i];
    if (tag == SP_ENC_FLOAT) k->w[i + 2] = 0;
    else if (tag == SP_ENC_COMPLEX) k->w[i + 2] = k->w[i + 3] = 0;
    else if (tag == SP_ENC_FLOATS) memset(k->w + i + 3, 0, (size_t)in->w[i + 2] * sizeof *k->w);
  }
  t->key = k->w;
  return 1;
}

/* The inputs key of t's call: its inputs, with float values zeroed. A
 * float (a scale, a schedule's sigma) decides neither shapes nor the kernel
 * chosen, and changes every step of a diffusion loop: it does not make a
 * new signature (FORMAT.md). Only recorded arguments hold floats (and a
 * launch's, always recorded). 0 when out of memory. */
static inline int make_key(const sp_profiler *p, sp_thread *t) {
  t->key = t->pub.in.w;
  t->key_n = t->pub.in.n;
  t->floats = 0;
  return p->cfg.args || __builtin_expect(t->op->launch, 0) ? mask_floats(t) : 1;
}

/* Puts the inputs on disk before the kernel runs: if it kills the process,
 * this half line is what is left of the call. Spinlock held; let go here. */
static SP_OUTLINE int put_prefix(sp_profiler *p, sp_thread *t) {
  if (!format_prefix(p, t)) {
    err_fail(p, "out of memory formatting a record for ", 0);
  } else if (!file_room(&p->file, p->file.len, t->prefix.n) &&
             (!make_room(p, t->prefix.n) || !format_prefix(p, t) ||
              !file_room(&p->file, p->file.len, t->prefix.n))) {
    /* The lock was let go to make room (the prefix was made again: its
     * call_id may be taken). No room means the file was closed or a failure
     * was reported (logging is off): nothing more to do. */
    if (!atomic_load_explicit(&p->logging, memory_order_relaxed)) {
      lock_release(&p->lock);
      return 0;
    }
  } else {
    sp_file *f = &p->file;
    int e = file_write_at(f, f->len, t->prefix.p, t->prefix.n);
    if (e) {
      err_fail(p, "cannot write records file ", e);
    } else {
      /* over another call's longer prefix: blank its end */
      if (f->spec_end > f->len + t->prefix.n) file_blank(f, f->len + t->prefix.n, f->spec_end);
      t->spec = 1;
      t->spec_at = f->len;
      f->spec_end = f->len + t->prefix.n;
      f->spec_owner = t;
    }
  }
  lock_release(&p->lock);
  return SP_CALL_RECORDING;
}

/* The record that followed the thread's latest call with one, last time
 * (sig_lookup tries it first), or -1. Spinlock held. */
static inline long guess_of(const sp_profiler *p, const sp_thread *t) {
  return t->last_p == p && t->last < p->sigs.n_recs ? p->sigs.recs[t->last].next - 1 : -1;
}

/* t's call, of record t->prim, follows the thread's latest. Spinlock held. */
static inline void follow(sp_profiler *p, sp_thread *t) {
  /* written only when it changes: a repeat then writes nothing shared */
  if (t->last_p == p && t->last < p->sigs.n_recs && p->sigs.recs[t->last].next != t->prim + 1)
    p->sigs.recs[t->last].next = t->prim + 1;
  t->last_p = p;
  t->last = t->prim;
}

static inline int call_begin(sp_profiler *p, sp_thread *t) {
  sp_enc *in = &t->pub.in;
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed)) return 0;
  if (in->failed || in->n < 1) return 0;
  t->op = registry_op(in->w[0]);
  if (!t->op || !make_key(p, t)) return 0;
  t->spec = 0;
  t->counted = 0;
  t->sig = -1;
  lock_acquire(&p->lock);
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed) ||
      !pass_of_call(p, &t->pass, &t->phase, &t->salt)) {
    lock_release(&p->lock);
    return 0;
  }
  if (__builtin_expect(t->pub.within != 0, 0)) /* inside another call: another signature */
    t->salt ^= ((uint64_t)t->pub.within * 0xA24BAED4963EE407ULL) | 1;
  t->prim = sig_lookup(&p->sigs, guess_of(p, t), t->salt, t->key, t->key_n, &t->sig_hash);
  if (t->prim < 0 && in->tensors > 0) {
    /* Tensor inputs: this call will be logged, so its inputs can be
     * registered now, and their text cached as it is formatted. */
    t->prim = sig_add(&p->sigs, t->sig_hash, t->salt, t->key, t->key_n);
    if (t->prim < 0) {
      err_fail(p, "out of memory recording signatures for ", 0);
      lock_release(&p->lock);
      return 0;
    }
  }
  if (t->prim >= 0) follow(p, t);
  const sig_rec *r = t->prim >= 0 ? &p->sigs.recs[t->prim] : NULL;
  if (r && p->cfg.dedupe && r->has_out) {
    if (in->tensors > 0) {
      /* A repeat with tensor inputs is logged for sure: count it now as a
       * repeat of its inputs' primary signature; its end checks that the
       * outputs are that signature's, and nothing more happens if so. */
      if (tally_count_op(&p->tally, (int)in->w[0], t->phase)) {
        t->pub.expect = r->out_w;
        t->pub.expect_n = r->out_w_n;
        p->dedupe_skipped++;
        p->sigs.recs[t->prim].reps++;
        t->counted = 1;
      }
      lock_release(&p->lock);
      return t->counted ? SP_CALL_COUNTED : 0;
    }
    lock_release(&p->lock);
    return SP_CALL_RECORDING; /* logged or not, written or not: at its end */
  }
  return put_prefix(p, t);
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

/* Writes t's prefix at file offset `at` under call_id `id` instead of the
 * one it was made with, which may be taken by now: its head, the id and its
 * rest, in place, all or nothing, allocating nothing (a dying thread's
 * rescue writes with it too). Returns 0, or ENOSPC without room; the length
 * written in *len. */
static int write_prefix_as(sp_file *f, size_t at, const sp_thread *t, long long id, size_t *len) {
  char digits[24];
  size_t n = (size_t)(text_put_i64(digits, id) - digits);
  size_t head = t->id_digits_at, rest = t->prefix.n - t->id_digits_end;
  *len = head + n + rest;
  if (!file_room(f, at, *len)) return ENOSPC;
  file_write_at(f, at, t->prefix.p, head);
  file_write_at(f, at + head, digits, n);
  file_write_at(f, at + head + n, t->prefix.p + t->id_digits_end, rest);
  return 0;
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
    size_t len = t->prefix.n;
    e = t->spec ? write_prefix_as(f, f->len, t, p->records + 1, &len) /* its call_id may be taken */
                : file_write_at(f, f->len, t->prefix.p, len);
    if (!e) e = file_write_at(f, f->len + len, suffix, suffix_n);
    if (!e) f->len += len + suffix_n;
  }
  if (f->spec_owner && f->spec_owner != t && f->spec_end > f->len && !e) {
    /* Our record went over another thread's prefix, which was longer: blank
     * what is left of it, so that a crash now leaves no torn line behind a
     * whole one. That call writes its whole record at its end. */
    file_blank(f, f->len, f->spec_end);
  }
  if (f->spec_owner) {
    f->spec_owner = NULL;
    f->spec_end = f->len;
  }
  t->spec = 0; /* no longer in flight (record_rescue_in_flight) */
  if (e) {
    err_fail(p, "cannot write records file ", e);
    return;
  }
  if (t->sig >= 0 && !p->sigs.recs[t->sig].rep_id) {
    /* the signature's first record: it stands for its repeats */
    p->sigs.recs[t->sig].rep_id = p->records + 1;
    p->sigs.recs[t->sig].reps++;
  }
  next_call_id(p);
  if (t->gpu_ext) {
    t->gpu_call = p->records; /* its call_id */
    t->gpu_repeat = 0;
  }
  if (!p->grow_asked && !p->grow_off && f->len - f->cut_len >= SP_STREAM && file_runway(f) < SP_AHEAD / 2) {
    /* little room left ahead: the grower makes more (asked for once the
     * spinlock is let go), so that writers seldom stop for a syscall */
    p->grow_asked = 1;
    p->grow_cuts = f->cuts;
    t->grow_ask = 1;
  }
}

/* Lets go of the spinlock; then asks the grower for room if this thread's
 * record left little (a syscall at most once per SP_AHEAD / 2 written). */
static inline void release_and_ask(sp_profiler *p, sp_thread *t) {
  lock_release(&p->lock);
  if (t->grow_ask) {
    t->grow_ask = 0;
    grower_ask(p);
  }
}

static void drop_spec(sp_profiler *p, sp_thread *t) {
  sp_file *f = &p->file;
  if (t->spec && f->spec_owner == t && t->spec_at == f->len) {
    /* Blank the half line, so that a crash now does not show a call that
     * did not crash. Zeros read as the file's unused tail. (A prefix that
     * is no longer at the tail was written over, and blanked, by the record
     * that took its place: never blank records.) */
    file_blank(f, t->spec_at, f->spec_end);
    f->spec_owner = NULL;
    f->spec_end = f->len;
  }
  t->spec = 0;
}

/* Takes back the count of a call counted at begin as a repeat of its
 * inputs' primary signature (it raised, or its outputs were others). */
static void uncount_repeat(sp_profiler *p, sp_thread *t) {
  p->dedupe_skipped--;
  p->sigs.recs[t->prim].reps--;
  t->counted = 0;
}

/* Counts the call as observed and finds its signature (t->sig: not for a
 * call that raised, which is always written and stands for itself); returns
 * 1 if it should be written. */
static int observe(sp_profiler *p, sp_thread *t, int raised) {
  const sp_enc *in = &t->pub.in, *out = &t->pub.out;
  if (t->counted) { /* counted as a deduplicated repeat at begin */
    if (!raised) return 0;
    uncount_repeat(p, t); /* the operator stays counted */
    return 1;
  }
  if (!tally_count_op(&p->tally, (int)in->w[0], t->phase)) {
    err_fail(p, "out of memory counting operators for ", 0);
    return 0;
  }
  if (raised || out->failed) return 1; /* no signature: written as it is */
  if (t->prim < 0) { /* not registered at begin (no tensor inputs) */
    t->prim = sig_find(&p->sigs, t->sig_hash, t->key, t->key_n);
    if (t->prim < 0) t->prim = sig_add(&p->sigs, t->sig_hash, t->salt, t->key, t->key_n);
  }
  long sig = t->prim;
  int known = 1;
  if (sig >= 0 && !p->sigs.recs[sig].has_out) { /* the first outputs of these inputs */
    known = 0;
    if (!sig_set_outputs(&p->sigs, sig, out)) sig = -1;
  } else if (sig >= 0 && !sig_outputs_equal(&p->sigs.recs[sig], out)) {
    uint64_t h = sig_variant_hash(t->sig_hash, out->w, out->n);
    sig = sig_variant_find(&p->sigs, h, t->key, t->key_n, out->w, out->n);
    if (sig < 0) {
      known = 0;
      sig = sig_variant_add(&p->sigs, h, t->prim, out);
    }
  }
  if (sig < 0) {
    err_fail(p, "out of memory recording signatures for ", 0);
    return 0;
  }
  t->sig = sig;
  if (known && p->cfg.dedupe) {
    p->dedupe_skipped++;
    p->sigs.recs[sig].reps++;
    return 0;
  }
  return 1;
}

/* The outputs' text: the signature's cached text, else freshly formatted
 * into t->line (and cached for the signature). */
static int outputs_text(sp_profiler *p, sp_thread *t, const char **s, size_t *n) {
  sig_rec *r = t->sig >= 0 ? &p->sigs.recs[t->sig] : NULL;
  if (r && r->out_n) {
    *s = p->sigs.text + r->out_at;
    *n = r->out_n;
    return 1;
  }
  if (!format_outputs(t)) return 0;
  if (r) {
    size_t at = sig_text_put(&p->sigs, t->line.p, t->line.n);
    if (at != (size_t)-1) {
      r = &p->sigs.recs[t->sig];
      r->out_at = at;
      r->out_n = t->line.n;
    }
  }
  *s = t->line.p;
  *n = t->line.n;
  return 1;
}

/* A few words: a loop beats a call to memcmp. */
static inline int words_same(const int64_t *a, const int64_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

void sp_call_end(sp_profiler *p, sp_thread *t) {
#ifdef SP_DEBUG
  sp_api_check(t->in_call); /* only after sp_call_begin returned nonzero */
  t->in_call = 0;
#endif
  sp_enc *out = &t->pub.out;
  int64_t ns = call_ended(t);
  if (t->counted) {
    /* A repeat of its inputs' primary signature if the outputs are its
     * (no lock: the arena never moves, and these words never change). */
    if (!out->failed && out->n == t->pub.expect_n && words_same(out->w, t->pub.expect, out->n)) {
      if (__builtin_expect(ns >= 0, 0)) repeat_ended(p, t, ns);
      return;
    }
    /* Other outputs: another signature. Take the count back; the call is
     * observed afresh below. */
    lock_acquire(&p->lock);
    uncount_repeat(p, t);
    tally_uncount_op(&p->tally, (int)t->pub.in.w[0], t->phase);
  } else {
    lock_acquire(&p->lock);
  }
  if (atomic_load_explicit(&p->logging, memory_order_relaxed) && !p->file.closed) {
    room_for(p, format_record_bound(p, t, ns >= 0 ? TIME_TEXT_BOUND : 0));
  }
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed) || p->file.closed) {
    drop_spec(p, t);
    lock_release(&p->lock);
    gpu_said(t, ns);
    return;
  }
  int has_tensor = t->pub.in.tensors > 0 || (!out->failed && out->tensors > 0);
  if (!has_tensor || !observe(p, t, 0)) {
    if (has_tensor) { /* a repeat */
      if (__builtin_expect(ns >= 0, 0)) time_signature(p, t->sig, ns);
      gpu_repeat_of(p, t, t->sig);
    }
    drop_spec(p, t);
    lock_release(&p->lock);
    gpu_said(t, ns);
    return;
  }
  if (__builtin_expect(ns >= 0, 0)) time_signature(p, t->sig, ns);
  /* The prefix first: making it may grow the text cache that the outputs'
   * text points into. */
  const char *text;
  size_t text_n;
  if ((!t->spec && !format_prefix(p, t)) || !outputs_text(p, t, &text, &text_n) ||
      (ns >= 0 && !timed_rest(p, t, ns, text, text_n)))
    err_fail(p, "out of memory formatting a record for ", 0);
  else if (ns >= 0)
    commit(p, t, t->timed.p, t->timed.n);
  else
    commit(p, t, text, text_n);
  release_and_ask(p, t);
  gpu_said(t, ns);
}

void sp_call_repeat(sp_profiler *p, sp_thread *t) {
  sp_api_check(t->counted); /* only after sp_call_begin returned SP_CALL_COUNTED */
#ifdef SP_DEBUG
  sp_api_check(t->in_call);
  t->in_call = 0;
#endif
  int64_t ns = call_ended(t);
  if (__builtin_expect(ns >= 0, 0)) repeat_ended(p, t, ns);
}

void sp_call_fail(sp_profiler *p, sp_thread *t, const char *type, const char *msg) {
  sp_call_fail_n(p, t, type, type ? strlen(type) : 0, msg, msg ? strlen(msg) : 0);
}

void sp_call_fail_n(sp_profiler *p, sp_thread *t, const char *type, size_t type_n,
                    const char *msg, size_t msg_n) {
#ifdef SP_DEBUG
  sp_api_check(t->in_call); /* only after sp_call_begin returned nonzero */
  t->in_call = 0;
#endif
  if (!type || !type_n) {
    type = "RuntimeError";
    type_n = 12;
  }
  if (!msg) msg_n = 0;
  int64_t ns = call_ended(t);
  lock_acquire(&p->lock);
  if (atomic_load_explicit(&p->logging, memory_order_relaxed) && !p->file.closed) {
    /* an escaped character takes at most 6 bytes (\u00XX) */
    room_for(p, format_record_bound(p, t, 64 + TIME_TEXT_BOUND + 6 * (type_n + msg_n)));
  }
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed) || p->file.closed ||
      !observe(p, t, 1)) {
    drop_spec(p, t);
    lock_release(&p->lock);
    gpu_said(t, ns);
    return;
  }
  sp_buf *s = &t->line;
  s->n = 0;
  if (ns >= 0 && buf_reserve(s, TIME_TEXT_BOUND)) s->n = (size_t)(put_time(p, t, s->p, ns) - s->p);
  BUF_LIT(s, ", \"outputs\": null, \"error\": {\"error_type\": ");
  buf_json_str(s, type, type_n);
  BUF_LIT(s, ", \"error_message\": ");
  buf_json_str(s, msg ? msg : "", msg_n);
  BUF_LIT(s, "}}\n");
  if (s->failed || (!t->spec && !format_prefix(p, t))) {
    s->failed = 0;
    err_fail(p, "out of memory formatting a record for ", 0);
  } else {
    commit(p, t, s->p, s->n);
    p->errors++;
  }
  release_and_ask(p, t);
  gpu_said(t, ns);
}

/* A dying thread's call in flight whose inputs another thread's record
 * wrote over (only the last prefix written stays at the tail): written again
 * at the end of the records, under the next call_id, so that the crash's
 * call is the file's cut last line. Async-signal-safe: memcpy into the
 * mapping, no lock (the process is dying), no allocation. */
SP_PRIVATE void record_rescue_in_flight(sp_profiler *p, sp_thread *t) {
  sp_file *f = &p->file;
  if (!t || !t->spec || t->prefix.failed || !t->pass || t->pass->p != p) return;
  if (f->spec_owner == t && t->spec_at == f->len) return; /* on disk already */
  size_t at = f->len, len;
  if (write_prefix_as(f, at, t, p->records + 1, &len)) return;
  f->spec_owner = t;
  t->spec_at = at;
  f->spec_end = at + len;
}

/* ---- kept graph captures (sp_graph_adopt) ---- */

#define CALL_ID_HEAD "{\"call_id\": "

/* The records of kept's file text: each a line that starts with its
 * call_id; 0 if one does not (then nothing is adopted). *lines: how many. */
static int kept_lines_valid(const char *s, size_t n, long long *lines) {
  const size_t head = sizeof CALL_ID_HEAD - 1;
  *lines = 0;
  for (size_t at = 0; at < n;) {
    const char *nl = memchr(s + at, '\n', n - at);
    if (!nl) return 0;
    size_t len = (size_t)(nl - (s + at)) + 1;
    if (len <= head || memcmp(s + at, CALL_ID_HEAD, head) != 0) return 0;
    size_t d = at + head;
    while (d < at + len && s[d] >= '0' && s[d] <= '9') d++;
    if (d == at + head || d - (at + head) > 18) return 0;
    at += len;
    (*lines)++;
  }
  return 1;
}

/* The calls each of kept's records stands for, by call_id (1..records):
 * its signature_counts. NULL when it deduplicated nothing or out of memory
 * (*nomem then). */
static long long *kept_counts(const sp_profiler *kept, int *nomem) {
  *nomem = 0;
  if (!kept->cfg.dedupe || !kept->records) return NULL;
  long long *by_id = calloc((size_t)kept->records + 1, sizeof *by_id);
  if (!by_id) {
    *nomem = 1;
    return NULL;
  }
  for (long long i = 0; i < kept->sigs.n_recs; i++) {
    const sig_rec *r = &kept->sigs.recs[i];
    if (r->rep_id > 0 && r->rep_id <= kept->records) by_id[r->rep_id] = r->reps;
  }
  return by_id;
}

/* One adopted record (len bytes, its old call_id's digits ending at d) at
 * the tail under p's next call_id; room was made. Spinlock held. */
static int adopt_line(sp_profiler *p, const char *line, size_t d, size_t len) {
  sp_file *f = &p->file;
  const size_t head = sizeof CALL_ID_HEAD - 1;
  size_t at = f->len;
  int e = file_write_at(f, at, line, head);
  if (!e) e = file_write_at(f, at + head, p->id_text, p->id_len);
  if (!e) e = file_write_at(f, at + head + p->id_len, line + d, len - d);
  if (e) return e;
  f->len = at + head + p->id_len + (len - d);
  next_call_id(p);
  return 0;
}

int sp_graph_adopt(sp_profiler *p, sp_profiler *kept, const char *text, size_t n) {
  if (!p || !kept || p == kept || atomic_load(&p->orphaned) || !kept->file.closed ||
      kept->failed || p->cfg.dedupe != kept->cfg.dedupe || p->cfg.args != kept->cfg.args)
    return 0;
  long long lines = 0;
  int nomem = 0;
  if (!kept_lines_valid(text, n, &lines) || lines != kept->records) return 0;
  long long *stands = kept_counts(kept, &nomem);
  const char *phase = kept->tally.n_phases ? kept->tally.phase_stats[0].name : NULL;
  const struct sp_pass *ps = NULL;
  int slot;
  uint64_t salt;
  int adopted = 0, ask = 0;
  lock_acquire(&p->lock);
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed) || p->file.closed || p->failed ||
      !pass_of_call(p, &ps, &slot, &salt) || !ps || ps->capture || !pass_phase_wanted(p, phase))
    goto out;
  if (nomem) {
    err_fail(p, "out of memory adopting a kept graph capture into ", 0);
    goto out;
  }
  /* Room for all of it first: a capture is adopted whole or not at all
   * (at the cap, recording stops before it, and the summary says so). */
  int digits = 1; /* of the largest call_id it takes; each line has one digit at least */
  for (long long most = p->records + lines; most >= 10; most /= 10) digits++;
  size_t need = n + (size_t)lines * (size_t)(digits - 1);
  room_for(p, need);
  if (!atomic_load_explicit(&p->logging, memory_order_relaxed) || p->file.closed ||
      !file_tail_room(&p->file, need))
    goto out;
  sp_file *f = &p->file;
  for (size_t at = 0; at < n;) {
    const char *nl = memchr(text + at, '\n', n - at);
    size_t len = (size_t)(nl - (text + at)) + 1;
    long long old = 0;
    size_t d = sizeof CALL_ID_HEAD - 1; /* kept_lines_valid: its digits follow */
    for (; text[at + d] >= '0' && text[at + d] <= '9'; d++) old = old * 10 + (text[at + d] - '0');
    long long reps = stands && old > 0 && old <= kept->records ? stands[old] : 1;
    if (reps > 1 && !sig_add_counted(&p->sigs, p->records + 1, reps)) {
      err_fail(p, "out of memory adopting a kept graph capture into ", 0);
      goto out;
    }
    int e = adopt_line(p, text + at, d, len);
    if (e) {
      err_fail(p, "cannot write records file ", e);
      goto out;
    }
    at += len;
  }
  /* over another thread's in-flight prefix: that call writes its whole
   * record at its end (commit) */
  if (f->spec_owner && f->spec_end > f->len) file_blank(f, f->len, f->spec_end);
  f->spec_owner = NULL;
  f->spec_end = f->len;
  if (!tally_merge(&p->tally, &kept->tally)) {
    err_fail(p, "out of memory adopting a kept graph capture into ", 0);
    goto out;
  }
  for (int i = 0; i < kept->tally.n_graphs; i++) {
    const struct graph_stat *g = &kept->tally.graphs[i];
    if (g->real != -1 || !g->captures) continue;
    int at = tally_graph(&p->tally, g->key, -1);
    if (at < 0) {
      err_fail(p, "out of memory adopting a kept graph capture into ", 0);
      goto out;
    }
    p->tally.graphs[at].captures += g->captures;
  }
  p->dedupe_skipped += kept->dedupe_skipped;
  p->errors += kept->errors;
  p->sigs.signatures += kept->sigs.signatures;
  adopted = 1;
  if (!p->grow_asked && !p->grow_off && file_runway(f) < SP_AHEAD / 2) {
    p->grow_asked = 1;
    p->grow_cuts = f->cuts;
    ask = 1;
  }
out:
  lock_release(&p->lock);
  if (ask) grower_ask(p);
  free(stands);
  return adopted;
}

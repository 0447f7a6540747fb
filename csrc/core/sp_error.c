/* sp_error.c -- Failures: the message kept, said once, with no lock held.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). A leaf: it calls only sp_text.c and sp_registry.c. */
#include "sp_internal.h"

/* What follows "cannot write summary file P" for error e. */
static void err_summary_why(char *why, size_t cap, int e, int closed) {
  snprintf(why, cap, ": %s; %s", strerror(e),
           closed ? "the records are kept without it" : "recording goes on without it");
}

SP_PRIVATE void err_set(sp_profiler *p, const char *a, const char *b, int err) {
  snprintf(p->errmsg, sizeof p->errmsg, "%s%s%s%s", a, b ? b : "",
           err ? ": " : "", err ? strerror(err) : "");
}

/* A failure while running: say it once, stop logging, keep what was written. */
SP_PRIVATE void err_fail(sp_profiler *p, const char *what, int err) {
  if (p->failed) return;
  p->failed = 1;
  atomic_store(&p->logging, 0);
  err_set(p, what, p->path, err);
  p->failure_unsaid = 1; /* said by err_tell: no write(2) under the spinlock */
}

SP_PRIVATE void err_cap(sp_profiler *p) {
  if (p->failed) return;
  err_fail(p, "", 0);
  p->capped = 1;
  double mib = (double)p->file.cap / (1 << 20);
  char cap[48];
  if (mib >= 1) snprintf(cap, sizeof cap, "%.1f MiB", mib);
  else snprintf(cap, sizeof cap, "%zu bytes", p->file.cap);
  snprintf(p->errmsg, sizeof p->errmsg, "records file %s reached its cap of %s (SHAPEPROF_MAX_MB)", p->path, cap);
}

/* Says what err_fail() noted, once, with no lock held: called where the
 * profiler does its syscalls anyway (the flusher, close). */
SP_PRIVATE void err_tell(sp_profiler *p) {
  char msg[SP_ERRMSG_CAP + 64], n[32];
  lock_acquire(&p->lock);
  int unsaid = p->failure_unsaid;
  p->failure_unsaid = 0;
  if (unsaid) {
    n[text_fmt_i64(n, p->records)] = 0;
    size_t k = strlen(p->errmsg);
    memcpy(msg, p->errmsg, k + 1);
  }
  /* A summary that wanted space: said with the records' failure; alone
   * once the records show they go on (their file grew), when no logged pass
   * is open (nothing is about to fail), or at close. */
  int full = p->summary_full;
  if (full && !(unsaid || p->file.closed || p->tally.open_logged == 0 || p->file.size > p->summary_full_size))
    full = 0;
  if (full) p->summary_full = 0;
  int closed = p->file.closed;
  lock_release(&p->lock);
  char why[SP_ERRMSG_CAP + 64];
  if (unsaid && full) {
    snprintf(why, sizeof why, "%s; nor could the summary file %s be written: %s", n,
             p->summary_path, strerror(full));
    text_say(msg, "; profiling stopped, records kept: ", why);
  } else if (unsaid) {
    text_say(msg, "; profiling stopped, records kept: ", n);
  } else if (full) {
    err_summary_why(why, sizeof why, full, closed);
    text_say("cannot write summary file ", p->summary_path, why);
  }
  if (registry_dtype_unknown_unsaid())
    text_say("a tensor has a dtype this build does not know; it is written as "
        "\"torch.unknown<code>\"", NULL, NULL);
}

/* The summary could not be written (error e): recording goes on without
 * it, said once (for want of space, by err_tell). The spinlock not held. */
SP_PRIVATE void err_summary_failed(sp_profiler *p, int e) {
  if (atomic_exchange(&p->summary_said, 1)) return;
  lock_acquire(&p->lock);
  int closed = p->file.closed;
  if (err_no_space(e)) {
    p->summary_full = e;
    p->summary_full_size = p->file.size;
  }
  lock_release(&p->lock);
  if (err_no_space(e)) return;
  char why[160];
  err_summary_why(why, sizeof why, e, closed);
  text_say("cannot write summary file ", p->summary_path, why);
}

/* The summary was written: a failure for want of space not said yet is
 * no longer true (space was freed), and is not said. The spinlock not held. */
SP_PRIVATE void err_summary_written(sp_profiler *p) {
  lock_acquire(&p->lock);
  if (p->summary_full) {
    p->summary_full = 0;
    atomic_store(&p->summary_said, 0);
  }
  lock_release(&p->lock);
}

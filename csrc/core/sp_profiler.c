/* sp_profiler.c -- A profiler's lifetime: open, close, references, the open
 * profilers' list, and fork(2).
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
static sp_profiler *g_open;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* fn(p, arg) for each open profiler, with their list's lock held; the
 * results or-ed. */
static int prof_each_open(int (*fn)(sp_profiler *p, int arg), int arg) {
  int r = 0;
  lock_mu(&g_open_lock, SP_LOCK_OPEN);
  for (sp_profiler *p = g_open; p; p = p->next_open) r |= fn(p, arg);
  lock_mu_release(&g_open_lock, SP_LOCK_OPEN);
  return r;
}

/* The same without the lock, for a dying process (async-signal-safe). */
SP_PRIVATE void prof_each_open_unlocked(void (*fn)(sp_profiler *p)) {
  for (sp_profiler *p = g_open; p; p = p->next_open) fn(p);
}

/* The profiler whose logged pass began last: the calls of a thread that
 * inherited the fallback's key but began no pass of its own (autograd's)
 * go to it. It holds a reference while set (prof_inherit); such a thread
 * reads it without one, so a profiler closed and let go of while such a
 * thread is inside an operator is the one case left unguarded. */
static _Atomic(sp_profiler *) g_inherited;

SP_PRIVATE sp_profiler *prof_inherited(void) {
  return atomic_load_explicit(&g_inherited, memory_order_relaxed);
}

SP_PRIVATE void prof_inherit(sp_profiler *p) {
  prof_ref(p);
  sp_profiler *old = atomic_exchange(&g_inherited, p);
  if (old) prof_unref(old);
}

SP_PRIVATE void prof_uninherit(sp_profiler *p) {
  sp_profiler *expected = p;
  if (!sp_logging(p) && atomic_compare_exchange_strong(&g_inherited, &expected, NULL))
    prof_unref(p); /* not the last: the caller holds one */
}

static void prof_unlink(sp_profiler *p) {
  lock_mu(&g_open_lock, SP_LOCK_OPEN);
  for (sp_profiler **q = &g_open; *q; q = &(*q)->next_open)
    if (*q == p) {
      *q = p->next_open;
      break;
    }
  lock_mu_release(&g_open_lock, SP_LOCK_OPEN);
}

/* The process-wide locks, taken in this order across fork(2). */
static void at_fork_prepare(void) {
  lock_mu(&g_open_lock, SP_LOCK_OPEN);
  registry_fork_lock();
  flusher_fork_prepare(); /* the flusher is between flushes */
  grower_fork_prepare();
}
static void at_fork_parent(void) {
  grower_fork_parent();
  flusher_fork_parent();
  registry_fork_unlock();
  lock_mu_release(&g_open_lock, SP_LOCK_OPEN);
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
    file_release(&p->file);
  }
  grower_fork_child();
  flusher_fork_child();
  registry_fork_unlock();
  lock_mu_release(&g_open_lock, SP_LOCK_OPEN);
}
static void global_init(void) {
  file_init();
  flusher_init(prof_each_open);
  pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child);
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

/* Frees p: the last reference let go of (prof_unref). */
static void prof_destroy(sp_profiler *p) {
  file_release(&p->file);
  if (p->dir_fd >= 0) close(p->dir_fd);
  prof_unlink(p);
  free(p->path);
  free(p->summary_path);
  free(p->phases);
  free(p->worker);
  free(p->dispatch_key);
  free(p->pass_json.p);
  tally_free(&p->tally);
  sig_table_free(&p->sigs);
  summary_snapshot_free(&p->snap);
  /* A forked child's copy may be locked by a thread that is not there. */
  if (p->owner_pid == getpid() && !atomic_load(&p->orphaned)) {
    pthread_mutex_destroy(&p->pass_mu);
    pthread_mutex_destroy(&p->summary_mu);
    pthread_mutex_destroy(&p->grow_mu);
  }
  free(p);
}

/* The cap on p's records file (sp_config.max_bytes) open as fd: bytes, or
 * 0 for none. */
static size_t records_cap(int fd, long long max_bytes) {
  if (max_bytes < 0) return 0;
  if (max_bytes > 0) return (size_t)max_bytes;
  size_t cap = (size_t)SP_DEFAULT_MAX_BYTES;
  struct statfs fs;
  /* tmpfs (/dev/shm, often /tmp) and ramfs: the records would take RAM */
  if (fstatfs(fd, &fs) == 0 && ((unsigned long)fs.f_type == TMPFS_MAGIC ||
                                (unsigned long)fs.f_type == RAMFS_MAGIC)) {
    size_t quarter = (size_t)fs.f_bavail * (size_t)fs.f_bsize / 4;
    if (quarter < cap) cap = quarter;
  }
  return cap ? cap : 1; /* a full tmpfs: nothing fits */
}

/* Opens p's folder (p->dir_fd) and, in it, its records file, locked and
 * empty. Returns the file's fd, or -SP_* with p's message set. */
static int open_records(sp_profiler *p) {
  const char *slash = strrchr(p->path, '/');
  const char *base = slash ? slash + 1 : p->path;
  if (!*base) {
    err_set(p, "records file path names a folder: ", p->path, 0);
    return -SP_ERROR;
  }
  if (slash) {
    size_t n = slash == p->path ? 1 : (size_t)(slash - p->path);
    char *dir = malloc(n + 1);
    if (!dir) {
      err_set(p, "out of memory", NULL, 0);
      return -SP_NOMEM;
    }
    memcpy(dir, p->path, n);
    dir[n] = 0;
    p->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
  } else {
    p->dir_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (p->dir_fd < 0) {
    err_set(p, "cannot open the folder of records file ", p->path, errno);
    return -SP_IOERR;
  }
  /* Not O_TRUNC: first make sure no other live process writes this file
   * (two processes with the same rank name, say). Never through a symbolic
   * link: in a shared folder (/tmp) anyone could plant one and have us
   * truncate its target. */
  int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  if (p->cfg.exclusive) flags |= O_EXCL;
  int fd = openat(p->dir_fd, base, flags, 0644);
  if (fd < 0) {
    int e = errno; /* err_set's snprintf may change errno */
    int taken = e == EEXIST && p->cfg.exclusive;
    if (e == ELOOP)
      err_set(p, "records file is a symbolic link, not written through: ", p->path, 0);
    else if (taken)
      err_set(p, "records file exists already: ", p->path, 0);
    else
      err_set(p, "cannot open records file ", p->path, e);
    return taken ? -SP_EXISTS : -SP_IOERR;
  }
  /* a FIFO or a device by that name: never written (O_NONBLOCK: a FIFO
   * without a reader does not hang the open) */
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    err_set(p, "records file is not a regular file: ", p->path, 0);
    return -SP_IOERR;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK) {
      err_set(p, "records file is in use by another profiler: ", p->path, 0);
      return -SP_BUSY;
    }
    err_set(p, "cannot lock records file ", p->path, e);
    return -SP_IOERR;
  }
  if (ftruncate(fd, 0) != 0) {
    err_set(p, "cannot truncate records file ", p->path, errno);
    close(fd);
    return -SP_IOERR;
  }
  return fd;
}

int sp_open(const sp_config *cfg, sp_profiler **out) {
  if (!out) return SP_ERROR;
  *out = NULL;
  pthread_once(&g_once, global_init);
  sp_profiler *p = calloc(1, sizeof *p);
  if (!p) return SP_NOMEM;
  *out = p;
  atomic_init(&p->refs, 1); /* the owner's: sp_free drops it */
  p->destroy = prof_destroy; /* the last prof_unref's, in any part */
  atomic_flag_clear(&p->lock.f);
  pthread_mutex_init(&p->pass_mu, NULL);
  pthread_mutex_init(&p->summary_mu, NULL);
  pthread_mutex_init(&p->grow_mu, NULL);
  p->file.lock = &p->lock;
  p->file.grow_mu = &p->grow_mu;
  p->file.fd = -1;
  p->dir_fd = -1;
  p->file.closed = 1; /* until it opens */
  if (!cfg || !cfg->path || !cfg->path[0]) {
    err_set(p, "no records file path given", NULL, 0);
    return SP_ERROR;
  }
  if (cfg->skip_warmup < 0 || cfg->log_n_passes < 0) {
    err_set(p, "skip_warmup and log_n_passes must be >= 0", NULL, 0);
    return SP_ERROR;
  }
  p->cfg = *cfg;
  p->time_origin = sp_clock_ns();
  p->path = text_strdup(cfg->path);
  size_t cap = strlen(cfg->path) + 32;
  p->summary_path = malloc(cap);
  p->phases = cfg->phases && cfg->phases[0] ? text_strdup(cfg->phases) : NULL;
  p->worker = cfg->worker && cfg->worker[0] ? text_strdup(cfg->worker) : NULL;
  p->dispatch_key = cfg->dispatch_key && cfg->dispatch_key[0] ? text_strdup(cfg->dispatch_key) : NULL;
  if (!p->path || !p->summary_path || (cfg->phases && cfg->phases[0] && !p->phases) ||
      (cfg->worker && cfg->worker[0] && !p->worker) ||
      (cfg->dispatch_key && cfg->dispatch_key[0] && !p->dispatch_key)) {
    err_set(p, "out of memory", NULL, 0);
    return SP_NOMEM;
  }
  sp_summary_path_for(p->path, p->summary_path, cap);
  p->cfg.path = p->path;
  p->cfg.phases = p->phases;
  p->cfg.worker = p->worker;
  p->cfg.dispatch_key = p->dispatch_key;
  int fd = open_records(p);
  if (fd < 0) return -fd;
  p->file.cap = records_cap(fd, cfg->max_bytes);
  p->file.fd = fd;
  p->owner_pid = getpid();
  p->file.closed = 0;
  p->ended_by = "close";
  p->latest_phase = -1;
  static atomic_ullong serials;
  p->serial = atomic_fetch_add(&serials, 1) + 1;
  p->id_text[0] = '1';
  p->id_len = 1;
  /* An earlier run's summary must not stand beside the new records. */
  int e = summary_write_now(p, "running");
  if (e) { /* the records are still worth having: go on without a summary */
    err_summary_failed(p, e);
    unlinkat(p->dir_fd, summary_base(p), 0); /* an old run's, if one is there, must not stay */
  }
  lock_mu(&g_open_lock, SP_LOCK_OPEN);
  p->next_open = g_open;
  g_open = p;
  lock_mu_release(&g_open_lock, SP_LOCK_OPEN);
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

int sp_close(sp_profiler *p) {
  if (!p) return SP_OK;
  if (atomic_load(&p->orphaned) || p->owner_pid != getpid()) {
    /* Forked child: let go of the parent's file without touching it. */
    if (!p->file.closed) {
      p->file.closed = 1;
      file_release(&p->file);
      prof_unlink(p);
    }
    return SP_OK;
  }
  lock_mu(&p->summary_mu, SP_LOCK_SUMMARY);
  lock_mu(&p->pass_mu, SP_LOCK_PASS);
  lock_mu(&p->grow_mu, SP_LOCK_GROW); /* no growth in flight */
  lock_acquire(&p->lock);
  if (p->file.closed) {
    lock_release(&p->lock);
    lock_mu_release(&p->grow_mu, SP_LOCK_GROW);
    lock_mu_release(&p->pass_mu, SP_LOCK_PASS);
    lock_mu_release(&p->summary_mu, SP_LOCK_SUMMARY);
    return SP_OK;
  }
  atomic_store(&p->logging, 0);
  p->file.closed = 1;
  /* Calls still in flight on other threads see the map gone and write
   * nothing; the syscalls come after the lock. */
  sp_file file = p->file;
  p->file.map = NULL;
  p->file.fd = -1;
  p->file.size = p->file.len;
  p->file.spec_owner = NULL;
  p->file.spec_end = p->file.len;
  lock_release(&p->lock);
  lock_mu_release(&p->grow_mu, SP_LOCK_GROW); /* a grower now sees closed */
  lock_mu_release(&p->pass_mu, SP_LOCK_PASS);
  int rc = SP_OK;
  if (ftruncate(file.fd, (off_t)file.len) != 0) {
    err_set(p, "cannot trim records file ", p->path, errno);
    rc = SP_IOERR;
  }
  if (file.map) munmap(file.map, file.map_len);
  file.map = NULL;
  int e = summary_write_now(p, NULL);
  if (e) err_summary_failed(p, e); /* the records are kept */
  else err_summary_written(p);
  /* The file is another profiler's to take only now, summary written. The
   * lock belongs to the open file description, which a forked child's copy
   * of the descriptor shares until the child closes it (at_fork_child, when
   * it gets to run): unlock it explicitly, closing is not enough. */
  if (file.fd >= 0) flock(file.fd, LOCK_UN);
  file_release(&file);
  lock_mu_release(&p->summary_mu, SP_LOCK_SUMMARY);
  err_tell(p);
  prof_unlink(p);
  prof_uninherit(p);
  return rc;
}

void sp_free(sp_profiler *p) {
  if (!p) return;
  if (!p->file.closed) sp_close(p);
  prof_unref(p);
}

void sp_get_stats(sp_profiler *p, sp_stats *o) {
  memset(o, 0, sizeof *o);
  if (!p) return;
  int locked = !atomic_load(&p->orphaned);
  if (locked) lock_acquire(&p->lock);
  summary_counters(p, o);
  if (locked) lock_release(&p->lock);
}

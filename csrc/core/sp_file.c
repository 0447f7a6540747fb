/* sp_file.c -- The records file: a MAP_SHARED window over a file grown ahead of the writer.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

static size_t g_page;

SP_PRIVATE void file_init(void) {
  long pg = sysconf(_SC_PAGESIZE);
  g_page = pg > 0 ? (size_t)pg : 4096;
}

/* Allocates [from, to) of fd: reserved blocks, so that a full disk fails
 * here, not as a SIGBUS when a mapped page is first touched. */
static int file_allocate(int fd, size_t from, size_t to) {
  if (fallocate(fd, 0, (off_t)from, (off_t)(to - from)) == 0) return 0;
  if (errno != EOPNOTSUPP && errno != ENOSYS) return errno ? errno : EIO;
  /* ext2, some network and FUSE file systems: a sparse file would turn a
   * full disk into a SIGBUS on first touch. posix_fallocate writes the
   * blocks instead, so a full disk fails here too. */
  return posix_fallocate(fd, (off_t)from, (off_t)(to - from));
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Copies data to file offset off. Returns 0, or ENOSPC when no room was made
 * for it (a writer that skipped file_make_room: the profiler then stops).
 * Spinlock held. */
SP_PRIVATE int file_write_at(sp_file *f, size_t off, const char *data, size_t n) {
  if (!file_room(f, off, n)) return ENOSPC;
  memcpy(f->map + (off - f->map_off), data, n);
  return 0;
}

/* Zeroes [from, to) where it is mapped: bytes of a prefix no record covers
 * read as the unused tail after a crash, not as a torn line. Spinlock held,
 * or the process is dying (async-signal-safe). */
SP_PRIVATE void file_blank(sp_file *f, size_t from, size_t to) {
  if (!f->map) return;
  size_t lo = from > f->map_off ? from : f->map_off;
  size_t hi = f->map_off + f->map_len;
  if (to < hi) hi = to;
  if (f->size < hi) hi = f->size;
  if (lo < hi) memset(f->map + (lo - f->map_off), 0, hi - lo);
}

/* Makes the file writable up to file_tail() + need without a syscall under
 * the spinlock: allocates, maps a new window and faults it in with the
 * spinlock released, then installs the window under it. grow_mu orders this
 * against other growers, the flusher's trim and close. Returns 0, ESHUTDOWN
 * if the file was closed or given up (or cut since cuts), SP_E_CAP if the
 * room would pass its cap (nothing is grown), or an errno value. Spinlock
 * not held. */
SP_PRIVATE int file_make_room(sp_file *f, size_t need, size_t unit, long cuts) {
  lock_mu(f->grow_mu, SP_LOCK_GROW);
  lock_acquire(f->lock);
  sp_file now = *f;
  /* A trim between the ask and now: the pass that asked has ended, and
   * between passes the file holds its records only. A forked child's file
   * was released (fd -1). */
  int gone = f->closed || f->fd < 0 || (cuts >= 0 && f->cuts != (unsigned)cuts);
  lock_release(f->lock);
  if (gone || file_tail_room(&now, need)) {
    lock_mu_release(f->grow_mu, SP_LOCK_GROW);
    return gone ? ESHUTDOWN : 0;
  }
  /* Writers may append meanwhile, inside the room they had: the window and
   * allocation made here start from this snapshot's tail, and allocation is
   * rounded up to SP_FILE_GROW, room for the writers that follow. */
  size_t target = file_tail(&now) + need;
  if (now.cap && target > now.cap) {
    lock_mu_release(f->grow_mu, SP_LOCK_GROW);
    return SP_E_CAP;
  }
  size_t size = now.size;
  int e = 0;
  if (target > size) {
    size_t want = (target + SP_FILE_GROW - 1) / SP_FILE_GROW * SP_FILE_GROW;
    if (now.cap && want > now.cap) want = now.cap; /* >= target */
    e = file_allocate(now.fd, size, want);
    if (err_no_space(e)) {
      /* a nearly full disk: the pages this room needs, not a whole step,
       * so that records fill what space there is before they stop */
      size_t least = (target + g_page - 1) / g_page * g_page;
      if (least < want && file_allocate(now.fd, size, least) == 0) e = 0, want = least;
    }
    if (!e) size = want;
  }
  char *map = NULL; /* a new window, or NULL to keep the current one */
  size_t map_off = now.map_off, map_len = now.map_len;
  if (!e && (!now.map || now.len < now.map_off || target > now.map_off + now.map_len)) {
    map_off = now.len / g_page * g_page;
    map_len = SP_MAP_WINDOW;
    if (target - map_off > map_len) map_len = (target - map_off + g_page - 1) / g_page * g_page;
    void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, now.fd, (off_t)map_off);
    if (m == MAP_FAILED) {
      e = errno ? errno : EIO;
    } else {
      map = m;
      /* no readahead on faults: the pages ahead are written, not read */
      madvise(m, map_len, MADV_RANDOM);
    }
  }
  size_t faulted = now.faulted, no_populate = (size_t)now.no_populate;
  if (!e) {
    char *base = map ? map : now.map;
    size_t from = map ? map_off : (now.faulted > map_off ? now.faulted : map_off);
    size_t to = (target + unit - 1) / unit * unit;
    if (to > size) to = size;
    if (to > map_off + map_len) to = map_off + map_len;
    /* one call per unit instead of a page fault per 4 KiB; best effort
     * (old kernels: ordinary page faults it is) */
    if (to > from && !no_populate &&
        madvise(base + (from - map_off), to - from, MADV_POPULATE_WRITE) != 0)
      no_populate = 1;
    if (map || to > faulted) faulted = to;
  }
  char *old = NULL;
  size_t old_len = 0;
  lock_acquire(f->lock);
  if (f->closed || f->fd != now.fd) { /* closed meanwhile: ours to undo */
    old = map;
    old_len = map_len;
    e = e ? e : ESHUTDOWN;
  } else {
    if (size > f->size) f->size = size;
    if (!e) {
      if (map) {
        old = f->map;
        old_len = f->map_len;
        f->map = map;
        f->map_off = map_off;
        f->map_len = map_len;
      }
      f->faulted = faulted;
      f->no_populate = (int)no_populate;
    }
  }
  lock_release(f->lock);
  if (old) munmap(old, old_len); /* nobody writes through it any more */
  lock_mu_release(f->grow_mu, SP_LOCK_GROW);
  return e;
}

/* Between passes the file holds exactly its records (JSON Lines readers
 * reject a NUL tail). Forgets the allocated tail, which the caller then cuts
 * with ftruncate outside the spinlock: pages past the new end are dropped,
 * so they are allocated and faulted in again before the next write. Returns
 * the length to cut to, or -1 if there is nothing to cut. Spinlock held. */
SP_PRIVATE off_t file_forget_tail(sp_file *f) {
  if (f->fd < 0 || f->size <= f->len) return -1;
  f->size = f->len;
  f->cuts++;
  f->cut_len = f->len;
  if (f->faulted > f->len) f->faulted = f->len / g_page * g_page;
  f->spec_owner = NULL;
  f->spec_end = f->len;
  return (off_t)f->len;
}

SP_PRIVATE void file_release(sp_file *f) {
  if (f->map) munmap(f->map, f->map_len);
  f->map = NULL;
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
}

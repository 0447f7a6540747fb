/* sp_file.c -- The records file: a MAP_SHARED window over a file grown ahead of the writer.
 * Part of the core amalgamation (sp_core.c includes every part, in order,
 * after sp_internal.h): not compiled on its own. */

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

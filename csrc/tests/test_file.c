/* Unit tests of the records file layer alone (sp_file.c): built with no
 * other part of the core than the lock order's check (sp_lock.c), so that a
 * file that reached into the profiler again would not link. Built and run
 * by tests/test_core_c.py, plain and under the sanitizers. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/sp_internal.h"
#include "check.h"

static char g_path[256];
static sp_lock g_lock;
static pthread_mutex_t g_grow_mu = PTHREAD_MUTEX_INITIALIZER;

/* An open file as its owner sets one up: its lock, its growth lock, a
 * descriptor, nothing written. */
static sp_file fresh(void) {
  sp_file f;
  memset(&f, 0, sizeof f);
  f.lock = &g_lock;
  f.grow_mu = &g_grow_mu;
  f.fd = open(g_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  return f;
}

static size_t size_on_disk(void) {
  struct stat st;
  return stat(g_path, &st) == 0 ? (size_t)st.st_size : (size_t)-1;
}

/* Appends a record as a writer does: under the lock, inside the room made. */
static int append(sp_file *f, const char *s) {
  size_t n = strlen(s);
  lock_acquire(f->lock);
  int e = file_write_at(f, f->len, s, n);
  if (!e) f->len += n;
  lock_release(f->lock);
  return e;
}

static void test_room_is_made_before_a_write(void) {
  g_test = "room is made before a write";
  sp_file f = fresh();
  CHECK(f.fd >= 0);
  CHECK(append(&f, "{}\n") == ENOSPC); /* no room made: nothing written */
  CHECK(f.len == 0);
  CHECK(file_make_room(&f, 100, 4096, -1) == 0);
  CHECK(file_tail_room(&f, 100));
  CHECK(f.size >= 100 && size_on_disk() >= 100); /* allocated on disk */
  CHECK(append(&f, "{\"a\": 1}\n") == 0 && append(&f, "{\"b\": 2}\n") == 0);
  CHECK(memcmp(f.map, "{\"a\": 1}\n{\"b\": 2}\n", 18) == 0);
  file_release(&f);
  CHECK(f.fd == -1 && f.map == NULL);
  g_passed++;
}

static void test_a_cut_leaves_the_records_only(void) {
  g_test = "a cut leaves the records only";
  sp_file f = fresh();
  CHECK(file_make_room(&f, 64, 4096, -1) == 0 && append(&f, "{}\n") == 0);
  unsigned cuts = f.cuts;
  lock_acquire(f.lock);
  off_t cut = file_forget_tail(&f);
  lock_release(f.lock);
  CHECK(cut == 3 && ftruncate(f.fd, cut) == 0);
  CHECK(size_on_disk() == 3 && f.cuts == cuts + 1);
  lock_acquire(f.lock);
  CHECK(file_forget_tail(&f) == -1); /* nothing more to cut */
  lock_release(f.lock);
  /* room asked for before the cut is not made after it; room asked now is */
  CHECK(file_make_room(&f, 64, 4096, (long)cuts) == ESHUTDOWN);
  CHECK(file_make_room(&f, 64, 4096, (long)f.cuts) == 0 && append(&f, "{}\n") == 0);
  CHECK(memcmp(f.map, "{}\n{}\n", 6) == 0);
  file_release(&f);
  g_passed++;
}

static void test_a_closed_file_does_not_grow(void) {
  g_test = "a closed file does not grow";
  sp_file f = fresh();
  f.closed = 1;
  CHECK(file_make_room(&f, 64, 4096, -1) == ESHUTDOWN);
  CHECK(f.size == 0 && f.map == NULL && size_on_disk() == 0);
  f.closed = 0;
  file_release(&f); /* a forked child's: the descriptor let go of */
  CHECK(file_make_room(&f, 64, 4096, -1) == ESHUTDOWN);
  g_passed++;
}

static void test_big_records_cross_windows(void) {
  g_test = "big records cross windows";
  sp_file f = fresh();
  size_t n = SP_MAP_WINDOW + SP_MAP_WINDOW / 2;
  char *big = malloc(n + 1);
  CHECK(big != NULL);
  memset(big, 'x', n - 1);
  big[n - 1] = '\n';
  big[n] = 0;
  CHECK(file_make_room(&f, 4, 4096, -1) == 0 && append(&f, "{}\n") == 0);
  CHECK(file_make_room(&f, n, 4096, -1) == 0 && append(&f, big) == 0);
  CHECK(file_make_room(&f, n, 4096, -1) == 0 && append(&f, big) == 0);
  CHECK(f.len == 3 + 2 * n && f.map_off > 0); /* a later window */
  lock_acquire(f.lock);
  off_t cut = file_forget_tail(&f);
  lock_release(f.lock);
  CHECK(ftruncate(f.fd, cut) == 0 && size_on_disk() == f.len);
  file_release(&f);
  FILE *in = fopen(g_path, "rb");
  CHECK(in != NULL);
  int lines = 0, c, bad = 0;
  size_t at = 0;
  while ((c = fgetc(in)) != EOF) {
    if (c == '\n') lines++;
    else if (at >= 3 && c != 'x') bad++;
    at++;
  }
  fclose(in);
  free(big);
  CHECK(lines == 3 && bad == 0 && at == 3 + 2 * n);
  g_passed++;
}

int main(void) {
  char dir[] = "/tmp/sp_test_file_XXXXXX";
  if (!mkdtemp(dir)) return 2;
  snprintf(g_path, sizeof g_path, "%s/records.jsonl", dir);
  atomic_flag_clear(&g_lock.f);
  file_init();
  test_room_is_made_before_a_write();
  test_a_cut_leaves_the_records_only();
  test_a_closed_file_does_not_grow();
  test_big_records_cross_windows();
  unlink(g_path);
  rmdir(dir);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}

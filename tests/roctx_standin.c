/* A stand-in for ROCm's libroctx64.so (tests/test_nvtx.py): its two range
 * functions, writing each push and pop to the file ROCTX_TEST_LOG names. */
#include <stdio.h>
#include <stdlib.h>

static FILE *log_file(void) {
  static FILE *f;
  if (!f) {
    const char *path = getenv("ROCTX_TEST_LOG");
    f = path ? fopen(path, "w") : NULL;
    if (f) setvbuf(f, NULL, _IOLBF, 0);
  }
  return f;
}

int roctxRangePushA(const char *message) {
  FILE *f = log_file();
  if (f) fprintf(f, "push %s\n", message);
  return 0;
}

int roctxRangePop(void) {
  FILE *f = log_file();
  if (f) fputs("pop\n", f);
  return 0;
}

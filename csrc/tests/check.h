/* The C unit tests' one assertion: CHECK fails the running test (g_test)
 * and returns from it; main prints "N passed, M failed", which
 * tests/test_core_c.py compares with the number of test functions. */
#ifndef SP_TESTS_CHECK_H
#define SP_TESTS_CHECK_H
#include <stdio.h>

static int g_failed, g_passed;
static const char *g_test;
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "FAIL %s:%d [%s]: %s\n", __FILE__, __LINE__, g_test, \
              #cond);                                                      \
      g_failed++;                                                          \
      return;                                                              \
    }                                                                      \
  } while (0)

#endif

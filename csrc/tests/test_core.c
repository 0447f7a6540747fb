/* Unit tests of the C core alone: no Python, no torch. Built and run by
 * tests/test_core_c.py, plain and under AddressSanitizer + UBSan. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../core/sp_core.h"
#include "check.h"

static char g_dir[256];

static char *path_in(const char *name) {
  static char buf[4][512];
  static int k;
  char *b = buf[k++ & 3];
  snprintf(b, 512, "%s/%s", g_dir, name);
  return b;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  if (len) *len = got;
  return s;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static const char *const kDtypes[] = {"torch.uint8", "torch.int8", "torch.int16",
                                      "torch.int32", "torch.int64", "torch.float16",
                                      "torch.float32"};
static int g_mm, g_zeros, g_cat;

static void setup_ops(void) {
  static const char *const mm_args[] = {"self", "mat2"};
  static const char *const zeros_args[] = {"size", "dtype"};
  static const char *const cat_args[] = {"tensors", "dim"};
  sp_set_dtype_names(kDtypes, 7);
  if (sp_op_intern(&g_mm, "aten::mm", "", 2, mm_args, 1, &g_mm) != SP_OK ||
      sp_op_intern(&g_zeros, "aten::zeros", "", 2, zeros_args, 1, &g_zeros) != SP_OK ||
      sp_op_intern(&g_cat, "my_ns::cat", "out", 2, cat_args, 1, &g_cat) != SP_OK)
    abort();
}

static void enc_mm(sp_thread *t, int64_t m, int64_t k, int64_t n, int dtype) {
  sp_enc *in = &sp_thread_enc(t)->in, *out = &sp_thread_enc(t)->out;
  int64_t a[2] = {m, k}, b[2] = {k, n}, c[2] = {m, n};
  sp_enc_reset(in);
  sp_enc_push(in, g_mm);
  sp_enc_push(in, SP_ENC_TENSOR);
  sp_enc_push(in, 0);
  sp_enc_tensor(in, dtype, 2, a);
  sp_enc_push(in, SP_ENC_TENSOR);
  sp_enc_push(in, 1);
  sp_enc_tensor(in, dtype, 2, b);
  sp_enc_reset(out);
  sp_enc_push(out, SP_ENC_TENSOR);
  sp_enc_tensor(out, dtype, 2, c);
}

static sp_profiler *open_prof(const char *name, int dedupe, long long skip, long long limit,
                              const char *phases) {
  sp_config cfg = {path_in(name), 3, skip, limit, dedupe, phases, 0, NULL, 0, 0, 0, 0, NULL};
  sp_profiler *p = NULL;
  int rc = sp_open(&cfg, &p);
  if (rc != SP_OK) {
    fprintf(stderr, "sp_open: %s\n", sp_errmsg(p));
    sp_free(p);
    return NULL;
  }
  return p;
}

static void test_summary_path(void) {
  g_test = __func__;
  char b[64];
  CHECK(sp_summary_path_for("shapes.jsonl", b, sizeof b) == SP_OK);
  CHECK(strcmp(b, "shapes_summary.json") == 0);
  CHECK(sp_summary_path_for("a/b.json", b, sizeof b) == SP_OK && strcmp(b, "a/b_summary.json") == 0);
  CHECK(sp_summary_path_for("a.d/x", b, sizeof b) == SP_OK && strcmp(b, "a.d/x_summary.json") == 0);
  CHECK(sp_summary_path_for("dir/.jsonl", b, sizeof b) == SP_OK &&
        strcmp(b, "dir/.jsonl_summary.json") == 0);
  CHECK(sp_summary_path_for("x.jsonl", b, 4) == SP_ERROR);
  g_passed++;
}

static void test_open_errors(void) {
  g_test = __func__;
  sp_config cfg = {"/nonexistent/dir/x.jsonl", 0, 0, 0, 0, NULL, 0, NULL, 0, 0, 0, 0, NULL};
  sp_profiler *p = NULL;
  CHECK(sp_open(&cfg, &p) == SP_IOERR);
  CHECK(strstr(sp_errmsg(p), "/nonexistent/dir/x.jsonl") != NULL);
  sp_free(p);
  sp_config bad = {"x", 0, -1, 0, 0, NULL, 0, NULL, 0, 0, 0, 0, NULL};
  CHECK(sp_open(&bad, &p) == SP_ERROR);
  sp_free(p);
  g_passed++;
}

static void test_records_and_summary(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("a.jsonl", 0, 1, 2, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  int logged[4];
  for (int pass = 0; pass < 4; pass++) {
    logged[pass] = sp_pass_begin(p, pass == 2 ? "decode" : NULL);
    enc_mm(t, 4, 8, 2, 6);
    if (sp_call_begin(p, t)) sp_call_end(p, t);
    sp_pass_end(p);
  }
  CHECK(!logged[0] && logged[1] && logged[2] && !logged[3]);
  CHECK(sp_close(p) == SP_OK);
  CHECK(sp_close(p) == SP_OK); /* idempotent */
  char *s = slurp(path_in("a.jsonl"), NULL);
  CHECK(s);
  const char *want =
      "{\"call_id\": 1, \"forward_pass\": 2, \"operation\": \"aten.mm.default\", \"inputs\": "
      "{\"self\": {\"shape\": [4, 8], \"dtype\": \"torch.float32\"}, \"mat2\": {\"shape\": [8, 2], "
      "\"dtype\": \"torch.float32\"}}, \"outputs\": {\"shape\": [4, 2], \"dtype\": "
      "\"torch.float32\"}}\n"
      "{\"call_id\": 2, \"forward_pass\": 3, \"phase\": \"decode\", \"operation\": "
      "\"aten.mm.default\", \"inputs\": {\"self\": {\"shape\": [4, 8], \"dtype\": "
      "\"torch.float32\"}, \"mat2\": {\"shape\": [8, 2], \"dtype\": \"torch.float32\"}}, "
      "\"outputs\": {\"shape\": [4, 2], \"dtype\": \"torch.float32\"}}\n";
  CHECK(strcmp(s, want) == 0);
  free(s);
  s = slurp(path_in("a_summary.json"), NULL);
  CHECK(s);
  CHECK(strstr(s, "\"rank\": 3,") && strstr(s, "\"total_operations\": 2,") &&
        strstr(s, "\"forward_passes\": 4,") && strstr(s, "\"unique_operations\": 1,") &&
        strstr(s, "\"aten.mm.default\": 2\n") &&
        /* two signatures: the same call in a pass of another phase */
        strstr(s, "\"unique_op_signatures\": 2,") &&
        strstr(s, "\"dedupe_enabled\": false"));
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

/* The caller's worker object goes into the summary as given, after the
 * rank, and the dispatch key as a string after it, every time the summary
 * is written; neither without one. */
static void test_worker_in_summary(void) {
  g_test = __func__;
  const char *worker = "{\"tp_rank\": 1, \"tp_size\": 2, \"pp_rank\": 0, \"pp_size\": 2, \"host\": \"n\\u00e9\"}";
  char buf[sizeof "{}" + 200];
  char key[] = "Fake\"";
  snprintf(buf, sizeof buf, "%s", worker);
  sp_config cfg = {path_in("w.jsonl"), 1, 0, 0, 0, NULL, 0, buf, 0, 0, 0, 0, key};
  sp_profiler *p = NULL;
  CHECK(sp_open(&cfg, &p) == SP_OK);
  memset(buf, 'x', strlen(buf)); /* copied at open: the caller's buffers are its own */
  memset(key, 'x', strlen(key));
  sp_thread *t = sp_thread_new();
  sp_pass_begin(p, NULL);
  enc_mm(t, 4, 8, 2, 6);
  if (sp_call_begin(p, t)) sp_call_end(p, t);
  sp_pass_end(p);
  CHECK(sp_close(p) == SP_OK);
  char *s = slurp(path_in("w_summary.json"), NULL);
  char want[300];
  snprintf(want, sizeof want, "{\n  \"rank\": 1,\n  \"worker\": %s,\n  \"dispatch_key\": \"Fake\\\"\",\n  \"total_operations\": 1,", worker);
  CHECK(s && strncmp(s, want, strlen(want)) == 0);
  free(s);
  sp_free(p);
  p = open_prof("nw.jsonl", 0, 0, 0, NULL);
  CHECK(p && sp_close(p) == SP_OK);
  s = slurp(path_in("nw_summary.json"), NULL);
  CHECK(s && !strstr(s, "worker") && !strstr(s, "dispatch_key"));
  free(s);
  sp_free(p);
  sp_thread_free(t);
  g_passed++;
}

/* *out: the records file (freed by the caller) of one call that raised
 * type(msg), both given with lengths; NULL if that went wrong. */
static void written_failure(char **out, const char *file, const char *type, size_t type_n,
                            const char *msg, size_t msg_n) {
  *out = NULL;
  sp_profiler *p = open_prof(file, 0, 0, 0, NULL);
  sp_thread *t = sp_thread_new();
  sp_pass_begin(p, NULL);
  enc_mm(t, 4, 8, 2, 6);
  CHECK(sp_call_begin(p, t));
  sp_call_fail_n(p, t, type, type_n, msg, msg_n);
  sp_pass_end(p);
  CHECK(sp_close(p) == SP_OK);
  sp_thread_free(t);
  sp_free(p);
  *out = slurp(path_in(file), NULL);
}

static void fail_with_lengths(void) {
  char *s;
  written_failure(&s, "n.jsonl", "\xc3\x89lan", 5, "a\0b \xed\xb2\x80 \xed\xa0\x80", 11);
  /* surrogates are not UTF-8: U+FFFD per maximal subpart (here each byte) */
  CHECK(s && strstr(s, "\"error_type\": \"\xc3\x89lan\", \"error_message\": "
                       "\"a\\u0000b \\ufffd\\ufffd\\ufffd \\ufffd\\ufffd\\ufffd\"}"));
  free(s);
}

/* Invalid UTF-8 in a message: only valid Unicode is written, one U+FFFD
 * per maximal subpart. The oracle is the Unicode Standard's own example
 * (ch. 3, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 reads
 * a FFFD FFFD FFFD b FFFD c FFFD FFFD d), plus a sequence cut by the
 * message's end and the valid 1- to 4-byte forms kept as they are. */
static void fail_with_invalid_utf8(void) {
  static const char msg[] = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"
                            " \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xe2\x82";
  char *s;
  written_failure(&s, "u.jsonl", "E", 1, msg, sizeof msg - 1);
  CHECK(s && strstr(s, "\"error_message\": \"a\\ufffd\\ufffd\\ufffdb\\ufffdc\\ufffd\\ufffdd"
                       " \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \\ufffd\"}"));
  free(s);
}

static void test_dedupe_errors_and_escaping(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("d.jsonl", 1, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  sp_pass_begin(p, NULL);
  for (int i = 0; i < 5; i++) {
    enc_mm(t, 4, 8, 2, 6);
    if (sp_call_begin(p, t)) sp_call_end(p, t);
  }
  enc_mm(t, 4, 8, 3, 5); /* another signature */
  if (sp_call_begin(p, t)) sp_call_end(p, t);
  enc_mm(t, 4, 8, 2, 6); /* a repeat that raised: always written */
  CHECK(sp_call_begin(p, t));
  sp_call_fail(p, t, "RuntimeError", "bad \"shape\"\n\ttab \x01 caf\xc3\xa9 \xff end");
  sp_pass_end(p);
  sp_stats st;
  sp_get_stats(p, &st);
  CHECK(st.records == 3 && st.dedupe_skipped == 4 && st.signatures == 2 && st.errors == 1);
  CHECK(sp_close(p) == SP_OK);
  char *s = slurp(path_in("d.jsonl"), NULL);
  CHECK(s && count_lines(s) == 3);
  CHECK(strstr(s, "\"error\": {\"error_type\": \"RuntimeError\", \"error_message\": "
                  "\"bad \\\"shape\\\"\\n\\ttab \\u0001 caf\xc3\xa9 \\ufffd end\"}}\n"));
  CHECK(strstr(s, "\"outputs\": null, \"error\""));
  free(s);
  /* with lengths: a NUL byte, and lone surrogates as "surrogatepass" bytes */
  fail_with_lengths();
  fail_with_invalid_utf8();
  s = slurp(path_in("d_summary.json"), NULL);
  CHECK(strstr(s, "\"aten.mm.default\": 7") && strstr(s, "\"dedupe_skipped_count\": 4,") &&
        strstr(s, "\"error_count\": 1,"));
  /* the first record stands for itself and the 4 repeats not written; the
   * other signature's and the error's records stand for one call each */
  CHECK(strstr(s, "\"signature_counts\": {\"1\": 5},"));
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

/* A tensor of every rank from 0 to 9 (ranks up to 4 take the straight
 * copy and compare, the rest the loop), encoded after a head and checked in
 * place. The oracle: the words spelled out one by one here, and a change to
 * any one size, the dtype or the rank, which must not compare equal. */
static void test_tensor_words_every_rank(void) {
  g_test = __func__;
  sp_enc e = {0};
  const int64_t head[2] = {SP_ENC_TENSOR, 3};
  for (int ndim = 0; ndim <= 9; ndim++) {
    int64_t sizes[9] = {0}, changed[9];
    for (int d = 0; d < ndim; d++) sizes[d] = 100 + 7 * d;
    sp_enc_reset(&e);
    sp_enc_push(&e, 42); /* something before it */
    sp_enc_tensor_after(&e, head, 2, 6, ndim, sizes);
    CHECK(e.n == (size_t)(1 + 2 + 2 + ndim) && e.tensors == 1);
    CHECK(e.w[0] == 42 && e.w[1] == SP_ENC_TENSOR && e.w[2] == 3 && e.w[3] == 6 && e.w[4] == ndim);
    for (int d = 0; d < ndim; d++) CHECK(e.w[5 + d] == 100 + 7 * d);
    size_t at = 1;
    CHECK(sp_enc_tensor_is(e.w, e.n, &at, head, 2, 6, ndim, sizes) && at == e.n);
    for (int d = 0; d < ndim; d++) {
      memcpy(changed, sizes, sizeof changed);
      changed[d]++;
      at = 1;
      CHECK(!sp_enc_tensor_is(e.w, e.n, &at, head, 2, 6, ndim, changed) && at == 1);
    }
    at = 1;
    CHECK(!sp_enc_tensor_is(e.w, e.n, &at, head, 2, 7, ndim, sizes));
    if (ndim > 0) CHECK(!sp_enc_tensor_is(e.w, e.n, &at, head, 2, 6, ndim - 1, sizes));
    CHECK(!sp_enc_tensor_is(e.w, e.n - (ndim > 0), &at, head, 2, 6, ndim, sizes) || ndim == 0);
  }
  free(e.w);
  g_passed++;
}

/* A repeat's expected outputs, compared in place by the caller
 * (sp_enc_tensor_is, sp_call_repeat), must be exactly what the writer
 * (sp_enc_tensor_after) puts down for its signature; the record guessed
 * before hashing (the one that followed the previous call last time) must
 * not be taken for another key, or for another phase's. The oracle: the
 * counts each call must have. */
static void test_repeats_compared_in_place(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("inplace.jsonl", 1, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  struct sp_thread_public *pub = sp_thread_enc(t);
  const int64_t head[1] = {SP_ENC_TENSOR}, c[2] = {4, 6}, other[2] = {4, 7};
  for (int pass = 0; pass < 2; pass++) {
    CHECK(sp_pass_begin(p, pass ? "decode" : "prefill") == 1);
    for (int i = 0; i < 3; i++) {
      enc_mm(t, 4, 8, 6, 6);
      /* a new phase is a new signature, though the operator's latest
       * signature has the same inputs */
      CHECK(sp_call_begin(p, t) == (i ? SP_CALL_COUNTED : SP_CALL_RECORDING));
      if (!i) {
        sp_call_end(p, t);
      } else {
        /* the expected words are the writer's, for these outputs only */
        size_t at = 0;
        CHECK(pub->expect_n == pub->out.n &&
              memcmp(pub->expect, pub->out.w, pub->out.n * sizeof *pub->out.w) == 0);
        CHECK(sp_enc_tensor_is(pub->expect, pub->expect_n, &at, head, 1, 6, 2, c) && at == pub->expect_n);
        at = 0;
        CHECK(!sp_enc_tensor_is(pub->expect, pub->expect_n, &at, head, 1, 6, 2, other) && at == 0);
        CHECK(!sp_enc_tensor_is(pub->expect, pub->expect_n, &at, head, 1, 5, 2, c));
        CHECK(!sp_enc_tensor_is(pub->expect, pub->expect_n, &at, head, 1, 6, 1, c));
        CHECK(!sp_enc_tensor_is(pub->expect, pub->expect_n - 1, &at, head, 1, 6, 2, c));
        sp_call_repeat(p, t);
      }
      enc_mm(t, 4, 8, 3, 6); /* another key, guessed wrong the first time */
      CHECK(sp_call_begin(p, t) == (i ? SP_CALL_COUNTED : SP_CALL_RECORDING));
      sp_call_end(p, t);
    }
    for (int i = 0; i < 2; i++) { /* the record that follows this key is its own */
      enc_mm(t, 4, 8, 6, 6);
      CHECK(sp_call_begin(p, t) == SP_CALL_COUNTED);
      sp_call_end(p, t);
    }
    sp_pass_end(p); /* ...and the next pass begins with this key */
  }
  sp_stats st;
  sp_get_stats(p, &st);
  CHECK(st.records == 4 && st.dedupe_skipped == 12 && st.signatures == 4);
  CHECK(sp_close(p) == SP_OK);
  char *s = slurp(path_in("inplace_summary.json"), NULL);
  CHECK(s && strstr(s, "\"signature_counts\": {\"1\": 5, \"2\": 3, \"3\": 5, \"4\": 3},"));
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

static void test_lists_outputs_and_no_tensor_calls(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("l.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  sp_enc *in = &sp_thread_enc(t)->in, *out = &sp_thread_enc(t)->out;
  sp_pass_begin(p, NULL);
  int64_t s3[1] = {3};
  /* my_ns.cat.out(tensors=[t, None], dim) -> Tensor[] [t] */
  sp_enc_reset(in);
  sp_enc_push(in, g_cat);
  sp_enc_push(in, SP_ENC_LIST);
  sp_enc_push(in, 0);
  sp_enc_push(in, 2);
  sp_enc_tensor(in, 4, 1, s3);
  sp_enc_push(in, -1);
  sp_enc_reset(out);
  sp_enc_push(out, SP_ENC_LIST);
  sp_enc_push(out, 1);
  sp_enc_tensor(out, 99, 1, s3); /* a dtype without a name */
  CHECK(sp_call_begin(p, t));
  sp_call_end(p, t);
  /* zeros() returning nothing tensor-like: not logged, and its speculative
   * half line is blanked */
  sp_enc_reset(in);
  sp_enc_push(in, g_zeros);
  sp_enc_reset(out);
  sp_enc_push(out, SP_ENC_NONE);
  CHECK(sp_call_begin(p, t));
  sp_call_end(p, t);
  sp_pass_end(p);
  sp_close(p);
  char *s = slurp(path_in("l.jsonl"), NULL);
  CHECK(s && count_lines(s) == 1);
  CHECK(strstr(s, "\"operation\": \"my_ns.cat.out\", \"inputs\": {\"tensors\": [{\"shape\": [3], "
                  "\"dtype\": \"torch.int64\"}, null]}, \"outputs\": [{\"shape\": [3], "
                  "\"dtype\": \"torch.unknown99\"}]}\n"));
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

static void push2(sp_enc *e, int64_t tag, int64_t arg) {
  sp_enc_push(e, tag);
  sp_enc_push(e, arg);
}

static int64_t bits_of(double d) {
  int64_t b;
  memcpy(&b, &d, sizeof b);
  return b;
}

/* Arguments (SP_LOGGING_ARGS): strided tensors and every value kind. */
static void test_arguments(void) {
  g_test = __func__;
  static const char *const args[] = {"self", "i", "f", "b", "n", "is", "fs", "bs", "c",
                                     "s", "dt", "lay", "dev", "gen"};
  static int key;
  int op = -1;
  CHECK(sp_op_intern(&key, "aten::every", "kind", 14, args, 1, &op) == SP_OK);
  static const char *const devices[] = {"cpu", "cuda"};
  static const char *const layouts[] = {"torch.strided"};
  CHECK(sp_set_names(SP_NAMES_DEVICE, devices, 2) == SP_OK);
  CHECK(sp_set_names(SP_NAMES_LAYOUT, layouts, 1) == SP_OK);
  CHECK(sp_set_names(SP_NAMES_N, devices, 2) == SP_ERROR);
  sp_config cfg = {path_in("args.jsonl"), 0, 0, 0, 1, NULL, 1, NULL, 0, 0, 0, 0, NULL};
  sp_profiler *p = NULL;
  CHECK(sp_open(&cfg, &p) == SP_OK);
  sp_thread *t = sp_thread_new();
  sp_enc *in = &sp_thread_enc(t)->in, *out = &sp_thread_enc(t)->out;
  CHECK(sp_pass_begin(p, NULL) == 1);
  CHECK(sp_logging(p) == (1 | SP_LOGGING_ARGS));
  for (int round = 0; round < 2; round++) {
    int64_t size[2] = {2, 3}, stride[2] = {1, 2};
    sp_enc_reset(in);
    sp_enc_push(in, op);
    push2(in, SP_ENC_TENSOR, 0);
    sp_enc_strided(in, 6, 2, size, stride, 5, 1, 0);
    push2(in, SP_ENC_INT, 1);
    sp_enc_push(in, -7);
    push2(in, SP_ENC_FLOAT, 2);
    sp_enc_push(in, bits_of(round ? 0.25 : 0.1));
    push2(in, SP_ENC_BOOL, 3);
    sp_enc_push(in, 1);
    push2(in, SP_ENC_NULL, 4);
    push2(in, SP_ENC_INTS, 5);
    sp_enc_push(in, 2);
    sp_enc_push(in, 4);
    sp_enc_push(in, 5);
    push2(in, SP_ENC_FLOATS, 6);
    sp_enc_push(in, 3);
    sp_enc_push(in, bits_of(1.0));
    sp_enc_push(in, bits_of(1.0 / 0.0));
    sp_enc_push(in, bits_of(0.0 / 0.0));
    push2(in, SP_ENC_BOOLS, 7);
    sp_enc_push(in, 2);
    sp_enc_push(in, 1);
    sp_enc_push(in, 0);
    push2(in, SP_ENC_COMPLEX, 8);
    sp_enc_push(in, bits_of(1.5));
    sp_enc_push(in, bits_of(-2.0));
    push2(in, SP_ENC_STR, 9);
    sp_enc_bytes(in, "ta\"nh-and-more", 14);
    push2(in, SP_ENC_DTYPE, 10);
    sp_enc_push(in, 5);
    push2(in, SP_ENC_NAME, 11);
    sp_enc_push(in, SP_NAMES_LAYOUT);
    sp_enc_push(in, 0);
    push2(in, SP_ENC_DEVICE, 12);
    sp_enc_push(in, 1);
    sp_enc_push(in, 3);
    push2(in, SP_ENC_OPAQUE, 13);
    sp_enc_bytes(in, "Generator", 9);
    sp_enc_reset(out);
    sp_enc_push(out, SP_ENC_TENSOR);
    sp_enc_tensor(out, 6, 2, size);
    /* the float argument differs, and is not part of the signature: a
     * repeat of the first, counted (deduplication on) */
    CHECK(sp_call_begin(p, t) == (round ? SP_CALL_COUNTED : SP_CALL_RECORDING));
    sp_call_end(p, t);
  }
  sp_pass_end(p);
  sp_stats st;
  sp_get_stats(p, &st);
  CHECK(st.records == 1 && st.dedupe_skipped == 1 && st.signatures == 1);
  sp_close(p);
  char *s = slurp(path_in("args.jsonl"), NULL);
  CHECK(s && count_lines(s) == 1);
  CHECK(strstr(s, "\"inputs\": {\"self\": {\"shape\": [2, 3], \"dtype\": \"torch.float32\", "
                  "\"stride\": [1, 2], \"offset\": 5, \"device\": \"cuda:0\"}}, \"args\": {"
                  "\"i\": -7, \"f\": 0.1, \"b\": true, \"n\": null, \"is\": [4, 5], "
                  "\"fs\": [1.0, \"inf\", \"nan\"], \"bs\": [true, false], "
                  "\"c\": {\"real\": 1.5, \"imag\": -2.0}, \"s\": \"ta\\\"nh-and-more\", "
                  "\"dt\": \"torch.float16\", \"lay\": \"torch.strided\", \"dev\": \"cuda:3\", "
                  "\"gen\": {\"unsupported\": \"Generator\"}}, \"outputs\": {\"shape\": [2, 3], "
                  "\"dtype\": \"torch.float32\"}}\n"));
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

/* Graph captures: forward_pass 0 and the key on the records, signatures
 * per graph, no pass counted, replays counted in logged passes only, and
 * per real size when the caller knows it. */
static void test_graphs(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("graphs.jsonl", 1, 1, 1, "decode");
  CHECK(p);
  sp_thread *t = sp_thread_new();
  CHECK(sp_graph_begin(p, "prefill", 1) == 0); /* filtered out by phase */
  sp_pass_end(p);
  for (int key = 1; key <= 2; key++) {
    CHECK(sp_graph_begin(p, "decode", key) == 1);
    for (int k = 0; k < 3; k++) { /* same shapes in both graphs */
      enc_mm(t, 4, 5, 6, 6);
      CHECK(sp_call_begin(p, t));
      sp_call_end(p, t);
    }
    CHECK(sp_graph_replay(p, key, -1, 1) == 0); /* not inside a capture */
    sp_pass_end(p);
    CHECK(sp_pass_reopen(p) == 0); /* a capture is not reopened */
    sp_pass_end(p);
  }
  CHECK(sp_graph_replay(p, 1, 1, 5) == 0); /* no pass open */
  CHECK(sp_pass_begin(p, "decode") == 0); /* warm-up: skip_warmup=1 */
  CHECK(sp_graph_replay(p, 1, 1, 5) == 0);
  sp_pass_end(p);
  CHECK(sp_pass_begin(p, "decode") == 1);
  CHECK(sp_graph_replay(p, 1, -1, 5) == 1);
  CHECK(sp_graph_replay(p, 2, 1, 1) == 1);
  CHECK(sp_graph_replay(p, 2, -1, 1) == 1); /* its real size not known */
  CHECK(sp_graph_replay(p, 9, 7, 1) == 1); /* never captured: still counted */
  CHECK(sp_graph_replay(p, 9, 3, 2) == 1); /* sizes in order whatever comes first */
  CHECK(sp_graph_replay(p, 5, 5, 1) == 1); /* a key between two others */
  sp_pass_end(p);
  CHECK(sp_pass_begin(p, "decode") == 0); /* past log_n_passes=1 */
  CHECK(sp_graph_replay(p, 1, 1, 5) == 0);
  sp_pass_end(p);
  sp_stats st;
  sp_get_stats(p, &st);
  CHECK(st.passes == 3 && st.logged_passes == 1 && st.records == 2 && st.dedupe_skipped == 4);
  sp_close(p);
  char *s = slurp(path_in("graphs.jsonl"), NULL);
  CHECK(s && count_lines(s) == 2);
  CHECK(strstr(s, "{\"call_id\": 1, \"forward_pass\": 0, \"phase\": \"decode\", \"graph\": 1, "
                  "\"operation\": \"aten.mm.default\""));
  CHECK(strstr(s, "{\"call_id\": 2, \"forward_pass\": 0, \"phase\": \"decode\", \"graph\": 2, "));
  free(s);
  s = slurp(path_in("graphs_summary.json"), NULL);
  CHECK(s && strstr(s, "\"signature_counts\": {\"1\": 3, \"2\": 3}"));
  CHECK(strstr(s, "\"graphs\": {\n    \"1\": {\"captures\": 1, \"replays\": 5},\n"
                  "    \"2\": {\"captures\": 1, \"replays\": 2, \"real_sizes\": {\"1\": 1}},\n"
                  "    \"5\": {\"captures\": 0, \"replays\": 1, \"real_sizes\": {\"5\": 1}},\n"
                  "    \"9\": {\"captures\": 0, \"replays\": 3, \"real_sizes\": {\"3\": 2, \"7\": 1}}\n  }"));
  CHECK(strstr(s, "\"phase_passes\": {\n    \"decode\": 1\n  }"));
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

/* A kept capture adopted into another profiler: its records under the
 * adopter's call ids, its counts in the adopter's summary as if recorded
 * there; refused outside a logged forward pass, for a phase filtered out,
 * for another dedupe setting, or text that is not the keeper's records. */
static void test_graph_adopt(void) {
  g_test = __func__;
  sp_thread *t = sp_thread_new();
  sp_profiler *kept = open_prof("kept.jsonl", 1, 0, 0, NULL);
  CHECK(kept && sp_graph_begin(kept, "decode", 8) == 1);
  for (int k = 0; k < 3; k++) { /* one signature, three calls */
    enc_mm(t, 8, 5, 6, 6);
    CHECK(sp_call_begin(kept, t));
    sp_call_end(kept, t);
  }
  enc_mm(t, 8, 6, 2, 6);
  CHECK(sp_call_begin(kept, t));
  sp_call_end(kept, t);
  sp_pass_end(kept);
  sp_close(kept);
  size_t n;
  char *text = slurp(path_in("kept.jsonl"), &n);
  CHECK(text && count_lines(text) == 2);

  sp_profiler *p = open_prof("adopter.jsonl", 1, 0, 0, "decode");
  sp_profiler *other = open_prof("other.jsonl", 0, 0, 0, NULL);
  CHECK(p && other);
  CHECK(sp_graph_adopt(p, kept, text, n) == 0); /* no pass open */
  CHECK(sp_pass_begin(other, "decode") == 1);
  CHECK(sp_graph_adopt(other, kept, text, n) == 0); /* it deduplicates, kept did */
  sp_pass_end(other);
  CHECK(sp_pass_begin(p, "extend") == 0);
  CHECK(sp_graph_adopt(p, kept, text, n) == 0); /* not a logged pass */
  sp_pass_end(p);
  CHECK(sp_graph_known(p, 8, "decode") == 1);
  CHECK(sp_graph_known(p, 3, "extend") == 0); /* filtered out: not listed */
  CHECK(sp_pass_begin(p, "decode") == 1);
  enc_mm(t, 1, 2, 3, 6); /* the pass's own call first */
  CHECK(sp_call_begin(p, t));
  sp_call_end(p, t);
  CHECK(sp_graph_adopt(p, kept, text, n - 1) == 0); /* a cut line */
  CHECK(sp_graph_adopt(p, kept, "{\"id\": 1}\n", 10) == 0);
  CHECK(sp_graph_replay(p, 8, -1, 4) == 1);
  CHECK(sp_graph_adopt(p, kept, text, n) == 1);
  sp_pass_end(p);
  sp_stats st;
  sp_get_stats(p, &st);
  CHECK(st.records == 3 && st.dedupe_skipped == 2 && st.signatures == 3);
  sp_close(p);
  char *s = slurp(path_in("adopter.jsonl"), NULL);
  CHECK(s && count_lines(s) == 3);
  CHECK(strstr(s, "{\"call_id\": 2, \"forward_pass\": 0, \"phase\": \"decode\", \"graph\": 8, "
                  "\"operation\": \"aten.mm.default\", \"inputs\": {\"self\": {\"shape\": [8, 5]"));
  CHECK(strstr(s, "{\"call_id\": 3, \"forward_pass\": 0, \"phase\": \"decode\", \"graph\": 8, "));
  free(s);
  s = slurp(path_in("adopter_summary.json"), NULL);
  CHECK(s && strstr(s, "\"operation_counts\": {\n    \"aten.mm.default\": 5\n  }"));
  CHECK(strstr(s, "\"signature_counts\": {\"2\": 3}"));
  CHECK(strstr(s, "\"phase_operations\": {\n    \"decode\": 5\n  }"));
  CHECK(strstr(s, "\"graphs\": {\n    \"8\": {\"captures\": 1, \"replays\": 4}\n  }"));
  free(s);
  free(text);
  sp_thread_free(t);
  sp_free(p);
  sp_free(other);
  sp_free(kept);
  g_passed++;
}

/* eager_sizes: the logged passes that replayed no graph, by phase and the
 * batch size given; a replaying pass, a capture, an unlogged pass, a size
 * given twice and a reopened pass are not counted (again). */
static void test_eager_sizes(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("sizes.jsonl", 0, 1, 0, NULL);
  CHECK(p);
  CHECK(sp_pass_size(p, 4) == 0); /* no pass open */
  CHECK(sp_pass_begin(p, "decode") == 0); /* warm-up */
  CHECK(sp_pass_size(p, 4) == 0);
  sp_pass_end(p);
  for (int i = 0; i < 3; i++) {
    CHECK(sp_pass_begin(p, "decode") == 1);
    CHECK(sp_pass_size(p, i < 2 ? 4 : 3) == 1);
    sp_pass_end(p);
  }
  CHECK(sp_pass_reopen(p) == 1); /* the last pass again: not counted twice */
  sp_pass_end(p);
  CHECK(sp_pass_begin(p, "decode") == 1);
  CHECK(sp_pass_size(p, 8) == 1);
  CHECK(sp_graph_replay(p, 8, 8, 1) == 1); /* a graph ran it: not eager */
  sp_pass_end(p);
  CHECK(sp_pass_begin(p, "extend") == 1);
  CHECK(sp_pass_size(p, 2) == 1 && sp_pass_size(p, 5) == 1); /* the last one given counts */
  sp_pass_end(p);
  CHECK(sp_pass_begin(p, "extend") == 1); /* no size given: not counted */
  sp_pass_end(p);
  CHECK(sp_graph_begin(p, "decode", 1) == 1);
  CHECK(sp_pass_size(p, 1) == 0); /* a capture is not a pass */
  sp_pass_end(p);
  CHECK(sp_pass_begin(p, NULL) == 1); /* no phase label: not in eager_sizes */
  CHECK(sp_pass_size(p, 6) == 1);
  sp_pass_end(p);
  sp_close(p);
  CHECK(sp_pass_size(p, 4) == 0);
  char *s = slurp(path_in("sizes_summary.json"), NULL);
  CHECK(s && strstr(s, ",\n  \"eager_sizes\": {\n    \"decode\": {\"3\": 1, \"4\": 2},\n"
                       "    \"extend\": {\"5\": 1}\n  },\n"));
  free(s);
  sp_free(p);
  g_passed++;
}

static void test_inputs_on_disk_before_the_call_returns(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("c.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  sp_pass_begin(p, NULL);
  enc_mm(t, 5, 6, 7, 6);
  CHECK(sp_call_begin(p, t));
  /* Another reader sees the half record now (what a crash would leave). */
  char *s = slurp(path_in("c.jsonl"), NULL);
  CHECK(s && strncmp(s, "{\"call_id\": 1, \"forward_pass\": 1, \"operation\": \"aten.mm.default\", "
                        "\"inputs\": {\"self\": {\"shape\": [5, 6]", 90) == 0);
  CHECK(!strchr(s, '\n'));
  free(s);
  sp_call_end(p, t);
  sp_pass_end(p);
  sp_close(p);
  size_t n;
  s = slurp(path_in("c.jsonl"), &n);
  CHECK(count_lines(s) == 1 && strlen(s) == n); /* trimmed: no zero tail */
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

static void test_big_records_cross_map_windows(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("big.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  sp_enc *in = &sp_thread_enc(t)->in, *out = &sp_thread_enc(t)->out;
  sp_pass_begin(p, NULL);
  int64_t sz[4] = {1000, 2000, 3000, 4000};
  const int records = 90, tensors = 10000;
  for (int r = 0; r < records; r++) {
    sp_enc_reset(in);
    sp_enc_push(in, g_cat);
    sp_enc_push(in, SP_ENC_LIST);
    sp_enc_push(in, 0);
    sp_enc_push(in, tensors);
    for (int i = 0; i < tensors; i++) sp_enc_tensor(in, 6, 4, sz);
    sp_enc_reset(out);
    sp_enc_push(out, SP_ENC_TENSOR);
    sp_enc_tensor(out, 6, 4, sz);
    CHECK(!in->failed && sp_call_begin(p, t));
    sp_call_end(p, t);
  }
  sp_pass_end(p);
  sp_stats st;
  sp_get_stats(p, &st);
  CHECK(st.records == records && st.bytes > (40 << 20)); /* crosses a 32 MiB window */
  sp_close(p);
  size_t n;
  char *s = slurp(path_in("big.jsonl"), &n);
  CHECK(s && (long long)n == st.bytes && count_lines(s) == records && strlen(s) == n);
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

static void test_repeats_written_from_cache(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("rc.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  sp_pass_begin(p, "decode");
  for (int i = 0; i < 3; i++) {
    enc_mm(t, 4, 8, 2, 6);
    CHECK(sp_call_begin(p, t) == SP_CALL_RECORDING);
    sp_call_end(p, t);
  }
  /* same inputs, other outputs (think nonzero): not the cached text */
  enc_mm(t, 4, 8, 2, 6);
  int64_t odd[2] = {9, 9};
  sp_enc *out = &sp_thread_enc(t)->out;
  sp_enc_reset(out);
  sp_enc_push(out, SP_ENC_TENSOR);
  sp_enc_tensor(out, 6, 2, odd);
  CHECK(sp_call_begin(p, t) == SP_CALL_RECORDING);
  sp_call_end(p, t);
  sp_pass_end(p);
  sp_stats st;
  sp_get_stats(p, &st);
  CHECK(st.records == 4 && st.signatures == 2); /* other outputs: another signature */
  sp_close(p);
  char *s = slurp(path_in("rc.jsonl"), NULL);
  CHECK(s && count_lines(s) == 4);
  const char *body = ", \"forward_pass\": 1, \"phase\": \"decode\", \"operation\": \"aten.mm.default\", "
                     "\"inputs\": {\"self\": {\"shape\": [4, 8], \"dtype\": \"torch.float32\"}, "
                     "\"mat2\": {\"shape\": [8, 2], \"dtype\": \"torch.float32\"}}, \"outputs\": ";
  char want[2048];
  snprintf(want, sizeof want,
           "{\"call_id\": 1%s%s}\n{\"call_id\": 2%s%s}\n{\"call_id\": 3%s%s}\n{\"call_id\": 4%s%s}\n",
           body, "{\"shape\": [4, 2], \"dtype\": \"torch.float32\"}", body,
           "{\"shape\": [4, 2], \"dtype\": \"torch.float32\"}", body,
           "{\"shape\": [4, 2], \"dtype\": \"torch.float32\"}", body,
           "{\"shape\": [9, 9], \"dtype\": \"torch.float32\"}");
  CHECK(strcmp(s, want) == 0);
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

static void test_phase_filter(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("ph.jsonl", 0, 0, 2, "decode,extend");
  CHECK(p);
  const char *phases[] = {"prefill", "decode", NULL, "extend", "decode"};
  int got[5];
  for (int i = 0; i < 5; i++) {
    got[i] = sp_pass_begin(p, phases[i]);
    sp_pass_end(p);
  }
  CHECK(!got[0] && got[1] && !got[2] && got[3] && !got[4]); /* limit counts logged passes */
  sp_close(p);
  sp_free(p);
  g_passed++;
}

static void test_op_forget_invalidates_caches(void) {
  g_test = __func__;
  static int key;
  static const char *const args[] = {"x"};
  sp_thread *t = sp_thread_new();
  int id = -1, again = -2;
  CHECK(sp_op_intern(&key, "ns::first", "", 1, args, 1, &id) == SP_OK && id >= 0);
  CHECK(sp_op_intern(&key, "ns::first", "", 1, args, 1, &again) == SP_OK && again == id);
  CHECK(sp_op_intern(NULL, "ns::first", "", 1, args, 1, &again) == SP_ERROR);
  sp_thread_cache_op(t, &key, id);
  CHECK(sp_thread_op(t, &key) == id);
  sp_op_forget(&key);
  CHECK(sp_thread_op(t, &key) == -1);
  int id2 = -1;
  CHECK(sp_op_intern(&key, "ns::second", "", 1, args, 1, &id2) == SP_OK);
  CHECK(id2 >= 0 && id2 != id);
  sp_thread_free(t);
  g_passed++;
}

static void test_forked_child_keeps_hands_off(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("f.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  sp_pass_begin(p, NULL);
  enc_mm(t, 2, 2, 2, 6);
  if (sp_call_begin(p, t)) sp_call_end(p, t);
  pid_t pid = fork();
  if (pid == 0) {
    int bad = sp_logging(p) || sp_pass_begin(p, NULL) || sp_call_begin(p, t);
    sp_close(p);
    _exit(bad ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(sp_logging(p));
  enc_mm(t, 3, 3, 3, 6);
  if (sp_call_begin(p, t)) sp_call_end(p, t);
  sp_pass_end(p);
  CHECK(sp_close(p) == SP_OK);
  char *s = slurp(path_in("f.jsonl"), NULL);
  CHECK(s && count_lines(s) == 2 && strstr(s, "\"call_id\": 2"));
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

/* Threads writing at once: every record whole, call_ids 1..N without a gap
 * or a repeat, while the file grows under them (room is made outside the
 * spinlock, see file_make_room). Run under TSan by make test-core. */
enum { N_WRITERS = 4, N_CALLS = 3000 };
static sp_profiler *g_shared;

static void *writer(void *arg) {
  int64_t id = (int64_t)(intptr_t)arg;
  sp_thread *t = sp_thread_new();
  for (int i = 0; i < N_CALLS; i++) {
    enc_mm(t, 1 + id, 1000 + i, 7 + i % 5, 6); /* ~150 bytes each, all distinct */
    if (sp_call_begin(g_shared, t)) sp_call_end(g_shared, t);
  }
  sp_thread_free(t);
  return NULL;
}

static void test_threads_write_at_once(void) {
  g_test = __func__;
  g_shared = open_prof("threads.jsonl", 0, 0, 0, NULL);
  CHECK(g_shared);
  CHECK(sp_pass_begin(g_shared, NULL) == 1);
  pthread_t th[N_WRITERS];
  for (intptr_t i = 0; i < N_WRITERS; i++) pthread_create(&th[i], NULL, writer, (void *)i);
  for (int i = 0; i < N_WRITERS; i++) pthread_join(th[i], NULL);
  sp_pass_end(g_shared);
  CHECK(sp_close(g_shared) == SP_OK);
  size_t len = 0;
  char *s = slurp(path_in("threads.jsonl"), &len);
  CHECK(s && count_lines(s) == N_WRITERS * N_CALLS);
  static char seen[N_WRITERS * N_CALLS + 1];
  int ok = 1;
  for (char *line = s; line && *line; ) {
    long id = strtol(line + strlen("{\"call_id\": "), NULL, 10);
    char *end = strchr(line, '\n');
    if (strncmp(line, "{\"call_id\": ", 12) != 0 || id < 1 || id > N_WRITERS * N_CALLS ||
        seen[id] || !end || end[-1] != '}')
      ok = 0;
    else
      seen[id] = 1;
    line = end ? end + 1 : NULL;
  }
  CHECK(ok);
  free(s);
  sp_free(g_shared);
  g_passed++;
}

/* Test builds (-DSP_DEBUG) assert the calling protocol: an end without a
 * begin, or a second begin before the first call's end, aborts. */
static void test_protocol_is_checked(void) {
  g_test = __func__;
#ifdef SP_DEBUG
  for (int misuse = 0; misuse < 2; misuse++) {
    pid_t pid = fork();
    if (pid == 0) { /* a profiler of the child's own: a parent's is off here */
      sp_profiler *p = open_prof(misuse ? "proto1.jsonl" : "proto0.jsonl", 0, 0, 0, NULL);
      sp_thread *t = sp_thread_new();
      if (!p || sp_pass_begin(p, NULL) != 1) _exit(3);
      enc_mm(t, 4, 8, 2, 6);
      if (misuse == 0) {
        sp_call_end(p, t); /* no begin */
      } else {
        if (!sp_call_begin(p, t)) _exit(4);
        sp_call_begin(p, t); /* no end for the first */
      }
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  }
#endif
  g_passed++;
}

/* A record written over another call's speculative prefix (the tail holds
 * one; a call without a prefix of its own writes its whole record there)
 * must not be blanked when that other call is then dropped: the zeros that
 * blank a dropped prefix once landed on the record in front of them. */
static void test_dropped_prefix_never_blanks_a_record(void) {
  g_test = __func__;
  static int ka, kb;
  char longname[240];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  memcpy(longname, "aten::", 6);
  int op_a = -1, op_b = -1;
  CHECK(sp_op_intern(&ka, longname, "", 0, NULL, 1, &op_a) == SP_OK);
  CHECK(sp_op_intern(&kb, "aten::b", "", 0, NULL, 1, &op_b) == SP_OK);
  sp_profiler *p = open_prof("blank.jsonl", 1, 0, 0, NULL);
  CHECK(p);
  sp_thread *ta = sp_thread_new(), *tb = sp_thread_new();
  sp_enc *ain = &sp_thread_enc(ta)->in, *aout = &sp_thread_enc(ta)->out;
  sp_enc *bin = &sp_thread_enc(tb)->in, *bout = &sp_thread_enc(tb)->out;
  CHECK(sp_pass_begin(p, NULL) == 1);
  for (int64_t n = 2; n <= 3; n++) { /* b() -> [2], then, with a's prefix at the tail, b() -> [3] */
    if (n == 3) {
      sp_enc_reset(ain);
      sp_enc_push(ain, op_a);
      CHECK(sp_call_begin(p, ta) == SP_CALL_RECORDING); /* its long prefix goes to the tail */
    }
    sp_enc_reset(bin);
    sp_enc_push(bin, op_b);
    sp_enc_reset(bout);
    sp_enc_push(bout, SP_ENC_TENSOR);
    sp_enc_tensor(bout, 6, 1, &n);
    CHECK(sp_call_begin(p, tb) == SP_CALL_RECORDING);
    sp_call_end(p, tb); /* the second: other outputs, written whole over a's prefix */
  }
  sp_enc_reset(aout);
  sp_enc_push(aout, SP_ENC_NONE); /* a returns no tensor: not logged, its prefix dropped */
  sp_call_end(p, ta);
  sp_pass_end(p);
  sp_close(p);
  size_t len = 0;
  char *s = slurp(path_in("blank.jsonl"), &len);
  CHECK(s && strlen(s) == len && count_lines(s) == 2); /* no NUL byte anywhere */
  CHECK(strstr(s, "\"outputs\": {\"shape\": [3]"));
  free(s);
  sp_thread_free(ta);
  sp_thread_free(tb);
  sp_free(p);
  g_passed++;
}

/* A crash on a thread whose call's inputs another thread's record wrote
 * over: the dying thread's call is put back as the cut last line. */
static sp_thread *g_dying;
static sp_thread *dying_thread(void) { return g_dying; }

static void test_dying_threads_call_is_put_back(void) {
  g_test = __func__;
  static int ka, kb;
  int op_a = -1, op_b = -1;
  CHECK(sp_op_intern(&ka, "aten::crashes", "", 0, NULL, 1, &op_a) == SP_OK);
  CHECK(sp_op_intern(&kb, "aten::other", "", 0, NULL, 1, &op_b) == SP_OK);
  sp_profiler *p = open_prof("rescue.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *ta = sp_thread_new(), *tb = sp_thread_new();
  CHECK(sp_pass_begin(p, NULL) == 1);
  sp_enc *ain = &sp_thread_enc(ta)->in, *bin = &sp_thread_enc(tb)->in, *bout = &sp_thread_enc(tb)->out;
  sp_enc_reset(ain);
  sp_enc_push(ain, op_a);
  CHECK(sp_call_begin(p, ta) == SP_CALL_RECORDING); /* a's inputs at the tail; its kernel runs */
  sp_enc_reset(bin);
  sp_enc_push(bin, op_b);
  sp_enc_reset(bout);
  int64_t n = 4;
  sp_enc_push(bout, SP_ENC_TENSOR);
  sp_enc_tensor(bout, 6, 1, &n);
  CHECK(sp_call_begin(p, tb) == SP_CALL_RECORDING);
  sp_call_end(p, tb); /* b's record takes the place of a's inputs */
  g_dying = ta;
  sp_set_thread_getter(dying_thread);
  sp_emergency_close_all(); /* a's thread dies in its kernel */
  sp_set_thread_getter(NULL);
  size_t len = 0;
  char *s = slurp(path_in("rescue.jsonl"), &len);
  CHECK(s && strlen(s) == len && count_lines(s) == 1);
  CHECK(strstr(s, "{\"call_id\": 1, \"forward_pass\": 1, \"operation\": \"aten.other.default\""));
  const char *cut = strchr(s, '\n') + 1; /* the last line, cut: a's inputs under the next id */
  CHECK(strcmp(cut, "{\"call_id\": 2, \"forward_pass\": 1, \"operation\": \"aten.crashes.default\", "
                    "\"inputs\": {}") == 0);
  free(s);
  sp_thread_free(ta);
  sp_thread_free(tb);
  sp_free(p);
  g_passed++;
}

/* The tail holds one in-flight prefix at a time: a shorter prefix written
 * over a longer one must not leave its end behind (a SIGKILL then showed it
 * as a line of its own after a whole record), nor a dying thread's put-back
 * inputs (glued to the cut line). */
static void test_shorter_prefix_leaves_no_tail_behind(void) {
  g_test = __func__;
  static int kl, ks, kd;
  char longname[240];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  memcpy(longname, "aten::", 6);
  int op_l = -1, op_s = -1, op_d = -1;
  CHECK(sp_op_intern(&kl, longname, "", 0, NULL, 1, &op_l) == SP_OK);
  CHECK(sp_op_intern(&ks, "aten::s", "", 0, NULL, 1, &op_s) == SP_OK);
  CHECK(sp_op_intern(&kd, "aten::dies", "", 0, NULL, 1, &op_d) == SP_OK);
  sp_profiler *p = open_prof("tail.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *tl = sp_thread_new(), *ts = sp_thread_new(), *td = sp_thread_new();
  CHECK(sp_pass_begin(p, NULL) == 1);
  sp_enc_reset(&sp_thread_enc(tl)->in);
  sp_enc_push(&sp_thread_enc(tl)->in, op_l);
  sp_enc_reset(&sp_thread_enc(ts)->in);
  sp_enc_push(&sp_thread_enc(ts)->in, op_s);
  sp_enc *sout = &sp_thread_enc(ts)->out;
  sp_enc_reset(sout);
  int64_t n = 4;
  sp_enc_push(sout, SP_ENC_TENSOR);
  sp_enc_tensor(sout, 6, 1, &n);
  CHECK(sp_call_begin(p, tl) == SP_CALL_RECORDING); /* the long prefix at the tail */
  CHECK(sp_call_begin(p, ts) == SP_CALL_RECORDING); /* the short one over it */
  char *s = slurp(path_in("tail.jsonl"), NULL);     /* what a kill now leaves */
  CHECK(s && strcmp(s, "{\"call_id\": 1, \"forward_pass\": 1, \"operation\": \"aten.s.default\", "
                       "\"inputs\": {}") == 0);
  free(s);
  sp_call_end(p, ts);
  s = slurp(path_in("tail.jsonl"), NULL);
  CHECK(s && count_lines(s) == 1 && s[strlen(s) - 1] == '\n');
  free(s);
  /* a dying thread's short inputs put back over the long prefix */
  sp_enc_reset(&sp_thread_enc(td)->in);
  sp_enc_push(&sp_thread_enc(td)->in, op_d);
  sp_enc_reset(&sp_thread_enc(tl)->out);
  sp_enc_push(&sp_thread_enc(tl)->out, SP_ENC_NONE);
  sp_call_end(p, tl); /* not logged: no tensor */
  CHECK(sp_call_begin(p, td) == SP_CALL_RECORDING);
  CHECK(sp_call_begin(p, tl) == SP_CALL_RECORDING); /* over td's inputs */
  g_dying = td;
  sp_set_thread_getter(dying_thread);
  sp_emergency_close_all();
  sp_set_thread_getter(NULL);
  s = slurp(path_in("tail.jsonl"), NULL);
  const char *cut = s ? strchr(s, '\n') : NULL;
  CHECK(cut && strcmp(cut + 1, "{\"call_id\": 2, \"forward_pass\": 1, \"operation\": "
                               "\"aten.dies.default\", \"inputs\": {}") == 0);
  free(s);
  sp_thread_free(tl);
  sp_thread_free(ts);
  sp_thread_free(td);
  sp_free(p);
  g_passed++;
}

/* sp_pass_end_nowait ends a pass only when that needs no waiting: not
 * before the flusher thread runs (the end may have to start it); then it
 * does what sp_pass_end does. */
static void test_pass_end_nowait(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("nowait.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  CHECK(sp_pass_begin(p, NULL) == 1);
  CHECK(sp_logging(p));
  for (int i = 0; i < 2 && !sp_pass_end_nowait(p); i++) sp_pass_end(p); /* starts the flusher */
  CHECK(!sp_logging(p));
  CHECK(sp_pass_begin(p, NULL) == 1);
  CHECK(sp_pass_end_nowait(p) == 1); /* the flusher runs, the lock is free */
  CHECK(!sp_logging(p));
  sp_stats st;
  sp_get_stats(p, &st);
  CHECK(st.passes == 2 && st.logged_passes == 2);
  CHECK(sp_close(p) == SP_OK);
  sp_free(p);
  g_passed++;
}

/* The summary names the forward passes open when it is written (a crash's
 * interrupted passes): each thread's, not an ended one, not a capture. */
struct open_pass_arg {
  sp_profiler *p;
  pthread_barrier_t *begun, *closed;
};

static void *open_pass_thread(void *arg) {
  struct open_pass_arg *a = arg;
  sp_pass_begin(a->p, "other");
  pthread_barrier_wait(a->begun);
  pthread_barrier_wait(a->closed);
  sp_pass_end(a->p);
  return NULL;
}

static void test_open_passes(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("open.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  CHECK(sp_pass_begin(p, NULL)); /* pass 1, ended */
  sp_pass_end(p);
  CHECK(sp_graph_begin(p, "decode", 8)); /* a capture: not named */
  sp_pass_end(p);
  CHECK(sp_pass_begin(p, NULL)); /* pass 2, open on this thread */
  pthread_barrier_t begun, closed;
  pthread_barrier_init(&begun, NULL, 2);
  pthread_barrier_init(&closed, NULL, 2);
  struct open_pass_arg a = {p, &begun, &closed};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, open_pass_thread, &a) == 0);
  pthread_barrier_wait(&begun); /* pass 3, open on the other thread */
  CHECK(sp_close(p) == SP_OK);
  pthread_barrier_wait(&closed);
  pthread_join(th, NULL);
  pthread_barrier_destroy(&begun);
  pthread_barrier_destroy(&closed);
  char *s = slurp(path_in("open_summary.json"), NULL);
  CHECK(s && strstr(s, "\"open_passes\": [2, 3]"));
  free(s);
  sp_pass_end(p);
  sp_free(p);
  /* all ended: none named */
  p = open_prof("open2.jsonl", 0, 0, 0, NULL);
  CHECK(p && sp_pass_begin(p, NULL));
  sp_pass_end(p);
  CHECK(sp_close(p) == SP_OK);
  s = slurp(path_in("open2_summary.json"), NULL);
  CHECK(s && strstr(s, "\"open_passes\": []"));
  free(s);
  sp_free(p);
  g_passed++;
}

/* ---- which profiler a thread's calls go to: its pass, else the inherited ---- */
struct follow_arg {
  sp_profiler *p;
  pthread_barrier_t *begun, *closed;
  sp_profiler *seen; /* sp_pass_current after another thread closed p */
  int mode;
};

static void *follow_thread(void *arg) {
  struct follow_arg *a = arg;
  sp_pass_begin(a->p, NULL);
  pthread_barrier_wait(a->begun);
  pthread_barrier_wait(a->closed);
  a->seen = sp_pass_current(&a->mode);
  sp_pass_end(a->p);
  return NULL;
}

static void test_thread_profiler_follows_the_pass(void) {
  g_test = __func__;
  int mode = -1;
  CHECK(sp_pass_current(&mode) == NULL && mode == 0);
  sp_profiler *p = open_prof("follow.jsonl", 0, 1, 0, NULL);
  sp_profiler *q = open_prof("follow_q.jsonl", 0, 1, 0, NULL);
  CHECK(p && q);
  CHECK(!sp_pass_begin(p, NULL)); /* warm-up: this thread's pass, not logged */
  CHECK(sp_pass_current(&mode) == p && mode == 0);
  CHECK(sp_pass_target(&mode) == p && mode == 0);
  sp_pass_end(p);
  CHECK(sp_pass_current(&mode) == NULL && mode == 0);
  pthread_barrier_t begun, closed;
  pthread_barrier_init(&begun, NULL, 2);
  pthread_barrier_init(&closed, NULL, 2);
  struct follow_arg a = {p, &begun, &closed, NULL, -1};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, follow_thread, &a) == 0);
  pthread_barrier_wait(&begun); /* pass 2, logged, open on the other thread */
  /* no pass here: a thread that inherited the key goes to p's */
  CHECK(sp_pass_current(&mode) == NULL && mode == 0);
  CHECK(sp_pass_target(&mode) == p && mode == 1);
  CHECK(sp_pass_begin(p, NULL)); /* pass 3, logged, here */
  CHECK(sp_pass_current(&mode) == p && mode == 1);
  /* q's warm-up ends p's pass here: nothing goes to p, though it logs */
  CHECK(!sp_pass_begin(q, NULL));
  CHECK(sp_logging(p));
  CHECK(sp_pass_target(&mode) == q && mode == 0);
  sp_pass_end(q);
  CHECK(sp_pass_target(&mode) == p && mode == 1);
  CHECK(sp_close(p) == SP_OK); /* the other thread's pass is still open */
  CHECK(sp_pass_target(&mode) == NULL && mode == 0); /* p is inherited no more */
  pthread_barrier_wait(&closed);
  pthread_join(th, NULL);
  pthread_barrier_destroy(&begun);
  pthread_barrier_destroy(&closed);
  CHECK(a.seen == p && a.mode == 0); /* its pass holds p, which logs no more */
  sp_free(p);
  sp_free(q);
  g_passed++;
}

/* ---- the grower: room made ahead of the writers, off their thread ---- */
static long long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Polls cond(arg) for up to 10 s: what another thread does soon. */
static int soon(int (*cond)(const void *), const void *arg) {
  for (int i = 0; i < 10000; i++) {
    if (cond(arg)) return 1;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return cond(arg);
}

static int grower_idle(const void *arg) {
  (void)arg;
  return !sp_debug_grower_busy();
}

struct exact_arg {
  const char *path;
  sp_profiler *p;
};

static int file_exact(const void *arg) { /* the file holds its records only */
  const struct exact_arg *a = arg;
  sp_stats st;
  sp_get_stats(a->p, &st);
  return file_size(a->path) == st.bytes;
}

/* Records until the file holds at least kib KiB: past SP_STREAM (256 KiB)
 * since the last cut, so that a writer asks the grower for room. */
static long long record_kib(sp_profiler *p, sp_thread *t, long long kib) {
  sp_stats st;
  do {
    enc_mm(t, 5, 6, 7, 6);
    if (!sp_call_begin(p, t)) return -1; /* not logging: the caller's CHECK fails */
    sp_call_end(p, t);
    sp_get_stats(p, &st);
  } while (st.bytes < kib << 10);
  return st.bytes;
}

/* MADV_POPULATE_WRITE (Linux 5.14): without it nothing is faulted in ahead,
 * by the grower or anyone, and pages ahead are not resident. */
static int populate_supported(void) {
  int fd = open(path_in("populate"), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 0;
  long pg = sysconf(_SC_PAGESIZE);
  int ok = ftruncate(fd, pg) == 0;
  void *m = ok ? mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (m == MAP_FAILED) return 0;
  ok = madvise(m, (size_t)pg, 23 /* MADV_POPULATE_WRITE */) == 0;
  munmap(m, (size_t)pg);
  return ok;
}

/* Pages of path's [from, from + n) in the page cache: faulted in ahead. */
static long resident(const char *path, long long from, size_t n) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  long pg = sysconf(_SC_PAGESIZE);
  off_t off = (off_t)(from / pg * pg);
  void *m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, off);
  close(fd);
  if (m == MAP_FAILED) return -1;
  unsigned char vec[4096];
  long count = -1;
  if (n / (size_t)pg <= sizeof vec && mincore(m, n, vec) == 0) {
    count = 0;
    for (size_t i = 0; i < n / (size_t)pg; i++) count += vec[i] & 1;
  }
  munmap(m, n);
  return count;
}

/* 256 KiB past the records faulted in (always true without populate) */
#define AHEAD(path, bytes) \
  (!populate_supported() || resident(path, bytes, 256 << 10) == (256 << 10) / sysconf(_SC_PAGESIZE))

static void test_grower_makes_room_ahead(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("grow.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  sp_pass_begin(p, NULL);
  long long bytes = record_kib(p, t, 320); /* records stream: the writer asked for room */
  CHECK(bytes > 0 && soon(grower_idle, NULL));
  /* the 256 KiB past the records are faulted in (the writer alone: < 64 KiB) */
  CHECK(AHEAD(path_in("grow.jsonl"), bytes));
  sp_pass_end(p);
  sp_close(p);
  struct exact_arg a = {path_in("grow.jsonl"), p};
  CHECK(file_exact(&a));
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

/* An ask from a pass that has ended, served after the flusher cut the file
 * to its records, makes nothing: between passes the file holds its records
 * only. The next pass's ask is served. */
static void test_grower_never_grows_a_cut_file(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("cut.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  struct exact_arg a = {path_in("cut.jsonl"), p};
  sp_debug_hold_grower(1);
  sp_pass_begin(p, NULL);
  long long written = record_kib(p, t, 320); /* asks; the grower is held */
  int asked = sp_debug_grower_busy();
  sp_pass_end(p);
  int cut = soon(file_exact, &a); /* the flusher's cut */
  sp_debug_hold_grower(0);
  CHECK(written > 0 && asked && cut);
  CHECK(soon(grower_idle, NULL));
  CHECK(file_exact(&a));
  sp_stats st;
  sp_get_stats(p, &st);
  sp_pass_begin(p, NULL);
  long long bytes = record_kib(p, t, (st.bytes >> 10) + 320);
  CHECK(bytes > 0 && soon(grower_idle, NULL));
  CHECK(AHEAD(a.path, bytes));
  sp_pass_end(p);
  sp_close(p);
  CHECK(file_exact(&a));
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

/* The grower's queue holds a reference: a profiler closed and freed while
 * its ask waits is freed by the grower after (ASan checks the order). */
static void test_grower_outlives_a_freed_profiler(void) {
  g_test = __func__;
  sp_profiler *p = open_prof("freed.jsonl", 0, 0, 0, NULL);
  CHECK(p);
  sp_thread *t = sp_thread_new();
  sp_debug_hold_grower(1);
  sp_pass_begin(p, NULL);
  long long written = record_kib(p, t, 320);
  int asked = sp_debug_grower_busy();
  sp_pass_end(p);
  sp_stats st;
  sp_get_stats(p, &st);
  sp_close(p);
  sp_free(p);
  sp_debug_hold_grower(0);
  CHECK(written > 0 && asked && soon(grower_idle, NULL));
  size_t n;
  char *s = slurp(path_in("freed.jsonl"), &n);
  CHECK(s && count_lines(s) == st.records && (long long)strlen(s) == st.bytes && strlen(s) == n);
  free(s);
  sp_thread_free(t);
  g_passed++;
}

/* A timed profiler (sp_config.time): each record's own time, and with
 * dedupe each signature's count, total, min, median and max, from the
 * spans its callers measured (sp_call_span). */
/* Where the timed test's spans start (sp_clock_ns): after the profiler
 * opened, so that records' start_us = g_span_start - time_origin_ns. */
static int64_t g_span_start;

static void timed_call(sp_profiler *p, sp_thread *t, int64_t n, int64_t ns, int raise) {
  enc_mm(t, 4, 8, n, 6);
  int state = sp_call_begin(p, t);
  if (!state) return;
  sp_call_span(t, g_span_start, g_span_start + ns);
  if (raise) sp_call_fail(p, t, "RuntimeError", "no");
  else if (state == SP_CALL_COUNTED && n == 6) sp_call_repeat(p, t);
  else sp_call_end(p, t);
}

static void test_timed(void) {
  g_test = __func__;
  sp_config cfg = {path_in("timed.jsonl"), 0, 0, 0, 1, NULL, 0, NULL, 0, 0, 1, 0, NULL};
  sp_profiler *p = NULL;
  int64_t opening = sp_clock_ns();
  CHECK(sp_open(&cfg, &p) == SP_OK);
  g_span_start = sp_clock_ns() + 5000;
  sp_thread *t = sp_thread_new();
  CHECK(sp_pass_begin(p, NULL) == 1);
  CHECK(sp_logging(p) & SP_LOGGING_TIME);
  timed_call(p, t, 6, 1500, 0);  /* written: 1.500 us */
  timed_call(p, t, 6, 3000, 0);  /* repeats, in place (sp_call_repeat) */
  timed_call(p, t, 6, 2000, 0);
  timed_call(p, t, 6, 999, 0);
  timed_call(p, t, 6, 7000, 1);  /* raised: its own record, not the signature's */
  for (int64_t i = 1; i <= 1000; i++) timed_call(p, t, 3, i, 0); /* past the sample's 256 */
  enc_mm(t, 4, 8, 9, 6); /* no span and no end given: the core's clock, a time at least 0 */
  CHECK(sp_call_begin(p, t) == SP_CALL_RECORDING);
  sp_call_end(p, t);
  sp_pass_end(p);
  CHECK(sp_close(p) == SP_OK);
  char *s = slurp(path_in("timed.jsonl"), NULL);
  CHECK(s && count_lines(s) == 4);
  CHECK(strstr(s, "\"call_id\": 1,") && strstr(s, "\"time_us\": 1.500, \"outputs\": {\"shape\": [4, 6]"));
  /* the start, since the profiler opened: the summary's origin plus it is the span's start */
  const char *st = strstr(s, "\"start_us\": ");
  CHECK(st && strstr(st, ", \"time_us\": 1.500,") == strchr(st, ',') );
  double start_us = st ? atof(st + strlen("\"start_us\": ")) : -1;
  CHECK(strstr(s, "\"time_us\": 7.000, \"outputs\": null, \"error\""));
  CHECK(strstr(s, "\"time_us\": 0.001, \"outputs\": {\"shape\": [4, 3]"));
  free(s);
  s = slurp(path_in("timed_summary.json"), NULL);
  CHECK(s && strstr(s, "\"timed\": true"));
  const char *o = strstr(s, "\"time_origin_ns\": ");
  long long origin = o ? atoll(o + strlen("\"time_origin_ns\": ")) : 0;
  CHECK(origin >= opening && origin <= g_span_start);
  CHECK(llabs((long long)(start_us * 1000 + 0.5) + origin - g_span_start) == 0);
  /* 1.5, 3, 2, 0.999: the median of an even count is the two middles' mean */
  CHECK(strstr(s, "\"1\": {\"count\": 4, \"total_us\": 7.499, \"min_us\": 0.999, \"median_us\": 1.750, "
                  "\"max_us\": 3.000}"));
  /* 1..1000 ns: count, total, min and max exact; the median of a uniform sample of 256 */
  const char *q = strstr(s, "\"3\": {\"count\": 1000, \"total_us\": 500.500, \"min_us\": 0.001, \"median_us\": 0.");
  CHECK(q && strstr(q, "\"max_us\": 1.000}"));
  int med = atoi(q + strlen("\"3\": {\"count\": 1000, \"total_us\": 500.500, \"min_us\": 0.001, \"median_us\": 0."));
  CHECK(med > 400 && med < 600);
  CHECK(strstr(s, "\"signature_times\"") && !strstr(s, "\"2\": {\"count\"")); /* the error: none */
  free(s);
  sp_thread_free(t);
  sp_free(p);
  p = open_prof("untimed.jsonl", 1, 0, 0, NULL);
  CHECK(p);
  t = sp_thread_new();
  CHECK(sp_pass_begin(p, NULL) == 1 && !(sp_logging(p) & SP_LOGGING_TIME));
  timed_call(p, t, 6, 1500, 0);
  sp_pass_end(p);
  CHECK(sp_close(p) == SP_OK);
  s = slurp(path_in("untimed.jsonl"), NULL);
  CHECK(s && !strstr(s, "time_us") && !strstr(s, "start_us"));
  free(s);
  s = slurp(path_in("untimed_summary.json"), NULL);
  CHECK(s && strstr(s, "\"timed\": false") && !strstr(s, "signature_times") && !strstr(s, "time_origin"));
  free(s);
  sp_thread_free(t);
  sp_free(p);
  g_passed++;
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "%s", "/tmp/sp_core_test_XXXXXX");
  if (!mkdtemp(g_dir)) return 2;
  setup_ops();
  test_summary_path();
  test_open_errors();
  test_records_and_summary();
  test_worker_in_summary();
  test_dedupe_errors_and_escaping();
  test_tensor_words_every_rank();
  test_repeats_compared_in_place();
  test_timed();
  test_lists_outputs_and_no_tensor_calls();
  test_arguments();
  test_dropped_prefix_never_blanks_a_record();
  test_graphs();
  test_graph_adopt();
  test_eager_sizes();
  test_inputs_on_disk_before_the_call_returns();
  test_big_records_cross_map_windows();
  test_repeats_written_from_cache();
  test_phase_filter();
  test_op_forget_invalidates_caches();
  test_forked_child_keeps_hands_off();
  test_protocol_is_checked();
  test_threads_write_at_once();
  test_open_passes();
  test_thread_profiler_follows_the_pass();
  test_dying_threads_call_is_put_back();
  test_shorter_prefix_leaves_no_tail_behind();
  test_pass_end_nowait();
  test_grower_makes_room_ahead();
  test_grower_never_grows_a_cut_file();
  test_grower_outlives_a_freed_profiler();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (!getenv("KEEP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}

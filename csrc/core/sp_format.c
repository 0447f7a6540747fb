/* sp_format.c -- Records as text: a call's inputs, arguments and outputs,
 * from their encoding (sp_enc) to the JSON line of FORMAT.md.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h" /* first: it sets the feature macros sp_core.h needs */

#include <math.h>

/* Records are formatted with a raw cursor into a buffer reserved once per
 * record: the bound below covers any encoding (each int64 word formats to at
 * most 20 digits plus separators; a tensor's words also carry its tail). */

static size_t enc_bound(const sp_enc *e) {
  return e->n * (44 + registry_dtype_tail_max()) + 64;
}

/* '"name"' of a device: "cuda:0", or "cpu" when index < 0. */
static char *put_device(char *o, int64_t type, int64_t index) {
  const char *name = registry_name_of(SP_NAMES_DEVICE, type);
  *o++ = '"';
  if (name) {
    size_t n = strlen(name);
    memcpy(o, name, n);
    o += n;
  } else {
    o = PUT_LIT(o, "device");
    o = text_put_i64(o, type);
  }
  if (index >= 0) {
    *o++ = ':';
    o = text_put_i64(o, index);
  }
  *o++ = '"';
  return o;
}

/* One <tensor> or <entry> at w[*i]. */
static char *put_tensor(char *o, const int64_t *w, size_t *i) {
  int64_t dtype = w[(*i)++];
  if (dtype < 0) return PUT_LIT(o, "null");
  int strided = (dtype & SP_ENC_STRIDED) != 0;
  dtype &= ~SP_ENC_STRIDED;
  int64_t ndim = w[(*i)++];
  o = PUT_LIT(o, "{\"shape\": [");
  for (int64_t d = 0; d < ndim; d++) {
    if (d) o = PUT_LIT(o, ", ");
    o = text_put_i64(o, w[(*i)++]);
  }
  o = registry_put_dtype_tail(o, dtype);
  if (!strided) return o;
  o--; /* reopen the object: '}' */
  o = PUT_LIT(o, ", \"stride\": [");
  for (int64_t d = 0; d < ndim; d++) {
    if (d) o = PUT_LIT(o, ", ");
    o = text_put_i64(o, w[(*i)++]);
  }
  o = PUT_LIT(o, "], \"offset\": ");
  o = text_put_i64(o, w[(*i)++]);
  o = PUT_LIT(o, ", \"device\": ");
  o = put_device(o, w[*i], w[*i + 1]);
  *i += 2;
  *o++ = '}';
  return o;
}

/* A double, so that json.loads gives it back exactly; JSON has no inf or
 * nan: those are the strings "inf", "-inf", "nan". */
static char *put_f64(char *o, int64_t bits) {
  double d;
  memcpy(&d, &bits, sizeof d);
  if (d != d) return PUT_LIT(o, "\"nan\"");
  if (d > 1.7976931348623157e308) return PUT_LIT(o, "\"inf\"");
  if (d < -1.7976931348623157e308) return PUT_LIT(o, "\"-inf\"");
  /* a whole number below 1e15 is its digits (as %.15g writes it), and
   * 0.0 keeps its sign: no printf */
  if (d > -1e15 && d < 1e15 && d == (double)(int64_t)d && (d != 0 || !signbit(d))) {
    o = text_put_i64(o, (int64_t)d);
    return PUT_LIT(o, ".0");
  }
  /* printf and strtod take about 0.3 us a value; a call's floats (scales,
   * epsilons) recur: the last few made on this thread are kept */
  static _Thread_local struct {
    int64_t bits;
    char n, text[31];
  } made[16];
  unsigned slot = (unsigned)(((uint64_t)bits * 0x9E3779B97F4A7C15ULL) >> 60);
  if (made[slot].n && made[slot].bits == bits) {
    memcpy(o, made[slot].text, (size_t)made[slot].n);
    return o + made[slot].n;
  }
  char tmp[40];
  int n = snprintf(tmp, sizeof tmp, "%.15g", d);
  if (strtod(tmp, NULL) != d) n = snprintf(tmp, sizeof tmp, "%.17g", d);
  int real = 0;
  for (int k = 0; k < n; k++) {
    if (tmp[k] == ',') tmp[k] = '.'; /* a locale's decimal comma */
    if (tmp[k] == '.' || tmp[k] == 'e') real = 1;
  }
  if (!real) {
    memcpy(tmp + n, ".0", 2);
    n += 2;
  }
  memcpy(o, tmp, (size_t)n);
  if (n <= (int)sizeof made[slot].text) {
    made[slot].bits = bits;
    made[slot].n = (char)n;
    memcpy(made[slot].text, tmp, (size_t)n);
  }
  return o + n;
}

/* n bytes at w, as a JSON string. Bytes are few (an argument's text). */
static char *put_bytes(char *o, const int64_t *w, int64_t n) {
  sp_buf b = {o, 0, (size_t)n * 6 + 2, 0}; /* reserved by the caller: no growth */
  text_json_str(buf_sink, &b, (const char *)w, (size_t)n);
  return o + b.n;
}

/* Where the <tensor> or <entry> at w[i] ends. */
static size_t tensor_end(const int64_t *w, size_t i) {
  int64_t dtype = w[i++];
  if (dtype < 0) return i;
  int64_t ndim = w[i++];
  return i + (size_t)ndim + ((dtype & SP_ENC_STRIDED) ? (size_t)ndim + 3 : 0);
}

static char *put_list(char *o, const int64_t *w, size_t *i) {
  int64_t n = w[(*i)++];
  *o++ = '[';
  for (int64_t k = 0; k < n; k++) {
    if (k) o = PUT_LIT(o, ", ");
    o = put_tensor(o, w, i);
  }
  *o++ = ']';
  return o;
}

/* The pass header of t's call: its thread's pass, or the profiler's latest. */
static inline const sp_buf *call_header(const sp_profiler *p, const sp_thread *t) {
  return t->pass ? &t->pass->header : &p->pass_json;
}

/* '{"call_id": N, "forward_pass": P[, "phase": ...], ' at the start of
 * t->prefix (reserved by the caller), noting where call_id's digits and the
 * operation start. Returns the cursor after it. */
static char *put_record_head(sp_profiler *p, sp_thread *t) {
  sp_buf *b = &t->prefix;
  const sp_buf *h = call_header(p, t);
  char *o = PUT_LIT(b->p, "{\"call_id\": ");
  t->id_digits_at = (size_t)(o - b->p);
  memcpy(o, p->id_text, p->id_len); /* p->records + 1 */
  o += p->id_len;
  t->id_digits_end = (size_t)(o - b->p);
  memcpy(o, h->p, h->n);
  o += h->n;
  o = PUT_LIT(o, ", ");
  t->head_at = (size_t)(o - b->p);
  return o;
}

/* Where the item at w[i] (its tag) ends. */
SP_PRIVATE size_t format_item_end(const int64_t *w, size_t i) {
  int64_t tag = w[i];
  i += 2; /* tag, arg */
  switch (tag) {
    case SP_ENC_TENSOR: return tensor_end(w, i);
    case SP_ENC_LIST: {
      int64_t n = w[i++];
      for (int64_t k = 0; k < n; k++) i = tensor_end(w, i);
      return i;
    }
    case SP_ENC_NULL: return i;
    case SP_ENC_INTS: case SP_ENC_FLOATS: case SP_ENC_BOOLS: return i + 1 + (size_t)w[i];
    case SP_ENC_STR: case SP_ENC_OPAQUE: return i + 1 + ((size_t)w[i] + 7) / 8;
    case SP_ENC_COMPLEX: case SP_ENC_NAME: case SP_ENC_DEVICE: return i + 2;
    default: return i + 1; /* INT, FLOAT, BOOL, DTYPE */
  }
}

/* One argument's value (not a tensor) at w[*i], its tag at w[*i - 2]. */
static char *put_value(char *o, int64_t tag, const int64_t *w, size_t *i) {
  switch (tag) {
    case SP_ENC_INT: return text_put_i64(o, w[(*i)++]);
    case SP_ENC_FLOAT: return put_f64(o, w[(*i)++]);
    case SP_ENC_BOOL: return w[(*i)++] ? PUT_LIT(o, "true") : PUT_LIT(o, "false");
    case SP_ENC_NULL: return PUT_LIT(o, "null");
    case SP_ENC_DTYPE: return registry_put_dtype_name(o, w[(*i)++]);
    case SP_ENC_DEVICE: o = put_device(o, w[*i], w[*i + 1]); *i += 2; return o;
    case SP_ENC_NAME: {
      const char *name = registry_name_of(w[*i], w[*i + 1]);
      *o++ = '"';
      if (name) {
        size_t n = strlen(name);
        memcpy(o, name, n);
        o += n;
      } else {
        o = text_put_i64(o, w[*i + 1]);
      }
      *i += 2;
      *o++ = '"';
      return o;
    }
    case SP_ENC_COMPLEX:
      o = PUT_LIT(o, "{\"real\": ");
      o = put_f64(o, w[(*i)++]);
      o = PUT_LIT(o, ", \"imag\": ");
      o = put_f64(o, w[(*i)++]);
      *o++ = '}';
      return o;
    case SP_ENC_INTS: case SP_ENC_FLOATS: case SP_ENC_BOOLS: {
      int64_t n = w[(*i)++];
      *o++ = '[';
      for (int64_t k = 0; k < n; k++) {
        if (k) o = PUT_LIT(o, ", ");
        int64_t v = w[(*i)++];
        if (tag == SP_ENC_INTS) o = text_put_i64(o, v);
        else if (tag == SP_ENC_FLOATS) o = put_f64(o, v);
        else o = v ? PUT_LIT(o, "true") : PUT_LIT(o, "false");
      }
      *o++ = ']';
      return o;
    }
    case SP_ENC_STR: case SP_ENC_OPAQUE: {
      int64_t n = w[(*i)++];
      if (tag == SP_ENC_OPAQUE) o = PUT_LIT(o, "{\"unsupported\": ");
      o = put_bytes(o, w + *i, n);
      *i += (size_t)(n + 7) / 8;
      if (tag == SP_ENC_OPAQUE) *o++ = '}';
      return o;
    }
  }
  return PUT_LIT(o, "null");
}

static char *put_key(char *o, const sp_op *op, int64_t arg) {
  if (arg >= 0 && arg < op->n_args) {
    memcpy(o, op->arg_keys[arg], op->arg_key_lens[arg]);
    return o + op->arg_key_lens[arg];
  }
  return PUT_LIT(o, "\"?\": ");
}

/* The '"key": value' pairs of the tensors (the inputs object) or of the other
 * arguments (the args object). Returns the cursor; *others: some item is of
 * the other kind. */
static char *put_items(char *o, const sp_op *op, const sp_enc *in, int tensors, int *others) {
  int first = 1;
  for (size_t i = 1; i < in->n;) {
    int64_t tag = in->w[i];
    if ((tag == SP_ENC_TENSOR || tag == SP_ENC_LIST) != tensors) {
      *others = 1;
      i = format_item_end(in->w, i);
      continue;
    }
    int64_t arg = in->w[i + 1];
    i += 2;
    if (!first) o = PUT_LIT(o, ", ");
    first = 0;
    o = put_key(o, op, arg);
    if (!tensors) o = put_value(o, tag, in->w, &i);
    else o = tag == SP_ENC_TENSOR ? put_tensor(o, in->w, &i) : put_list(o, in->w, &i);
  }
  return o;
}

/* The op whose record t's call runs inside (sp_thread_public.within), or
 * NULL. */
static inline const sp_op *within_op(const sp_thread *t) {
  return t->pub.within ? registry_op(t->pub.within - 1) : NULL;
}

/* The JSON-quoted name in an op's head ('"operation": "NAME", "inputs": {'). */
#define HEAD_NAME_AT (sizeof "\"operation\": " - 1)
#define HEAD_NAME_TAIL (sizeof ", \"inputs\": {" - 1)

/* The record up to the inputs' closing brace (or the args' one, when
 * arguments are recorded; then '"within": "NAME"' for a call inside
 * another's record), call_id included. */
static int fmt_prefix(sp_profiler *p, sp_thread *t) {
  sp_buf *b = &t->prefix;
  const sp_enc *in = &t->pub.in;
  const sp_op *op = t->op, *within = within_op(t);
  b->n = 0;
  if (!buf_reserve(b, 48 + call_header(p, t)->n + op->head_len + op->keys_len + enc_bound(in) +
                          (within ? within->head_len : 0)))
    return 0;
  char *o = put_record_head(p, t);
  memcpy(o, op->json_head, op->head_len);
  o += op->head_len;
  int args = 0, tensors = 0;
  o = put_items(o, op, in, 1, &args);
  *o++ = '}';
  if (args || p->cfg.args) { /* {} too: "recorded with arguments, there are none" */
    o = PUT_LIT(o, ", \"args\": {");
    o = put_items(o, op, in, 0, &tensors);
    *o++ = '}';
  }
  if (within) {
    o = PUT_LIT(o, ", \"within\": ");
    size_t n = within->head_len - HEAD_NAME_AT - HEAD_NAME_TAIL;
    memcpy(o, within->json_head + HEAD_NAME_AT, n);
    o += n;
  }
  b->n = (size_t)(o - b->p);
  return 1;
}

/* The same from a signature's cached text: only call_id and pass vary. */
static int fmt_prefix_cached(sp_profiler *p, sp_thread *t, const sig_rec *r) {
  sp_buf *b = &t->prefix;
  b->n = 0;
  if (!buf_reserve(b, 32 + call_header(p, t)->n + r->in_n)) return 0;
  char *o = put_record_head(p, t);
  memcpy(o, p->sigs.text + r->in_at, r->in_n);
  b->n = (size_t)(o - b->p) + r->in_n;
  return 1;
}

/* The call's prefix, from its inputs' cache when there is one (and filling
 * the cache when there is not). Not for inputs with float values: the key
 * leaves them out, the text holds them. */
SP_PRIVATE int format_prefix(sp_profiler *p, sp_thread *t) {
  sig_rec *r = t->prim >= 0 && !t->floats ? &p->sigs.recs[t->prim] : NULL;
  if (r && r->in_n) return fmt_prefix_cached(p, t, r);
  if (!fmt_prefix(p, t)) return 0;
  if (r) {
    size_t at = sig_text_put(&p->sigs, t->prefix.p + t->head_at, t->prefix.n - t->head_at);
    if (at != (size_t)-1) {
      r = &p->sigs.recs[t->prim];
      r->in_at = at;
      r->in_n = t->prefix.n - t->head_at;
    }
  }
  return 1;
}

/* ', "outputs": ...}\n' into t->line. */
SP_PRIVATE int format_outputs(sp_thread *t) {
  const sp_enc *out = &t->pub.out;
  sp_buf *b = &t->line;
  b->n = 0;
  if (!buf_reserve(b, 32 + enc_bound(out))) return 0;
  char *o = PUT_LIT(b->p, ", \"outputs\": ");
  if (out->failed || !out->tensors) {
    o = PUT_LIT(o, "null");
  } else {
    int many = t->op->n_returns != 1;
    if (many) *o++ = '[';
    size_t i = 0;
    for (int r = 0; i < out->n; r++) {
      if (r) o = PUT_LIT(o, ", ");
      int64_t tag = out->w[i++];
      if (tag == SP_ENC_TENSOR) o = put_tensor(o, out->w, &i);
      else if (tag == SP_ENC_LIST) o = put_list(o, out->w, &i);
      else o = PUT_LIT(o, "null");
    }
    if (many) *o++ = ']';
  }
  o = PUT_LIT(o, "}\n");
  b->n = (size_t)(o - b->p);
  return 1;
}

/* Upper bound on what writing t's record takes in the file. */
SP_PRIVATE inline size_t format_record_bound(const sp_profiler *p, const sp_thread *t,
                                             size_t extra) {
  const sp_op *within = within_op(t);
  return 96 + call_header(p, t)->n + t->op->head_len + t->op->keys_len + enc_bound(&t->pub.in) +
         enc_bound(&t->pub.out) + (within ? within->head_len : 0) + extra;
}

/* A call's range name (sp_nvtx.c: NVTX, rocTX): its operation and input tensors,
 * "aten.mm.default(self=[128, 256] torch.float16, mat2=[256, 512] torch.float16)",
 * NUL-terminated in b; 0 when out of memory. What is known as the call
 * begins: its outputs are not. */
SP_PRIVATE int format_range_name(const sp_thread *t, sp_buf *b) {
  const sp_op *op = t->op;
  const sp_enc *in = &t->pub.in;
  b->n = 0;
  size_t name_n = strlen(op->name);
  if (!buf_reserve(b, name_n + 4 + op->keys_len + enc_bound(in))) return 0;
  char *o = b->p;
  memcpy(o, op->name, name_n);
  o += name_n;
  *o++ = '(';
  int first = 1;
  for (size_t i = 1; i < in->n;) {
    int64_t tag = in->w[i], arg = in->w[i + 1];
    if (tag != SP_ENC_TENSOR && tag != SP_ENC_LIST) {
      i = format_item_end(in->w, i);
      continue;
    }
    if (!first) o = PUT_LIT(o, ", ");
    first = 0;
    if (arg >= 0 && arg < op->n_args && op->arg_key_lens[arg] > 4) { /* '"self": ' -> 'self=' */
      memcpy(o, op->arg_keys[arg] + 1, op->arg_key_lens[arg] - 4);
      o += op->arg_key_lens[arg] - 4;
      *o++ = '=';
    }
    i += 2;
    int64_t n = 1;
    if (tag == SP_ENC_LIST) {
      n = in->w[i++];
      *o++ = '[';
    }
    for (int64_t k = 0; k < n; k++) {
      if (k) o = PUT_LIT(o, ", ");
      int64_t dtype = in->w[i];
      if (dtype < 0) { /* a None in a list */
        o = PUT_LIT(o, "None");
        i++;
        continue;
      }
      int64_t ndim = in->w[i + 1];
      *o++ = '[';
      for (int64_t d = 0; d < ndim; d++) {
        if (d) o = PUT_LIT(o, ", ");
        o = text_put_i64(o, in->w[i + 2 + d]);
      }
      o = PUT_LIT(o, "] ");
      char *q = registry_put_dtype_name(o, dtype & ~SP_ENC_STRIDED); /* '"torch.float16"' */
      memmove(o, o + 1, (size_t)(q - o - 2));
      o = q - 2;
      i = tensor_end(in->w, i);
    }
    if (tag == SP_ENC_LIST) *o++ = ']';
  }
  *o++ = ')';
  *o = 0;
  b->n = (size_t)(o - b->p);
  return 1;
}

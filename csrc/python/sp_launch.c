/*
 * sp_launch.c -- calls that do not pass the dispatcher, recorded from values
 * the Python layer gathered: Triton's kernel launches (sgl_shapeprof/
 * recording/triton.py) and kernel libraries' API calls (a library's door,
 * sgl_shapeprof/recording/doors.py). The Python side knows the parameters;
 * this file turns them into the core's call encoding and files the call into
 * the profiler that this thread's calls go to (sp_fallback_target).
 *
 * A launch is recorded after it returned or raised (its record is written
 * whole): what it ran with, num_warps included, is known only then. An API
 * call is begun before it runs (its inputs on disk first, as an operator's:
 * a call that kills the process leaves them) and ended after, with its
 * outputs or its exception.
 * Nothing here raises into the call: a value it cannot encode is written
 * as its type's name, and a failure to record returns False.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>

#include "core/sp_core.h"
#include "torch/sp_fallback.h"
#include "python/sp_launch.h"

/* This thread's scratch for launches: apart from the fallback's, whose call
 * may be in flight around this one (a custom op's Python kernel launching). */
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void free_scratch(void *t) { sp_thread_free(t); }
static void make_key(void) { pthread_key_create(&g_key, free_scratch); }

static sp_thread *scratch(void) {
  pthread_once(&g_once, make_key);
  sp_thread *t = pthread_getspecific(g_key);
  if (!t && (t = sp_thread_new()) != NULL) pthread_setspecific(g_key, t);
  return t;
}

PyObject *sp_launch_mode(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  sp_profiler *p = sp_fallback_target();
  return PyLong_FromLong(p ? sp_logging(p) : 0);
}

static int64_t as_i64(PyObject *o, int *ok) {
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    *ok = 0;
  }
  return v;
}

/* A tuple of ints into the encoding (n, then the values); 0 if it is not. */
static int put_ints(sp_enc *e, PyObject *seq) {
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  int ok = 1;
  sp_enc_push(e, n);
  for (Py_ssize_t i = 0; i < n && ok; i++) {
    PyObject *v = PyTuple_GET_ITEM(seq, i);
    if (!PyLong_Check(v) || PyBool_Check(v)) return 0;
    sp_enc_push(e, as_i64(v, &ok));
  }
  return ok;
}

static void put_opaque(sp_enc *e, int64_t arg, PyObject *v) {
  const char *name = Py_TYPE(v)->tp_name;
  sp_enc_push(e, SP_ENC_OPAQUE);
  sp_enc_push(e, arg);
  sp_enc_bytes(e, name, strlen(name));
}

/* One non-tensor value (arg, value). */
static void put_value(sp_enc *e, int64_t arg, PyObject *v) {
  size_t mark = e->n;
  int ok = 1;
  if (v == Py_None) {
    sp_enc_push(e, SP_ENC_NULL);
    sp_enc_push(e, arg);
    return;
  }
  if (PyBool_Check(v)) {
    sp_enc_push(e, SP_ENC_BOOL);
    sp_enc_push(e, arg);
    sp_enc_push(e, v == Py_True);
    return;
  }
  if (PyLong_Check(v)) {
    sp_enc_push(e, SP_ENC_INT);
    sp_enc_push(e, arg);
    sp_enc_push(e, as_i64(v, &ok));
  } else if (PyFloat_Check(v)) {
    double d = PyFloat_AS_DOUBLE(v);
    int64_t bits;
    memcpy(&bits, &d, sizeof bits);
    sp_enc_push(e, SP_ENC_FLOAT);
    sp_enc_push(e, arg);
    sp_enc_push(e, bits);
  } else if (PyUnicode_Check(v)) {
    Py_ssize_t n = 0;
    const char *s = PyUnicode_AsUTF8AndSize(v, &n);
    if (!s) {
      PyErr_Clear();
      ok = 0;
    } else {
      sp_enc_push(e, SP_ENC_STR);
      sp_enc_push(e, arg);
      sp_enc_bytes(e, s, (size_t)n);
    }
  } else if (PyTuple_Check(v)) {
    sp_enc_push(e, SP_ENC_INTS);
    sp_enc_push(e, arg);
    ok = put_ints(e, v);
  } else {
    ok = 0;
  }
  if (!ok) { /* an int past 64 bits, a tuple of other things: its type */
    e->n = mark;
    put_opaque(e, arg, v);
  }
}

/* <tensor> from item[at:]: (dtype, sizes) or (dtype, sizes, strides,
 * offset, device type, device index). */
static int put_tensor_body(sp_enc *e, PyObject *item, Py_ssize_t at) {
  Py_ssize_t n = PyTuple_Check(item) ? PyTuple_GET_SIZE(item) - at : 0;
  if (n != 2 && n != 6) return 0;
  int ok = 1;
  int64_t dtype = as_i64(PyTuple_GET_ITEM(item, at), &ok);
  PyObject *sizes = PyTuple_GET_ITEM(item, at + 1);
  /* a negative dtype would read as another tag (sp_format.c's tensor_end) */
  if (!ok || dtype < 0 || dtype >= SP_ENC_STRIDED || !PyTuple_Check(sizes)) return 0;
  Py_ssize_t nd = PyTuple_GET_SIZE(sizes);
  if (n == 2) {
    sp_enc_push(e, dtype);
    sp_enc_push(e, nd);
    for (Py_ssize_t i = 0; i < nd; i++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(sizes, i), &ok));
    e->tensors++;
    return ok;
  }
  PyObject *strides = PyTuple_GET_ITEM(item, at + 2);
  if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != nd) return 0;
  sp_enc_push(e, dtype | SP_ENC_STRIDED);
  sp_enc_push(e, nd);
  for (Py_ssize_t i = 0; i < nd; i++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(sizes, i), &ok));
  for (Py_ssize_t i = 0; i < nd; i++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(strides, i), &ok));
  for (Py_ssize_t k = at + 3; k < at + 6; k++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(item, k), &ok));
  e->tensors++;
  return ok;
}

/* n, then each entry of a list of tensors: a tensor tuple (put_tensor_body's)
 * or None (-1). */
static int put_list_body(sp_enc *e, PyObject *list) {
  Py_ssize_t n = PyList_GET_SIZE(list);
  sp_enc_push(e, n);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *x = PyList_GET_ITEM(list, i);
    if (x == Py_None) sp_enc_push(e, -1);
    else if (!put_tensor_body(e, x, 0)) return 0;
  }
  return 1;
}

/* (arg, dtype, sizes) or (arg, dtype, sizes, strides, offset, device type,
 * device index): a tensor; (arg, None, [entries]): a list of tensors. */
static int put_tensor(sp_enc *e, int64_t arg, PyObject *item, Py_ssize_t n) {
  PyObject *second = PyTuple_GET_ITEM(item, 1);
  if (n == 3 && second == Py_None) {
    PyObject *list = PyTuple_GET_ITEM(item, 2);
    if (!PyList_Check(list)) return 0;
    sp_enc_push(e, SP_ENC_LIST);
    sp_enc_push(e, arg);
    return put_list_body(e, list);
  }
  sp_enc_push(e, SP_ENC_TENSOR);
  sp_enc_push(e, arg);
  return put_tensor_body(e, item, 1);
}

static int encode(sp_enc *e, int id, PyObject *items) {
  sp_enc_reset(e);
  sp_enc_push(e, id);
  Py_ssize_t n = PyTuple_GET_SIZE(items);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *item = PyTuple_GET_ITEM(items, i);
    Py_ssize_t k = PyTuple_Check(item) ? PyTuple_GET_SIZE(item) : 0;
    if (k != 2 && k != 3 && k != 7) return 0;
    int ok = 1;
    int64_t arg = as_i64(PyTuple_GET_ITEM(item, 0), &ok);
    if (!ok) return 0;
    if (k == 2) put_value(e, arg, PyTuple_GET_ITEM(item, 1));
    else if (!put_tensor(e, arg, item, k)) return 0;
  }
  return !e->failed;
}

/* The kernel's operator id: interned once per key (kept alive by the
 * caller), with n_returns outputs (a launch none, an API call one). */
static int op_id(sp_thread *t, PyObject *key, PyObject *operation, PyObject *arg_names,
                 int n_returns) {
  int id = sp_thread_op(t, key);
  if (id >= 0) return id;
  Py_ssize_t n = PyTuple_GET_SIZE(arg_names);
  const char **names = PyMem_Calloc((size_t)n + 1, sizeof *names);
  const char *op = PyUnicode_AsUTF8(operation);
  int ok = names && op;
  for (Py_ssize_t i = 0; ok && i < n; i++) {
    PyObject *a = PyTuple_GET_ITEM(arg_names, i);
    ok = PyUnicode_Check(a) && (names[i] = PyUnicode_AsUTF8(a)) != NULL;
  }
  PyErr_Clear();
  if (ok && sp_launch_intern(key, op, (int)n, names, n_returns, &id) == SP_OK)
    sp_thread_cache_op(t, key, id);
  else id = -1;
  PyMem_Free(names);
  return id;
}

/* The API call begun on this thread (sp_call_api_begin), until it ends. */
static _Thread_local sp_profiler *t_api_profiler;

/* error: (type name, str(exception) as UTF-8 "surrogatepass" bytes). */
static void fail(sp_profiler *p, sp_thread *t, PyObject *error) {
  PyObject *type = PyTuple_Check(error) && PyTuple_GET_SIZE(error) == 2 ? PyTuple_GET_ITEM(error, 0) : NULL;
  PyObject *msg = type ? PyTuple_GET_ITEM(error, 1) : NULL;
  Py_ssize_t tn = 0;
  const char *ts = type && PyUnicode_Check(type) ? PyUnicode_AsUTF8AndSize(type, &tn) : NULL;
  PyErr_Clear();
  int bytes = msg && PyBytes_Check(msg);
  sp_call_fail_n(p, t, ts, ts ? (size_t)tn : 0, bytes ? PyBytes_AS_STRING(msg) : NULL,
                 bytes ? (size_t)PyBytes_GET_SIZE(msg) : 0);
}

PyObject *sp_launch(PyObject *m, PyObject *args) {
  PyObject *key, *operation, *arg_names, *items, *error = Py_None;
  (void)m;
  if (!PyArg_ParseTuple(args, "OUO!O!|O:launch", &key, &operation, &PyTuple_Type, &arg_names,
                        &PyTuple_Type, &items, &error))
    return NULL;
  sp_profiler *p = t_api_profiler ? NULL : sp_fallback_target(); /* inside an API call: its part */
  sp_thread *t = p ? scratch() : NULL;
  if (!t) Py_RETURN_FALSE;
  int id = op_id(t, key, operation, arg_names, 0);
  sp_enc *in = &sp_thread_enc(t)->in;
  if (id < 0 || !encode(in, id, items)) Py_RETURN_FALSE;
  int state = sp_call_begin(p, t);
  if (state == SP_CALL_SKIP) Py_RETURN_FALSE;
  if (error != Py_None) {
    fail(p, t, error);
    Py_RETURN_TRUE;
  }
  sp_enc_reset(&sp_thread_enc(t)->out); /* no outputs: a repeat's are its signature's */
  sp_call_end(p, t);
  Py_RETURN_TRUE;
}

/* An API call's one output: a tensor tuple, a list of entries (a tuple of
 * tensors returned), or () for anything else (null). */
static int encode_output(sp_enc *e, PyObject *out) {
  sp_enc_reset(e);
  if (PyList_Check(out)) {
    sp_enc_push(e, SP_ENC_LIST);
    return put_list_body(e, out) && !e->failed;
  }
  if (PyTuple_Check(out) && PyTuple_GET_SIZE(out) > 0) {
    sp_enc_push(e, SP_ENC_TENSOR);
    return put_tensor_body(e, out, 0) && !e->failed;
  }
  sp_enc_push(e, SP_ENC_NONE);
  return !e->failed;
}

PyObject *sp_call_api_begin(PyObject *m, PyObject *args) {
  PyObject *key, *operation, *arg_names, *items;
  (void)m;
  if (!PyArg_ParseTuple(args, "OUO!O!:call_begin", &key, &operation, &PyTuple_Type, &arg_names,
                        &PyTuple_Type, &items))
    return NULL;
  if (t_api_profiler) Py_RETURN_FALSE; /* one at a time per thread: the outer call is the record */
  sp_profiler *p = sp_fallback_target();
  sp_thread *t = p ? scratch() : NULL;
  if (!t) Py_RETURN_FALSE;
  int id = op_id(t, key, operation, arg_names, 1);
  if (id < 0 || !encode(&sp_thread_enc(t)->in, id, items)) Py_RETURN_FALSE;
  if (sp_call_begin(p, t) == SP_CALL_SKIP) Py_RETURN_FALSE;
  t_api_profiler = p;
  Py_RETURN_TRUE;
}

PyObject *sp_call_api_end(PyObject *m, PyObject *args) {
  PyObject *output, *error = Py_None;
  (void)m;
  if (!PyArg_ParseTuple(args, "O|O:call_end", &output, &error)) return NULL;
  sp_profiler *p = t_api_profiler;
  sp_thread *t = p ? scratch() : NULL;
  if (!t) Py_RETURN_FALSE;
  t_api_profiler = NULL;
  if (error != Py_None) {
    fail(p, t, error);
    Py_RETURN_TRUE;
  }
  struct sp_thread_public *pub = sp_thread_enc(t);
  if (!encode_output(&pub->out, output)) pub->out.failed = 1; /* written with "outputs": null */
  sp_call_end(p, t);
  Py_RETURN_TRUE;
}

/* The code that lookup gives a str's name, or -1 (not a str, or no code). */
static PyObject *code_of(PyObject *arg, int (*lookup)(int, const char *), int table) {
  const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
  if (!name) {
    PyErr_Clear();
    return PyLong_FromLong(-1);
  }
  return PyLong_FromLong(lookup(table, name));
}

static int dtype_code(int table, const char *name) {
  (void)table;
  return sp_dtype_code(name);
}

PyObject *sp_launch_dtype_code(PyObject *m, PyObject *arg) {
  (void)m;
  return code_of(arg, dtype_code, 0);
}

PyObject *sp_launch_device_code(PyObject *m, PyObject *arg) {
  (void)m;
  return code_of(arg, sp_name_code, SP_NAMES_DEVICE);
}

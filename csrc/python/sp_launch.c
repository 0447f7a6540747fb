/*
 * sp_launch.c -- kernel launches that do not pass the dispatcher (Triton's),
 * recorded from values the Python layer gathered (sgl_shapeprof/recording/
 * triton.py): it knows the kernel's parameters, this file turns them into the
 * core's call encoding and files the call into the profiler that this
 * thread's calls go to (sp_fallback_target).
 *
 * A launch is recorded after it returned or raised (its record is written
 * whole): what it ran with, num_warps included, is known only then.
 * Nothing here raises into the launch: a value it cannot encode is written
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

/* (arg, dtype, sizes) or (arg, dtype, sizes, strides, offset, device type,
 * device index): a tensor. */
static int put_tensor(sp_enc *e, int64_t arg, PyObject *item, Py_ssize_t n) {
  int ok = 1;
  int64_t dtype = as_i64(PyTuple_GET_ITEM(item, 1), &ok);
  PyObject *sizes = PyTuple_GET_ITEM(item, 2);
  /* a negative dtype would read as another tag (sp_record.c's tensor_end) */
  if (!ok || dtype < 0 || dtype >= SP_ENC_STRIDED || !PyTuple_Check(sizes)) return 0;
  Py_ssize_t nd = PyTuple_GET_SIZE(sizes);
  sp_enc_push(e, SP_ENC_TENSOR);
  sp_enc_push(e, arg);
  if (n == 3) {
    sp_enc_push(e, dtype);
    sp_enc_push(e, nd);
    for (Py_ssize_t i = 0; i < nd; i++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(sizes, i), &ok));
    e->tensors++;
    return ok;
  }
  PyObject *strides = PyTuple_GET_ITEM(item, 3);
  if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != nd) return 0;
  sp_enc_push(e, dtype | SP_ENC_STRIDED);
  sp_enc_push(e, nd);
  for (Py_ssize_t i = 0; i < nd; i++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(sizes, i), &ok));
  for (Py_ssize_t i = 0; i < nd; i++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(strides, i), &ok));
  for (int k = 4; k < 7; k++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(item, k), &ok));
  e->tensors++;
  return ok;
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

/* The kernel's operator id: interned once per key (kept alive by the caller). */
static int op_id(sp_thread *t, PyObject *key, PyObject *operation, PyObject *arg_names) {
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
  if (ok && sp_launch_intern(key, op, (int)n, names, &id) == SP_OK) sp_thread_cache_op(t, key, id);
  else id = -1;
  PyMem_Free(names);
  return id;
}

PyObject *sp_launch(PyObject *m, PyObject *args) {
  PyObject *key, *operation, *arg_names, *items, *error = Py_None;
  (void)m;
  if (!PyArg_ParseTuple(args, "OUO!O!|O:launch", &key, &operation, &PyTuple_Type, &arg_names,
                        &PyTuple_Type, &items, &error))
    return NULL;
  sp_profiler *p = sp_fallback_target();
  sp_thread *t = p ? scratch() : NULL;
  if (!t) Py_RETURN_FALSE;
  int id = op_id(t, key, operation, arg_names);
  sp_enc *in = &sp_thread_enc(t)->in;
  if (id < 0 || !encode(in, id, items)) Py_RETURN_FALSE;
  int state = sp_call_begin(p, t);
  if (state == SP_CALL_SKIP) Py_RETURN_FALSE;
  if (error != Py_None) { /* (type name, str(exception) as UTF-8 "surrogatepass" bytes) */
    PyObject *type = PyTuple_Check(error) && PyTuple_GET_SIZE(error) == 2 ? PyTuple_GET_ITEM(error, 0) : NULL;
    PyObject *msg = type ? PyTuple_GET_ITEM(error, 1) : NULL;
    Py_ssize_t tn = 0;
    const char *ts = type && PyUnicode_Check(type) ? PyUnicode_AsUTF8AndSize(type, &tn) : NULL;
    PyErr_Clear();
    int bytes = msg && PyBytes_Check(msg);
    sp_call_fail_n(p, t, ts, ts ? (size_t)tn : 0, bytes ? PyBytes_AS_STRING(msg) : NULL,
                   bytes ? (size_t)PyBytes_GET_SIZE(msg) : 0);
    Py_RETURN_TRUE;
  }
  sp_enc_reset(&sp_thread_enc(t)->out); /* no outputs: a repeat's are its signature's */
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

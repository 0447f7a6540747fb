/*
 * sp_pycall.c -- what launches (sp_launch.c) and API calls (sp_door.c)
 * share: calls that do not pass the dispatcher, described from values the
 * Python layer gathered. The thread's logging flags, its scratch, the call's
 * operator interned by name, its values as the core's words, its exception,
 * and the types values are told by.
 * Nothing here raises into the call: a value it cannot encode is written
 * as its type's name.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>

#include "core/sp_core.h"
#include "torch/sp_fallback.h"
#include "python/sp_pycall.h"
#include "python/sp_pytensor.h"

/* This thread's scratch: apart from the fallback's, whose call may be in
 * flight around this one (a custom op's Python kernel launching). */
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void free_scratch(void *t) { sp_thread_free(t); }
static void make_key(void) { pthread_key_create(&g_key, free_scratch); }

sp_thread *sp_pycall_scratch(void) {
  pthread_once(&g_once, make_key);
  sp_thread *t = pthread_getspecific(g_key);
  if (!t && (t = sp_thread_new()) != NULL) pthread_setspecific(g_key, t);
  return t;
}

PyObject *sp_pycall_logging_flags(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  sp_profiler *p = sp_fallback_target();
  return PyLong_FromLong(p ? sp_logging(p) : 0);
}

/* The types a value is told by, given once by door_types(): torch.Tensor,
 * enum.Enum, torch.dtype, and the marker of a parameter without default. */
PyObject *sp_pycall_tensor_type, *sp_pycall_missing;
static PyObject *g_enum_type, *g_dtype_type;
static PyObject *s_name;

PyObject *sp_pycall_set_types(PyObject *m, PyObject *args) {
  PyObject *tensor, *enum_type, *dtype, *missing;
  (void)m;
  if (!PyArg_ParseTuple(args, "O!O!O!O:door_types", &PyType_Type, &tensor, &PyType_Type, &enum_type,
                        &PyType_Type, &dtype, &missing))
    return NULL;
  if (!s_name && !(s_name = PyUnicode_InternFromString("name"))) return NULL;
  PyObject *olds[] = {sp_pycall_tensor_type, g_enum_type, g_dtype_type, sp_pycall_missing};
  Py_INCREF(tensor), Py_INCREF(enum_type), Py_INCREF(dtype), Py_INCREF(missing);
  sp_pycall_tensor_type = tensor, g_enum_type = enum_type, g_dtype_type = dtype, sp_pycall_missing = missing;
  for (int i = 0; i < 4; i++) Py_XDECREF(olds[i]);
  Py_RETURN_NONE;
}

int sp_pycall_op(sp_thread *t, PyObject *key, PyObject *operation, PyObject *arg_names,
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

void sp_pycall_put_opaque(sp_enc *e, int64_t arg, PyObject *v) {
  const char *name = Py_TYPE(v)->tp_name;
  sp_enc_push(e, SP_ENC_OPAQUE);
  sp_enc_push(e, arg);
  sp_enc_bytes(e, name, strlen(name));
}

void sp_pycall_put_value(sp_enc *e, int64_t arg, PyObject *v) {
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
    sp_pycall_put_opaque(e, arg, v);
  }
}

int sp_pycall_put_tensor(sp_enc *e, PyObject *t, long mode) {
  return sp_pytensor_put(e, t, (mode & SP_LOGGING_ARGS) != 0) > 0;
}

int sp_pycall_tensor_seq(PyObject *v) {
  if (!PyList_Check(v) && !PyTuple_Check(v)) return 0;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
  int any = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *x = PySequence_Fast_GET_ITEM(v, i);
    if (PyObject_TypeCheck(x, (PyTypeObject *)sp_pycall_tensor_type)) any = 1;
    else if (x != Py_None) return 0;
  }
  return any;
}

/* n, then each entry of a sequence of tensors and None; 0 if one cannot be read. */
static int put_seq(sp_enc *e, PyObject *v, long mode) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
  sp_enc_push(e, n);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *x = PySequence_Fast_GET_ITEM(v, i);
    if (x == Py_None) sp_enc_push(e, -1);
    else if (!sp_pycall_put_tensor(e, x, mode)) return 0;
  }
  return 1;
}

void sp_pycall_put_item(sp_enc *e, int64_t arg, PyObject *v, long mode) {
  size_t mark = e->n;
  int tensors = e->tensors;
  if (PyObject_TypeCheck(v, (PyTypeObject *)sp_pycall_tensor_type)) {
    sp_enc_push(e, SP_ENC_TENSOR);
    sp_enc_push(e, arg);
    if (sp_pycall_put_tensor(e, v, mode)) return;
  } else if (sp_pycall_tensor_seq(v)) {
    sp_enc_push(e, SP_ENC_LIST);
    sp_enc_push(e, arg);
    if (put_seq(e, v, mode)) return;
  } else if (PyObject_TypeCheck(v, (PyTypeObject *)g_enum_type)) {
    PyObject *name = PyObject_GetAttr(v, s_name);
    PyObject *text = name ? PyUnicode_FromFormat("%s.%U", Py_TYPE(v)->tp_name, name) : NULL;
    Py_XDECREF(name);
    PyErr_Clear();
    if (text) {
      sp_pycall_put_value(e, arg, text);
      Py_DECREF(text);
      return;
    }
  } else if (Py_TYPE(v) == (PyTypeObject *)g_dtype_type) {
    PyObject *text = PyObject_Str(v);
    PyErr_Clear();
    if (text) {
      sp_pycall_put_value(e, arg, text);
      Py_DECREF(text);
      return;
    }
  } else {
    sp_pycall_put_value(e, arg, v);
    return;
  }
  e->n = mark; /* could not be read: its type's name */
  e->tensors = tensors;
  sp_pycall_put_opaque(e, arg, v);
}

void sp_pycall_fail(sp_profiler *p, sp_thread *t, PyObject *error) {
  PyObject *type = PyTuple_Check(error) && PyTuple_GET_SIZE(error) == 2 ? PyTuple_GET_ITEM(error, 0) : NULL;
  PyObject *msg = type ? PyTuple_GET_ITEM(error, 1) : NULL;
  Py_ssize_t tn = 0;
  const char *ts = type && PyUnicode_Check(type) ? PyUnicode_AsUTF8AndSize(type, &tn) : NULL;
  PyErr_Clear();
  int bytes = msg && PyBytes_Check(msg);
  sp_call_fail_n(p, t, ts, ts ? (size_t)tn : 0, bytes ? PyBytes_AS_STRING(msg) : NULL,
                 bytes ? (size_t)PyBytes_GET_SIZE(msg) : 0);
}

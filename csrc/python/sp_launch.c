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

/* The API call begun on this thread (sp_call_api_begin_args), until it ends. */
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

/* ---- an API call described here, from its own arguments (doors.py) ----
 * The types a value is told by, given once by door_types(): torch.Tensor,
 * enum.Enum, torch.dtype, and the marker of a parameter without default. */
static int dtype_code(int table, const char *name);
static PyObject *g_tensor_type, *g_enum_type, *g_dtype_type, *g_missing;
static PyObject *g_dtype_codes;  /* torch.dtype -> its code (an int; -1: none) */
static PyObject *g_device_codes; /* device type str -> its code */
static PyObject *s_dtype, *s_shape, *s_stride, *s_storage_offset, *s_device, *s_type, *s_index, *s_name;

PyObject *sp_door_types(PyObject *m, PyObject *args) {
  PyObject *tensor, *enum_type, *dtype, *missing;
  (void)m;
  if (!PyArg_ParseTuple(args, "O!O!O!O:door_types", &PyType_Type, &tensor, &PyType_Type, &enum_type,
                        &PyType_Type, &dtype, &missing))
    return NULL;
  if (!g_dtype_codes && !(g_dtype_codes = PyDict_New())) return NULL;
  if (!g_device_codes && !(g_device_codes = PyDict_New())) return NULL;
#define INTERN(var, text) if (!var && !(var = PyUnicode_InternFromString(text))) return NULL
  INTERN(s_dtype, "dtype");
  INTERN(s_shape, "shape");
  INTERN(s_stride, "stride");
  INTERN(s_storage_offset, "storage_offset");
  INTERN(s_device, "device");
  INTERN(s_type, "type");
  INTERN(s_index, "index");
  INTERN(s_name, "name");
#undef INTERN
  PyObject *olds[] = {g_tensor_type, g_enum_type, g_dtype_type, g_missing};
  Py_INCREF(tensor), Py_INCREF(enum_type), Py_INCREF(dtype), Py_INCREF(missing);
  g_tensor_type = tensor, g_enum_type = enum_type, g_dtype_type = dtype, g_missing = missing;
  for (int i = 0; i < 4; i++) Py_XDECREF(olds[i]);
  Py_RETURN_NONE;
}

/* The code of o (a key of codes) by lookup(str(o)), cached; -1: none. */
static int64_t cached_code(PyObject *codes, PyObject *o, int (*lookup)(int, const char *), int table) {
  PyObject *c = PyDict_GetItemWithError(codes, o);
  if (c) return PyLong_AsLongLong(c);
  if (PyErr_Occurred()) return -2;
  PyObject *text = PyObject_Str(o);
  const char *name = text ? PyUnicode_AsUTF8(text) : NULL;
  int64_t code = name ? lookup(table, name) : -2;
  Py_XDECREF(text);
  if (code == -2) return -2;
  PyObject *v = PyLong_FromLongLong(code);
  if (!v || PyDict_SetItem(codes, o, v) < 0) code = -2;
  Py_XDECREF(v);
  return code;
}

static int64_t attr_i64(PyObject *o, PyObject *name, int call, int *ok) {
  PyObject *v = call ? PyObject_CallMethodNoArgs(o, name) : PyObject_GetAttr(o, name);
  int64_t r = v && v != Py_None ? as_i64(v, ok) : -1;
  if (!v) *ok = 0;
  Py_XDECREF(v);
  return r;
}

/* <tensor> of a torch.Tensor, strided when mode says arguments; 0 if it
 * cannot be read (an unknown dtype: the caller writes its type's name). */
static int put_tensor_obj(sp_enc *e, PyObject *t, long mode) {
  PyObject *dtype = PyObject_GetAttr(t, s_dtype);
  int64_t code = dtype ? cached_code(g_dtype_codes, dtype, dtype_code, 0) : -2;
  Py_XDECREF(dtype);
  PyObject *shape = code >= 0 ? PyObject_GetAttr(t, s_shape) : NULL;
  if (!shape || !PyTuple_Check(shape)) {
    Py_XDECREF(shape);
    PyErr_Clear();
    return 0;
  }
  Py_ssize_t nd = PyTuple_GET_SIZE(shape);
  int ok = 1;
  PyObject *strides = NULL;
  if (mode & SP_LOGGING_ARGS) {
    strides = PyObject_CallMethodNoArgs(t, s_stride);
    ok = strides && PyTuple_Check(strides) && PyTuple_GET_SIZE(strides) == nd;
  }
  if (ok) {
    sp_enc_push(e, strides ? code | SP_ENC_STRIDED : code);
    sp_enc_push(e, nd);
    for (Py_ssize_t i = 0; i < nd; i++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(shape, i), &ok));
  }
  if (ok && strides) {
    for (Py_ssize_t i = 0; i < nd; i++) sp_enc_push(e, as_i64(PyTuple_GET_ITEM(strides, i), &ok));
    sp_enc_push(e, attr_i64(t, s_storage_offset, 1, &ok));
    PyObject *device = PyObject_GetAttr(t, s_device);
    PyObject *type = device ? PyObject_GetAttr(device, s_type) : NULL;
    sp_enc_push(e, type ? cached_code(g_device_codes, type, sp_name_code, SP_NAMES_DEVICE) : -1);
    sp_enc_push(e, device ? attr_i64(device, s_index, 0, &ok) : -1);
    ok = ok && type;
    Py_XDECREF(type);
    Py_XDECREF(device);
  }
  Py_DECREF(shape);
  Py_XDECREF(strides);
  PyErr_Clear();
  if (ok) e->tensors++;
  return ok;
}

/* A list or tuple that holds a tensor and nothing but tensors and None. */
static int tensor_seq(PyObject *v) {
  if (!PyList_Check(v) && !PyTuple_Check(v)) return 0;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
  int any = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *x = PySequence_Fast_GET_ITEM(v, i);
    if (PyObject_TypeCheck(x, (PyTypeObject *)g_tensor_type)) any = 1;
    else if (x != Py_None) return 0;
  }
  return any;
}

/* n, then each entry of a sequence of tensors and None; 0 if one cannot be read. */
static int put_seq_obj(sp_enc *e, PyObject *v, long mode) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
  sp_enc_push(e, n);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *x = PySequence_Fast_GET_ITEM(v, i);
    if (x == Py_None) sp_enc_push(e, -1);
    else if (!put_tensor_obj(e, x, mode)) return 0;
  }
  return 1;
}

/* One parameter's value: a tensor, a sequence of tensors, or a value as
 * put_value writes it (an enum by "Class.MEMBER", a dtype by name). */
static void put_item_obj(sp_enc *e, int64_t arg, PyObject *v, long mode) {
  size_t mark = e->n;
  int tensors = e->tensors;
  if (PyObject_TypeCheck(v, (PyTypeObject *)g_tensor_type)) {
    sp_enc_push(e, SP_ENC_TENSOR);
    sp_enc_push(e, arg);
    if (put_tensor_obj(e, v, mode)) return;
  } else if (tensor_seq(v)) {
    sp_enc_push(e, SP_ENC_LIST);
    sp_enc_push(e, arg);
    if (put_seq_obj(e, v, mode)) return;
  } else if (PyObject_TypeCheck(v, (PyTypeObject *)g_enum_type)) {
    PyObject *name = PyObject_GetAttr(v, s_name);
    PyObject *text = name ? PyUnicode_FromFormat("%s.%U", Py_TYPE(v)->tp_name, name) : NULL;
    Py_XDECREF(name);
    PyErr_Clear();
    if (text) {
      put_value(e, arg, text);
      Py_DECREF(text);
      return;
    }
  } else if (Py_TYPE(v) == (PyTypeObject *)g_dtype_type) {
    PyObject *text = PyObject_Str(v);
    PyErr_Clear();
    if (text) {
      put_value(e, arg, text);
      Py_DECREF(text);
      return;
    }
  } else {
    put_value(e, arg, v);
    return;
  }
  e->n = mark; /* could not be read: its type's name */
  e->tensors = tensors;
  put_opaque(e, arg, v);
}

/* call_begin_args(key, operation, arg_names, defaults, index, positional,
 * skip, args, kwargs, mode): binds args and kwargs to the parameters as
 * Python would (defaults: per parameter its default or the missing marker;
 * index: name -> position; positional: how many can be given by position;
 * skip: leave the first positional out, a method's self) and
 * begins the call: its record filed as an operator call's, and the thread's
 * API call open until call_end_obj (one at a time per thread: the outer
 * call is the record). True if it is recorded; False when it is not
 * (nothing logs, or an API call is already open on this thread); None when
 * the values do not bind so simply (a keyword the function does not name,
 * more positionals than it has): the caller binds what it names and gives
 * the rest as other, text written as the last parameter's value. */
PyObject *sp_call_api_begin_args(PyObject *m, PyObject *args) {
  PyObject *key, *operation, *arg_names, *defaults, *index, *call_args, *call_kwargs, *other = Py_None;
  Py_ssize_t positional;
  int skip;
  long mode;
  (void)m;
  if (!PyArg_ParseTuple(args, "OUO!O!O!npO!Ol|O:call_begin_args", &key, &operation, &PyTuple_Type,
                        &arg_names, &PyTuple_Type, &defaults, &PyDict_Type, &index, &positional,
                        &skip, &PyTuple_Type, &call_args, &call_kwargs, &mode, &other))
    return NULL;
  if (!g_tensor_type) {
    PyErr_SetString(PyExc_RuntimeError, "call_begin_args before door_types");
    return NULL;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(defaults), given = PyTuple_GET_SIZE(call_args) - (skip ? 1 : 0);
  if (given > positional || positional > n || given < 0) Py_RETURN_NONE;
  PyObject *small[64];
  PyObject **values = n <= 64 ? small : PyMem_Malloc((size_t)n * sizeof *values);
  if (!values) return PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < n; i++) values[i] = PyTuple_GET_ITEM(defaults, i);
  for (Py_ssize_t i = 0; i < given; i++) values[i] = PyTuple_GET_ITEM(call_args, i + (skip ? 1 : 0));
  PyObject *result = NULL;
  if (call_kwargs != Py_None) {
    if (!PyDict_Check(call_kwargs)) {
      PyErr_SetString(PyExc_TypeError, "kwargs must be a dict or None");
      goto done;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(call_kwargs, &pos, &k, &v)) {
      PyObject *at = PyDict_GetItemWithError(index, k);
      if (!at) {
        if (PyErr_Occurred()) goto done;
        result = Py_None; /* a keyword it does not name */
        Py_INCREF(result);
        goto done;
      }
      values[PyLong_AsSsize_t(at)] = v;
    }
  }
  {
    int recorded = 0;
    sp_profiler *p = t_api_profiler ? NULL : sp_fallback_target();
    sp_thread *t = p ? scratch() : NULL;
    int id = t ? op_id(t, key, operation, arg_names, 1) : -1;
    if (id >= 0) {
      sp_enc *e = &sp_thread_enc(t)->in;
      sp_enc_reset(e);
      sp_enc_push(e, id);
      for (Py_ssize_t i = 0; i < n; i++)
        if (values[i] != g_missing) put_item_obj(e, i, values[i], mode);
      if (other != Py_None) put_value(e, n, other); /* what it does not name, as text */
      sp_thread_enc(t)->within = sp_fallback_open_op(); /* a custom op's kernel calling */
      if (!e->failed && sp_call_begin(p, t) != SP_CALL_SKIP) {
        t_api_profiler = p;
        recorded = 1;
      }
    }
    PyErr_Clear();
    result = PyBool_FromLong(recorded);
  }
done:
  if (values != small) PyMem_Free(values);
  return result;
}

/* call_end_obj(output, error=None): the call begun returned output (any
 * object: a tensor, a tuple or list of them, or another value, null), or
 * raised error. */
PyObject *sp_call_api_end_obj(PyObject *m, PyObject *args) {
  PyObject *output, *error = Py_None;
  (void)m;
  if (!PyArg_ParseTuple(args, "O|O:call_end_obj", &output, &error)) return NULL;
  sp_profiler *p = t_api_profiler;
  sp_thread *t = p ? scratch() : NULL;
  if (!t) Py_RETURN_FALSE;
  t_api_profiler = NULL;
  if (error != Py_None) {
    fail(p, t, error);
    Py_RETURN_TRUE;
  }
  struct sp_thread_public *pub = sp_thread_enc(t);
  sp_enc *e = &pub->out;
  sp_enc_reset(e);
  int ok = 1;
  if (g_tensor_type && PyObject_TypeCheck(output, (PyTypeObject *)g_tensor_type)) {
    sp_enc_push(e, SP_ENC_TENSOR);
    ok = put_tensor_obj(e, output, 0);
  } else if (g_tensor_type && (PyList_Check(output) || PyTuple_Check(output))) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(output);
    int any = 0;
    for (Py_ssize_t i = 0; i < n && !any; i++)
      any = PyObject_TypeCheck(PySequence_Fast_GET_ITEM(output, i), (PyTypeObject *)g_tensor_type);
    if (any) {
      sp_enc_push(e, SP_ENC_LIST);
      sp_enc_push(e, n);
      for (Py_ssize_t i = 0; i < n && ok; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(output, i);
        if (PyObject_TypeCheck(x, (PyTypeObject *)g_tensor_type)) ok = put_tensor_obj(e, x, 0);
        else sp_enc_push(e, -1);
      }
    } else {
      sp_enc_push(e, SP_ENC_NONE);
    }
  } else {
    sp_enc_push(e, SP_ENC_NONE);
  }
  PyErr_Clear();
  if (!ok || e->failed) e->failed = 1; /* written with "outputs": null */
  sp_call_end(p, t);
  Py_RETURN_TRUE;
}

static int dtype_code(int table, const char *name) {
  (void)table;
  return sp_dtype_code(name);
}

/* launch(key, operation, arg_names, values, mode, error=None, convert=None):
 * one kernel launch, recorded whole once it returned or raised: values, one
 * per name (the missing marker: not given), described here as an API
 * call's are; convert(v) gives what a value that is not a tensor, a
 * sequence of tensors or a plain value is written as (a Triton dtype by its
 * name, a constexpr by its value). True if it was filed. */
PyObject *sp_launch(PyObject *m, PyObject *args) {
  PyObject *key, *operation, *arg_names, *values, *error = Py_None, *convert = Py_None;
  long mode;
  (void)m;
  if (!PyArg_ParseTuple(args, "OUO!O!l|OO:launch", &key, &operation, &PyTuple_Type, &arg_names,
                        &PyTuple_Type, &values, &mode, &error, &convert))
    return NULL;
  if (!g_tensor_type) {
    PyErr_SetString(PyExc_RuntimeError, "launch: door_types() was not given");
    return NULL;
  }
  sp_profiler *p = t_api_profiler ? NULL : sp_fallback_target(); /* inside an API call: its part */
  sp_thread *t = p ? scratch() : NULL;
  int id = t ? op_id(t, key, operation, arg_names, 0) : -1;
  if (id < 0) Py_RETURN_FALSE;
  sp_enc *e = &sp_thread_enc(t)->in;
  sp_enc_reset(e);
  sp_enc_push(e, id);
  Py_ssize_t n = PyTuple_GET_SIZE(values);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *v = PyTuple_GET_ITEM(values, i);
    if (v == g_missing) continue;
    PyTypeObject *type = Py_TYPE(v);
    int plain = v == Py_None || type == &PyLong_Type || type == &PyFloat_Type || type == &PyBool_Type ||
                type == &PyUnicode_Type || PyObject_TypeCheck(v, (PyTypeObject *)g_tensor_type);
    if (plain || convert == Py_None || tensor_seq(v)) {
      put_item_obj(e, i, v, mode);
      continue;
    }
    PyObject *c = PyObject_CallOneArg(convert, v);
    if (!c) {
      PyErr_Clear();
      put_opaque(e, i, v);
      continue;
    }
    put_item_obj(e, i, c, mode);
    Py_DECREF(c);
  }
  PyErr_Clear();
  if (e->failed) Py_RETURN_FALSE;
  sp_thread_enc(t)->within = sp_fallback_open_op(); /* a custom op's kernel launching */
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

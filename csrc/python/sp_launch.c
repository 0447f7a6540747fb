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
#include "python/sp_pytensor.h"

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

/* A tuple of plain ints only (not bools, not subclasses). */
static int int_tuple(PyObject *v) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++)
    if (Py_TYPE(PyTuple_GET_ITEM(v, i)) != &PyLong_Type) return 0;
  return 1;
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
static PyObject *g_tensor_type, *g_enum_type, *g_dtype_type, *g_missing;
static PyObject *s_name;

PyObject *sp_door_types(PyObject *m, PyObject *args) {
  PyObject *tensor, *enum_type, *dtype, *missing;
  (void)m;
  if (!PyArg_ParseTuple(args, "O!O!O!O:door_types", &PyType_Type, &tensor, &PyType_Type, &enum_type,
                        &PyType_Type, &dtype, &missing))
    return NULL;
  if (!s_name && !(s_name = PyUnicode_InternFromString("name"))) return NULL;
  PyObject *olds[] = {g_tensor_type, g_enum_type, g_dtype_type, g_missing};
  Py_INCREF(tensor), Py_INCREF(enum_type), Py_INCREF(dtype), Py_INCREF(missing);
  g_tensor_type = tensor, g_enum_type = enum_type, g_dtype_type = dtype, g_missing = missing;
  for (int i = 0; i < 4; i++) Py_XDECREF(olds[i]);
  Py_RETURN_NONE;
}

/* <tensor> of a torch.Tensor, strided when mode says arguments (read from
 * its at::Tensor, as the fallback writes an operator's); 0 if it cannot be
 * read (symbolic sizes: the caller writes its type's name). */
static int put_tensor_obj(sp_enc *e, PyObject *t, long mode) {
  return sp_pytensor_put(e, t, (mode & SP_LOGGING_ARGS) != 0) > 0;
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

/* Binds call_args and call_kwargs (None or a dict) to the parameters as
 * Python would (defaults: per parameter its default or the missing marker;
 * index: name -> position; positional: how many can be given by position;
 * skip: leave the first positional out, a method's self) and begins the
 * call: its record filed as an operator call's, and the thread's API call
 * open until end_call (one at a time per thread: the outer call is the
 * record). 1 if it is recorded; 0 if not (nothing logs, or an API call is
 * already open on this thread); -1 when the values do not bind so simply (a
 * keyword the function does not name, more positionals than it has); -2
 * with a Python error set. other (or NULL): text written as the value of
 * the parameter past the last, what the function does not name. */
static int begin_call(PyObject *key, PyObject *operation, PyObject *arg_names, PyObject *defaults,
                      PyObject *index, Py_ssize_t positional, int skip, PyObject *call_args,
                      PyObject *call_kwargs, long mode, PyObject *other) {
  if (!g_tensor_type) {
    PyErr_SetString(PyExc_RuntimeError, "an API call described before door_types");
    return -2;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(defaults), given = PyTuple_GET_SIZE(call_args) - (skip ? 1 : 0);
  if (given > positional || positional > n || given < 0) return -1;
  PyObject *small[64];
  PyObject **values = n <= 64 ? small : PyMem_Malloc((size_t)n * sizeof *values);
  if (!values) {
    PyErr_NoMemory();
    return -2;
  }
  for (Py_ssize_t i = 0; i < n; i++) values[i] = PyTuple_GET_ITEM(defaults, i);
  for (Py_ssize_t i = 0; i < given; i++) values[i] = PyTuple_GET_ITEM(call_args, i + (skip ? 1 : 0));
  int result = 0;
  if (call_kwargs && call_kwargs != Py_None) {
    if (!PyDict_Check(call_kwargs)) {
      PyErr_SetString(PyExc_TypeError, "kwargs must be a dict or None");
      result = -2;
      goto done;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(call_kwargs, &pos, &k, &v)) {
      PyObject *at = PyDict_GetItemWithError(index, k);
      if (!at) {
        result = PyErr_Occurred() ? -2 : -1; /* -1: a keyword it does not name */
        goto done;
      }
      values[PyLong_AsSsize_t(at)] = v;
    }
  }
  {
    sp_profiler *p = t_api_profiler ? NULL : sp_fallback_target();
    sp_thread *t = p ? scratch() : NULL;
    int id = t ? op_id(t, key, operation, arg_names, 1) : -1;
    if (id >= 0) {
      sp_enc *e = &sp_thread_enc(t)->in;
      sp_enc_reset(e);
      sp_enc_push(e, id);
      for (Py_ssize_t i = 0; i < n; i++)
        if (values[i] != g_missing) put_item_obj(e, i, values[i], mode);
      if (other) put_value(e, n, other); /* what it does not name, as text */
      sp_thread_enc(t)->within = sp_fallback_open_op(); /* a custom op's kernel calling */
      if (!e->failed && sp_call_begin(p, t) != SP_CALL_SKIP) {
        t_api_profiler = p;
        result = 1;
      }
    }
    PyErr_Clear();
  }
done:
  if (values != small) PyMem_Free(values);
  return result;
}

/* Ends the API call begun on this thread: it returned output (any object:
 * a tensor, a tuple or list of them, or another value, null), or raised
 * error ((type name, str() as UTF-8 "surrogatepass" bytes); NULL: it
 * returned). 0 if none was open. */
static int end_call(PyObject *output, PyObject *error) {
  sp_profiler *p = t_api_profiler;
  sp_thread *t = p ? scratch() : NULL;
  if (!t) return 0;
  t_api_profiler = NULL;
  if (error) {
    fail(p, t, error);
    return 1;
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
  return 1;
}

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
  int begun = begin_call(key, operation, arg_names, defaults, index, positional, skip, call_args, call_kwargs,
                         mode, other == Py_None ? NULL : other);
  if (begun == -2) return NULL;
  if (begun == -1) Py_RETURN_NONE;
  return PyBool_FromLong(begun);
}

PyObject *sp_call_api_end_obj(PyObject *m, PyObject *args) {
  PyObject *output, *error = Py_None;
  (void)m;
  if (!PyArg_ParseTuple(args, "O|O:call_end_obj", &output, &error)) return NULL;
  return PyBool_FromLong(end_call(output, error == Py_None ? NULL : error));
}

/* (type(e).__name__, str(e) as UTF-8 "surrogatepass" bytes) of exception
 * value of class type; NULL if it cannot be made. No error is left set. */
static PyObject *describe_error(PyObject *type, PyObject *value) {
  PyObject *out = NULL;
  PyObject *name = type ? PyObject_GetAttrString(type, "__name__") : NULL;
  PyObject *text = value ? PyObject_Str(value) : NULL;
  if (!text) {
    PyErr_Clear();
    text = name && PyUnicode_Check(name) ? PyUnicode_FromFormat("<str() of %U raised>", name)
                                          : PyUnicode_FromString("<str() raised>");
  }
  PyObject *bytes = text ? PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass") : NULL;
  if (name && PyUnicode_Check(name) && bytes) out = PyTuple_Pack(2, name, bytes);
  Py_XDECREF(name);
  Py_XDECREF(text);
  Py_XDECREF(bytes);
  PyErr_Clear();
  return out;
}

/* Ends the API call begun on this thread with the exception being raised,
 * which stays raised. */
static void end_call_raising(void) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject *exc = PyErr_GetRaisedException();
  PyObject *error = describe_error(exc ? (PyObject *)Py_TYPE(exc) : NULL, exc);
#else
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject *error = describe_error(type, value);
#endif
  if (!error) /* its name or text could not be made: it raised all the same */
    error = Py_BuildValue("(sy)", "BaseException", "<an exception that could not be described>");
  PyErr_Clear();
  end_call(error ? NULL : Py_None, error); /* out of memory: ended all the same */
  Py_XDECREF(error);
  PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyErr_Restore(type, value, tb);
#endif
}

/* door_call(api, fn, args, kwargs, mode): fn(*args, **kwargs) recorded as a
 * kernel library's API call, in one native call: api is its (key,
 * operation, arg_names, defaults, index, positional, skip), as
 * call_begin_args takes them; kwargs a dict or None. Returns what fn
 * returned, or raises what it raised (also when it is not recorded);
 * the missing marker (never a value fn returns: it is ours), without
 * calling fn, when the call must go the long way
 * (its values do not bind so simply, or describing them failed: the
 * caller's path says why). While fn runs, its thread records nothing else
 * (its own work). */
PyObject *sp_door_call(PyObject *m, PyObject *const *argv, Py_ssize_t nargs) {
  (void)m;
  if (nargs != 5 || !PyTuple_Check(argv[0]) || PyTuple_GET_SIZE(argv[0]) != 7 || !PyTuple_Check(argv[2])) {
    PyErr_SetString(PyExc_TypeError, "door_call(api, fn, args, kwargs, mode)");
    return NULL;
  }
  PyObject *api = argv[0], *fn = argv[1], *call_args = argv[2];
  PyObject *call_kwargs = argv[3] == Py_None ? NULL : argv[3];
  long mode = PyLong_AsLong(argv[4]);
  PyObject *arg_names = PyTuple_GET_ITEM(api, 2), *defaults = PyTuple_GET_ITEM(api, 3),
           *index = PyTuple_GET_ITEM(api, 4), *operation = PyTuple_GET_ITEM(api, 1);
  Py_ssize_t positional = PyLong_AsSsize_t(PyTuple_GET_ITEM(api, 5));
  int skip = PyObject_IsTrue(PyTuple_GET_ITEM(api, 6));
  if (PyErr_Occurred() || !PyUnicode_Check(operation) || !PyTuple_Check(arg_names) || !PyTuple_Check(defaults) ||
      !PyDict_Check(index) || skip < 0 || !g_missing) {
    PyErr_Clear();
    if (!g_missing) {
      PyErr_SetString(PyExc_RuntimeError, "door_call before door_types");
      return NULL;
    }
    return Py_NewRef(g_missing);
  }
  int begun = begin_call(PyTuple_GET_ITEM(api, 0), operation, arg_names, defaults, index, positional, skip,
                         call_args, call_kwargs, mode, NULL);
  if (begun < 0) {
    PyErr_Clear();
    return Py_NewRef(g_missing);
  }
  if (!begun) return PyObject_Call(fn, call_args, call_kwargs);
  int paused = sp_fallback_pause(); /* its own work is not recorded apart */
  PyObject *out = PyObject_Call(fn, call_args, call_kwargs);
  if (paused) sp_fallback_resume();
  if (out) {
    end_call(out, NULL);
    return out;
  }
  end_call_raising();
  return NULL;
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
                type == &PyUnicode_Type || PyObject_TypeCheck(v, (PyTypeObject *)g_tensor_type) ||
                (type == &PyTuple_Type && int_tuple(v)); /* a grid, say: convert would cost a us */
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

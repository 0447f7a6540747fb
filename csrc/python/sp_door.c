/*
 * sp_door.c -- kernel libraries' API calls (a library's door,
 * sgl_shapeprof/recording/doors.py), recorded from the values the Python
 * layer gives: the function's own arguments, bound to its parameters here.
 * What launches share with them (values, the scratch, the operator) is
 * sp_pycall.c's.
 *
 * An API call is begun before it runs (its inputs on disk first, as an
 * operator's: a call that kills the process leaves them) and ended after,
 * with its outputs or its exception. One at a time per thread: the outer
 * call is the record, and a launch inside it is its part (sp_door_open).
 * Nothing here raises into the call: a value it cannot encode is written
 * as its type's name, and a failure to record returns False.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/sp_core.h"
#include "torch/sp_fallback.h"
#include "python/sp_door.h"
#include "python/sp_pycall.h"

/* The API call begun on this thread (sp_call_api_begin_args), until it ends. */
static _Thread_local sp_profiler *t_api_profiler;

int sp_door_open(void) { return t_api_profiler != NULL; }

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
  if (!sp_pycall_tensor_type) {
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
    sp_thread *t = p ? sp_pycall_scratch() : NULL;
    int id = t ? sp_pycall_op(t, key, operation, arg_names, 1) : -1;
    if (id >= 0) {
      sp_enc *e = &sp_thread_enc(t)->in;
      sp_enc_reset(e);
      sp_enc_push(e, id);
      for (Py_ssize_t i = 0; i < n; i++)
        if (values[i] != sp_pycall_missing) sp_pycall_put_item(e, i, values[i], mode);
      if (other) sp_pycall_put_value(e, n, other); /* what it does not name, as text */
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
  sp_thread *t = p ? sp_pycall_scratch() : NULL;
  if (!t) return 0;
  t_api_profiler = NULL;
  sp_call_returned(t); /* a timed call's time ends here, before its outputs are described */
  if (error) {
    sp_pycall_fail(p, t, error);
    return 1;
  }
  struct sp_thread_public *pub = sp_thread_enc(t);
  sp_enc *e = &pub->out;
  sp_enc_reset(e);
  int ok = 1;
  if (sp_pycall_tensor_type && PyObject_TypeCheck(output, (PyTypeObject *)sp_pycall_tensor_type)) {
    sp_enc_push(e, SP_ENC_TENSOR);
    ok = sp_pycall_put_tensor(e, output, 0);
  } else if (sp_pycall_tensor_type && (PyList_Check(output) || PyTuple_Check(output))) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(output);
    int any = 0;
    for (Py_ssize_t i = 0; i < n && !any; i++)
      any = PyObject_TypeCheck(PySequence_Fast_GET_ITEM(output, i), (PyTypeObject *)sp_pycall_tensor_type);
    if (any) {
      sp_enc_push(e, SP_ENC_LIST);
      sp_enc_push(e, n);
      for (Py_ssize_t i = 0; i < n && ok; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(output, i);
        if (PyObject_TypeCheck(x, (PyTypeObject *)sp_pycall_tensor_type)) ok = sp_pycall_put_tensor(e, x, 0);
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
      !PyDict_Check(index) || skip < 0 || !sp_pycall_missing) {
    PyErr_Clear();
    if (!sp_pycall_missing) {
      PyErr_SetString(PyExc_RuntimeError, "door_call before door_types");
      return NULL;
    }
    return Py_NewRef(sp_pycall_missing);
  }
  int begun = begin_call(PyTuple_GET_ITEM(api, 0), operation, arg_names, defaults, index, positional, skip,
                         call_args, call_kwargs, mode, NULL);
  if (begun < 0) {
    PyErr_Clear();
    return Py_NewRef(sp_pycall_missing);
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

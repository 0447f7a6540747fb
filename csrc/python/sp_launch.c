/*
 * sp_launch.c -- Triton's kernel launches (sgl_shapeprof/recording/
 * triton.py), recorded from the values the Python layer gives: one per
 * kernel parameter and launch option, described as an API call's are
 * (sp_pycall.c). A launch is recorded after it returned or raised (its
 * record is written whole): what it ran with, num_warps included, is known
 * only then. A launch inside an open API call is that call's part, not a
 * record of its own (sp_door_open).
 * Nothing here raises into the call: a value it cannot encode is written
 * as its type's name, and a failure to record returns False.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/sp_core.h"
#include "torch/sp_fallback.h"
#include "python/sp_door.h"
#include "python/sp_launch.h"
#include "python/sp_pycall.h"

/* A tuple of plain ints only (not bools, not subclasses). */
static int int_tuple(PyObject *v) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++)
    if (Py_TYPE(PyTuple_GET_ITEM(v, i)) != &PyLong_Type) return 0;
  return 1;
}

/* launch(key, operation, arg_names, values, mode, error=None, convert=None,
 *        start_ns=0, end_ns=0):
 * one kernel launch, recorded whole once it returned or raised: values, one
 * per name (the missing marker: not given), described here as an API
 * call's are; convert(v) gives what a value that is not a tensor, a
 * sequence of tensors or a plain value is written as (a Triton dtype by its
 * name, a constexpr by its value). start_ns, end_ns: when the launch began
 * and returned (time.perf_counter_ns(), the core's clock), for a timed
 * profiler (mode has SP_LOGGING_TIME); without them it has no time (its
 * record is made after it ran); gpu_ext: the id pushed around it
 * (sp_cupti_region_begin), whose kernels are its record's. True if it was
 * filed. */
PyObject *sp_launch(PyObject *m, PyObject *args) {
  PyObject *key, *operation, *arg_names, *values, *error = Py_None, *convert = Py_None;
  long mode;
  long long start_ns = 0, end_ns = 0;
  unsigned long long gpu_ext = 0;
  (void)m;
  if (!PyArg_ParseTuple(args, "OUO!O!l|OOLLK:launch", &key, &operation, &PyTuple_Type, &arg_names,
                        &PyTuple_Type, &values, &mode, &error, &convert, &start_ns, &end_ns, &gpu_ext))
    return NULL;
  if (!sp_pycall_tensor_type) {
    PyErr_SetString(PyExc_RuntimeError, "launch: door_types() was not given");
    return NULL;
  }
  sp_profiler *p = sp_door_open() ? NULL : sp_fallback_target(); /* inside an API call: its part */
  sp_thread *t = p ? sp_pycall_scratch() : NULL;
  int id = t ? sp_pycall_op(t, key, operation, arg_names, 0) : -1;
  if (id < 0) Py_RETURN_FALSE;
  sp_enc *e = &sp_thread_enc(t)->in;
  sp_enc_reset(e);
  sp_enc_push(e, id);
  Py_ssize_t n = PyTuple_GET_SIZE(values);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *v = PyTuple_GET_ITEM(values, i);
    if (v == sp_pycall_missing) continue;
    PyTypeObject *type = Py_TYPE(v);
    int plain = v == Py_None || type == &PyLong_Type || type == &PyFloat_Type || type == &PyBool_Type ||
                type == &PyUnicode_Type || PyObject_TypeCheck(v, (PyTypeObject *)sp_pycall_tensor_type) ||
                (type == &PyTuple_Type && int_tuple(v)); /* a grid, say: convert would cost a us */
    if (plain || convert == Py_None || sp_pycall_tensor_seq(v)) {
      sp_pycall_put_item(e, i, v, mode);
      continue;
    }
    PyObject *c = PyObject_CallOneArg(convert, v);
    if (!c) {
      PyErr_Clear();
      sp_pycall_put_opaque(e, i, v);
      continue;
    }
    sp_pycall_put_item(e, i, c, mode);
    Py_DECREF(c);
  }
  PyErr_Clear();
  if (e->failed) Py_RETURN_FALSE;
  sp_thread_enc(t)->within = sp_fallback_open_op(); /* a custom op's kernel launching */
  sp_thread_enc(t)->gpu_ext = gpu_ext; /* the id pushed around it, under a kernels-timed profiler */
  int state = sp_call_begin(p, t);
  if (state == SP_CALL_SKIP) Py_RETURN_FALSE;
  sp_call_span(t, start_ns, end_ns); /* none given: no time (it ran before this) */
  if (error != Py_None) {
    sp_pycall_fail(p, t, error);
    Py_RETURN_TRUE;
  }
  sp_enc_reset(&sp_thread_enc(t)->out); /* no outputs: a repeat's are its signature's */
  sp_call_end(p, t);
  Py_RETURN_TRUE;
}

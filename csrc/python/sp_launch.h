/*
 * sp_launch.h -- the module functions of sp_launch.c (kernel launches).
 */
#ifndef SP_LAUNCH_H
#define SP_LAUNCH_H

#include <Python.h>

/* launch_mode(): sp_logging() of the profiler this thread's calls go to, 0
 * when none (or this thread is paused). */
PyObject *sp_launch_mode(PyObject *m, PyObject *noargs);
/* launch(key, operation, arg_names, values, mode, error=None, convert=None):
 * records one launch, its values described here; True if it was filed. */
PyObject *sp_launch(PyObject *m, PyObject *args);
/* door_types(tensor_type, enum_type, dtype_type, missing): the types launch
 * and the two below tell values by, given once. */
PyObject *sp_door_types(PyObject *m, PyObject *args);
/* call_begin_args(key, operation, arg_names, defaults, index, positional,
 * skip, args, kwargs, mode, other=None): a kernel library's API call begins
 * on this thread, its own arguments bound and described here; True if it
 * is recorded (call_end_obj must follow), False if not, None when they do
 * not bind so simply (the caller binds what the function names and gives
 * the rest as other). */
PyObject *sp_call_api_begin_args(PyObject *m, PyObject *args);
/* call_end_obj(output, error=None): the call begun returned output, or
 * raised error ((type name, str() as UTF-8 "surrogatepass" bytes)). */
PyObject *sp_call_api_end_obj(PyObject *m, PyObject *args);
/* door_call(api, fn, args, kwargs, mode): fn(*args, **kwargs), recorded as
 * an API call begun and ended in one native call (api: call_begin_args'
 * first seven values as a tuple); returns what fn returns, raises what it
 * raises; the missing marker, fn not called, when the call must take the
 * long way (call_begin_args, then call_end_obj). */
PyObject *sp_door_call(PyObject *m, PyObject *const *argv, Py_ssize_t nargs);

#endif /* SP_LAUNCH_H */

/*
 * sp_launch.h -- the module functions of sp_launch.c (kernel launches).
 */
#ifndef SP_LAUNCH_H
#define SP_LAUNCH_H

#include <Python.h>

/* launch_mode(): sp_logging() of the profiler this thread's calls go to, 0
 * when none (or this thread is paused). */
PyObject *sp_launch_mode(PyObject *m, PyObject *noargs);
/* launch(key, operation, arg_names, items, error=None): records one launch;
 * True if it was filed. */
PyObject *sp_launch(PyObject *m, PyObject *args);
/* call_begin(key, operation, arg_names, items): a kernel library's API call
 * begins on this thread (items as launch's, and (arg, None, [entries]) for a
 * list of tensors); True if it is recorded, and call_end must follow. False
 * when it is not: nothing logs, or an API call is already open on this
 * thread (the outer call is the record). */
PyObject *sp_call_api_begin(PyObject *m, PyObject *args);
/* call_end(output, error=None): the call begun returned output (a tensor
 * tuple, a list of entries, or () for no tensor), or raised error. */
PyObject *sp_call_api_end(PyObject *m, PyObject *args);
/* door_types(tensor_type, enum_type, dtype_type, missing): the types the
 * two below tell values by, given once. */
PyObject *sp_door_types(PyObject *m, PyObject *args);
/* call_begin_args(key, operation, arg_names, defaults, index, positional,
 * skip, args, kwargs, mode): call_begin, the call's own arguments bound and described
 * here; None when they do not bind so simply (the caller describes them). */
PyObject *sp_call_api_begin_args(PyObject *m, PyObject *args);
/* call_end_obj(output): call_end with the returned object as it is. */
PyObject *sp_call_api_end_obj(PyObject *m, PyObject *output);
/* dtype_code(name) / device_code(name): the core's code, or -1. */
PyObject *sp_launch_dtype_code(PyObject *m, PyObject *arg);
PyObject *sp_launch_device_code(PyObject *m, PyObject *arg);

#endif /* SP_LAUNCH_H */

/*
 * sp_door.h -- the module functions of sp_door.c (kernel libraries' API
 * calls, recording/doors.py), and whether one is open on this thread.
 */
#ifndef SP_DOOR_H
#define SP_DOOR_H

#include <Python.h>

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

/* Whether an API call begun on this thread is open (a launch inside it is
 * its part, not a record of its own). */
int sp_door_open(void);

#endif /* SP_DOOR_H */

/*
 * sp_launch.h -- the module function of sp_launch.c (Triton's kernel
 * launches, integrations/triton/door.py).
 */
#ifndef SP_LAUNCH_H
#define SP_LAUNCH_H

#include <Python.h>

/* launch(key, operation, arg_names, values, mode, error=None, convert=None):
 * records one launch, its values described here; True if it was filed. */
PyObject *sp_launch(PyObject *m, PyObject *args);

#endif /* SP_LAUNCH_H */

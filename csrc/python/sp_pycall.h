/*
 * sp_pycall.h -- what the two kinds of call that do not pass the dispatcher
 * share (sp_pycall.c): Triton's kernel launches (sp_launch.c) and kernel
 * libraries' API calls (sp_door.c). Both are described from values the
 * Python layer gathered, on a scratch of their own, as a call of an
 * operator interned by name, and filed into the profiler this thread's
 * calls go to (sp_fallback_target).
 */
#ifndef SP_PYCALL_H
#define SP_PYCALL_H

#include <Python.h>

#include "core/sp_core.h"

/* The types a value is told by, given once by door_types() (NULL before):
 * torch.Tensor, and the marker of a value not given (a parameter without
 * default, a launch option not set). */
extern PyObject *sp_pycall_tensor_type, *sp_pycall_missing;

/* logging_flags(): sp_logging() of the profiler this thread's calls go to
 * (0, or 1 with SP_LOGGING_ARGS added when arguments are recorded), 0 when
 * none (or this thread is paused): the mode launch() and the API calls are
 * given. */
PyObject *sp_pycall_logging_flags(PyObject *m, PyObject *noargs);
/* door_types(tensor_type, enum_type, dtype_type, missing): the types
 * launches and API calls tell values by, given once. */
PyObject *sp_pycall_set_types(PyObject *m, PyObject *args);

/* This thread's scratch for such calls: apart from the fallback's, whose
 * call may be in flight around this one (a custom op's Python kernel
 * launching); NULL when out of memory. */
sp_thread *sp_pycall_scratch(void);
/* The call's operator id: interned once per key (kept alive by the caller),
 * with n_returns outputs (a launch none, an API call one); -1 if it cannot
 * be. No Python error is left set. */
int sp_pycall_op(sp_thread *t, PyObject *key, PyObject *operation, PyObject *arg_names,
                 int n_returns);

/* A list or tuple that holds a tensor and nothing but tensors and None. */
int sp_pycall_tensor_seq(PyObject *v);
/* <tensor> of a torch.Tensor, strided when mode says arguments (read from
 * its at::Tensor, as the fallback writes an operator's); 0 if it cannot be
 * read (symbolic sizes: the caller writes its type's name). */
int sp_pycall_put_tensor(sp_enc *e, PyObject *t, long mode);
/* (arg, value) of a value by its type's name. */
void sp_pycall_put_opaque(sp_enc *e, int64_t arg, PyObject *v);
/* (arg, value) of a non-tensor value: None, bool, int, float, str, a tuple
 * of ints; anything else (an int past 64 bits, say) by its type's name. */
void sp_pycall_put_value(sp_enc *e, int64_t arg, PyObject *v);
/* One parameter's value: a tensor, a sequence of tensors, or a value as
 * sp_pycall_put_value writes it (an enum by "Class.MEMBER", a dtype by
 * name). */
void sp_pycall_put_item(sp_enc *e, int64_t arg, PyObject *v, long mode);
/* The call begun on t raised error: (type name, str(exception) as UTF-8
 * "surrogatepass" bytes). */
void sp_pycall_fail(sp_profiler *p, sp_thread *t, PyObject *error);

#endif /* SP_PYCALL_H */

/*
 * sp_pytensor.h -- a torch.Tensor Python object read natively (sp_pytensor.cpp).
 */
#ifndef SP_PYTENSOR_H
#define SP_PYTENSOR_H

#include <Python.h>

#include "core/sp_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends <tensor> of obj, a torch.Tensor (or subclass) object, read from
 * its at::Tensor without a Python attribute (strided when asked): 1 if
 * written; 0 if it cannot be read so (nothing appended: the caller reads
 * its attributes, or writes its type); -1 if obj is not a tensor. */
int sp_pytensor_put(sp_enc *e, PyObject *obj, int strided);

#ifdef __cplusplus
}
#endif

#endif /* SP_PYTENSOR_H */

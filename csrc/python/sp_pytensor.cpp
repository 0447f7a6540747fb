/*
 * sp_pytensor.cpp -- a torch.Tensor Python object as the core's words, read
 * from the at::Tensor it holds: part of the Python boundary, in C++ only
 * because that object is torch's THPVariable. Reading .dtype, .shape,
 * .stride() and .device from Python builds an object each (a microsecond a
 * tensor with arguments on); this reads the same fields in a few
 * nanoseconds, through the torch layer's encoder (sp_tensor_put), so a
 * door's tensor is written exactly as the fallback writes an operator's.
 */
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include "python/sp_pytensor.h"
#include "torch/sp_fallback.h"

extern "C" int sp_pytensor_put(sp_enc* e, PyObject* obj, int strided) {
  if (!THPVariable_Check(obj)) return -1;
  const at::Tensor& t = THPVariable_Unpack(obj);
  return sp_tensor_put(e, &t, strided);
}

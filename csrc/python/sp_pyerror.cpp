/*
 * sp_pyerror.cpp -- the Python side of a kernel's exception: part of the
 * Python boundary (with sp_module.c), in C++ only because a Python kernel's
 * exception crosses the dispatcher as a C++ object (pybind11's
 * error_already_set, or torch's python_error) that holds the Python one.
 *
 * The record must carry exactly type(e).__name__ and str(e) of the exception
 * the caller receives; rebuilding them from what() loses NUL bytes, empty
 * messages, lone surrogates, messages containing "\n\nAt:\n" and class names
 * that are not identifiers. So we ask the exception object itself.
 */
#include <Python.h>

#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>

#include <cstdlib>
#include <cstring>

#include "python/sp_pyerror.h"

namespace {

// str as UTF-8, lone surrogates kept ("surrogatepass"), NUL bytes kept.
// The GIL is held. false with no Python error set on failure.
bool utf8(PyObject* str, char** out, size_t* n) {
  PyObject* bytes = str ? PyUnicode_AsEncodedString(str, "utf-8", "surrogatepass") : nullptr;
  if (!bytes) {
    PyErr_Clear();
    return false;
  }
  char* data = nullptr;
  Py_ssize_t len = 0;
  bool ok = PyBytes_AsStringAndSize(bytes, &data, &len) == 0;
  if (ok) {
    *out = static_cast<char*>(std::malloc(static_cast<size_t>(len) + 1));
    ok = *out != nullptr;
    if (ok) {
      std::memcpy(*out, data, static_cast<size_t>(len));
      (*out)[len] = 0;
      *n = static_cast<size_t>(len);
    }
  }
  Py_DECREF(bytes);
  if (!ok) PyErr_Clear();
  return ok;
}

// type(value).__name__ and str(value). The GIL is held.
bool describe_value(PyObject* value, char** type, size_t* type_n, char** msg, size_t* msg_n) {
  if (!value) return false;
  PyObject* name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(value)), "__name__");
  PyObject* text = PyObject_Str(value);  // what the caller's str(e) gives
  bool ok = name && PyUnicode_Check(name) && text && utf8(name, type, type_n);
  if (ok && !utf8(text, msg, msg_n)) {
    std::free(*type);
    *type = nullptr;
    ok = false;
  }
  Py_XDECREF(name);
  Py_XDECREF(text);
  if (!ok) PyErr_Clear();  // a __str__ that raised: the fallback's text then
  return ok;
}

}  // namespace

extern "C" int sp_describe_python_error(const void* exception, char** type, size_t* type_n,
                                        char** message, size_t* message_n) {
  const auto* e = static_cast<const std::exception*>(exception);
  const auto* pyb = dynamic_cast<const pybind11::error_already_set*>(e);
  const auto* tpe = pyb ? nullptr : dynamic_cast<const python_error*>(e);
  if ((!pyb && !tpe) || !Py_IsInitialized()) return SP_ERROR;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* value = pyb ? pyb->value().ptr() : tpe->value;
  int rc = describe_value(value, type, type_n, message, message_n) ? SP_OK : SP_ERROR;
  PyGILState_Release(gil);
  return rc;
}

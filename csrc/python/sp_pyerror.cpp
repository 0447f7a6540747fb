/*
 * sp_pyerror.cpp -- the Python side of a kernel's exception: part of the
 * Python boundary (with sp_module.c), in C++ only because a Python kernel's
 * exception crosses the dispatcher as a C++ object (pybind11's
 * error_already_set, or torch's python_error) that holds the Python one.
 *
 * The record must carry type(e).__name__ and str(e) of the exception the
 * caller receives (lone surrogates, not being Unicode text, become U+FFFD in
 * the core); rebuilding them from what() loses NUL bytes, empty messages,
 * messages containing "\n\nAt:\n" and class names that are not identifiers. So we ask the exception object itself, and read
 * what() only when it cannot answer (no interpreter, a __str__ that raised).
 * All that knows Python's exceptions is here: the fallback (c10 only) calls
 * this through its describer hook.
 */
#include <Python.h>

#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "python/sp_pyerror.h"

namespace {

// A malloc'd, NUL-terminated copy of n bytes at s.
bool copy_out(const char* s, size_t n, char** out, size_t* out_n) {
  *out = static_cast<char*>(std::malloc(n + 1));
  if (!*out) return false;
  std::memcpy(*out, s, n);
  (*out)[n] = 0;
  *out_n = n;
  return true;
}

// str as UTF-8, NUL bytes kept; lone surrogates as "surrogatepass" bytes,
// which the core writes as U+FFFD (records hold only valid Unicode).
// The GIL is held. false with no Python error set on failure.
bool utf8(PyObject* str, char** out, size_t* n) {
  PyObject* bytes = str ? PyUnicode_AsEncodedString(str, "utf-8", "surrogatepass") : nullptr;
  if (!bytes) {
    PyErr_Clear();
    return false;
  }
  char* data = nullptr;
  Py_ssize_t len = 0;
  bool ok = PyBytes_AsStringAndSize(bytes, &data, &len) == 0 &&
            copy_out(data, static_cast<size_t>(len), out, n);
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

// The exception's class name and message from its what() text, when the
// object cannot tell. pybind11's error_already_set says "TypeName: message"
// (plus "\n\nAt:\n<traceback>" when there is one); false if it is not of that
// form. torch's python_error does not name its class: "Exception".
bool describe_what(const std::exception& e, bool pybind, char** type, size_t* type_n,
                   char** msg, size_t* msg_n) {
  const char* what = e.what();
  const char* colon = pybind ? std::strstr(what, ": ") : nullptr;
  const char* name = "Exception";
  size_t name_n = std::strlen(name);
  if (pybind) {
    if (!colon || colon == what) return false;
    for (const char* c = what; c < colon; c++)
      if (!(std::isalnum(static_cast<unsigned char>(*c)) || *c == '_' || *c == '.')) return false;
    name = what;
    for (const char* c = what; c < colon; c++)
      if (*c == '.') name = c + 1;  // module.Class: the class
    name_n = static_cast<size_t>(colon - name);
    what = colon + 2;
  }
  const char* at = std::strstr(what, "\n\nAt:\n");
  size_t what_n = at && pybind ? static_cast<size_t>(at - what) : std::strlen(what);
  if (!copy_out(name, name_n, type, type_n)) return false;
  if (copy_out(what, what_n, msg, msg_n)) return true;
  std::free(*type);
  *type = nullptr;
  return false;
}

}  // namespace

extern "C" int sp_describe_python_error(const void* exception, char** type, size_t* type_n,
                                        char** message, size_t* message_n) {
  const auto* e = static_cast<const std::exception*>(exception);
  const auto* pyb = dynamic_cast<const pybind11::error_already_set*>(e);
  const auto* tpe = pyb ? nullptr : dynamic_cast<const python_error*>(e);
  if (!pyb && !tpe) return SP_ERROR;  // not Python's: the fallback's own text
  bool ok = false;
  if (Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* value = pyb ? pyb->value().ptr() : tpe->value;
    ok = describe_value(value, type, type_n, message, message_n);
    PyGILState_Release(gil);
  }
  if (!ok) ok = describe_what(*e, pyb != nullptr, type, type_n, message, message_n);
  return ok ? SP_OK : SP_ERROR;
}

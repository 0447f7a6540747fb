/*
 * sp_module.c -- sgl_shapeprof._C, the CPython binding (plain C API).
 * Docstrings carry text signatures ("name($self, ...)\n--\n\n"), which
 * inspect.signature reads: tests/test_stub.py checks _C.pyi against them.
 *
 * One type, Profiler, owning one sp_profiler. This is the one place where
 * profiler errors become Python exceptions (OSError, ValueError,
 * MemoryError); nothing raised here ever reaches the model's own calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/sp_core.h"
#include "torch/sp_fallback.h"
#include "python/sp_pyerror.h"
#include "python/sp_door.h"
#include "python/sp_launch.h"
#include "python/sp_pycall.h"

typedef struct {
  PyObject_HEAD
  sp_profiler *p;
  int sync; /* wait for the device after each recorded call (debug) */
} ProfilerObject;

static PyObject *raise_for(int rc, const char *msg) {
  PyObject *type = rc == SP_NOMEM   ? PyExc_MemoryError
                   : rc == SP_BUSY  ? PyExc_BlockingIOError
                   : rc == SP_IOERR ? PyExc_OSError
                   : rc == SP_EXISTS ? PyExc_FileExistsError
                                    : PyExc_ValueError;
  PyErr_SetString(type, msg);
  return NULL;
}

static int Profiler_init(PyObject *self_, PyObject *args, PyObject *kw) {
  ProfilerObject *self = (ProfilerObject *)self_;
  static char *kwlist[] = {"path", "rank", "skip_warmup", "log_n_passes",
                           "dedupe", "phases", "args", "sync", "worker", "max_bytes",
                           "exclusive", "time", "nvtx", NULL};
  PyObject *path_obj = NULL;
  long long rank = 0, skip = 0, limit = 0, max_bytes = 0;
  int dedupe = 0, with_args = 0, sync = 0, exclusive = 0, timed = 0, nvtx = 0;
  const char *phases = NULL, *worker = NULL;
  if (self->p) {
    PyErr_SetString(PyExc_RuntimeError, "Profiler is already initialised");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|LLLpzppzLpii", kwlist,
                                   PyUnicode_FSConverter, &path_obj, &rank,
                                   &skip, &limit, &dedupe, &phases, &with_args, &sync, &worker,
                                   &max_bytes, &exclusive, &timed, &nvtx))
    return -1;
  sp_config cfg = {.path = PyBytes_AS_STRING(path_obj), .rank = rank, .skip_warmup = skip,
                   .log_n_passes = limit, .dedupe = dedupe, .phases = phases, .args = with_args,
                   .worker = worker, .max_bytes = max_bytes, .exclusive = exclusive,
                   .time = timed, .nvtx = nvtx};
  if (timed < 0 || timed > SP_TIME_KERNELS) {
    Py_DECREF(path_obj);
    PyErr_SetString(PyExc_ValueError, "time: 0, 1 (each call's wall time) or 2 (and its GPU kernels)");
    return -1;
  }
  if (nvtx < 0 || nvtx > SP_RANGES_ROCTX) {
    Py_DECREF(path_obj);
    PyErr_SetString(PyExc_ValueError, "nvtx: 0, 1 (NVTX) or 2 (rocTX)");
    return -1;
  }
  int rc = sp_fallback_install();
  cfg.dispatch_key = sp_fallback_key(); /* the route install chose */
  /* Python kernels' exceptions are described from the exception object */
  sp_fallback_set_describer(sp_describe_python_error);
  if (rc != SP_OK) {
    Py_DECREF(path_obj);
    raise_for(SP_ERROR, sp_fallback_error());
    return -1;
  }
  sp_profiler *p = NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = sp_open(&cfg, &p);
  Py_END_ALLOW_THREADS
  Py_DECREF(path_obj);
  if (rc != SP_OK) {
    raise_for(rc, sp_errmsg(p));
    sp_free(p);
    return -1;
  }
  sp_install_signal_handlers();
  self->p = p;
  self->sync = sync;
  return 0;
}

static void Profiler_dealloc(PyObject *self_) {
  ProfilerObject *self = (ProfilerObject *)self_;
  if (self->p) {
    sp_close(self->p);
    sp_fallback_disable(); /* after: the key follows this thread's pass */
    /* Freed once no thread points at it any more (see sp_free). */
    sp_free(self->p);
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check(ProfilerObject *self) {
  if (!self->p) {
    PyErr_SetString(PyExc_RuntimeError, "Profiler is not initialised");
    return 0;
  }
  return 1;
}

/* A pass was opened on this thread: the fallback's key follows whether it
 * is logged; sync mode too, but never for a graph's capture (waiting for the
 * device while a stream captures breaks the capture). */
static PyObject *pass_opened(ProfilerObject *self, int logged, int capture) {
  if (logged) sp_fallback_enable();
  else sp_fallback_disable();
  sp_fallback_sync(logged && self->sync && !capture);
  return PyBool_FromLong(logged);
}

/* Once or twice per forward pass: fast-call, no argument tuple. The phase
 * as PyArg_ParseTuple's "z" takes it (str or None; a NUL or a lone
 * surrogate is a ValueError). */
static PyObject *Profiler_pass_begin(PyObject *self_, PyObject *const *args, Py_ssize_t nargs) {
  ProfilerObject *self = (ProfilerObject *)self_;
  const char *phase = NULL;
  if (!check(self)) return NULL;
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "pass_begin() takes at most 1 argument (%zd given)", nargs);
    return NULL;
  }
  if (nargs == 1 && args[0] != Py_None) {
    if (!PyUnicode_Check(args[0])) {
      PyErr_Format(PyExc_TypeError, "pass_begin() argument 1 must be str or None, not %.50s",
                   Py_TYPE(args[0])->tp_name);
      return NULL;
    }
    Py_ssize_t n = 0;
    phase = PyUnicode_AsUTF8AndSize(args[0], &n);
    if (!phase) return NULL;
    if (strlen(phase) != (size_t)n) {
      PyErr_SetString(PyExc_ValueError, "embedded null character");
      return NULL;
    }
  }
  return pass_opened(self, sp_pass_begin(self->p, phase), 0);
}

static PyObject *Profiler_graph_begin(PyObject *self_, PyObject *args) {
  ProfilerObject *self = (ProfilerObject *)self_;
  const char *phase = NULL;
  long long key = 0;
  if (!check(self) || !PyArg_ParseTuple(args, "zL", &phase, &key)) return NULL;
  return pass_opened(self, sp_graph_begin(self->p, phase, key), 1);
}

static PyObject *Profiler_graph_replay(PyObject *self_, PyObject *args) {
  ProfilerObject *self = (ProfilerObject *)self_;
  long long key = 0, n = 1, real = -1;
  if (!check(self) || !PyArg_ParseTuple(args, "L|LL", &key, &n, &real)) return NULL;
  return PyBool_FromLong(sp_graph_replay(self->p, key, real, n));
}

static PyObject *Profiler_pass_size(PyObject *self_, PyObject *args) {
  ProfilerObject *self = (ProfilerObject *)self_;
  long long size = -1;
  if (!check(self) || !PyArg_ParseTuple(args, "L", &size)) return NULL;
  return PyBool_FromLong(sp_pass_size(self->p, size));
}

static PyTypeObject ProfilerType;

/* A capture kept by another profiler (closed), written in as p's own when
 * this thread's logged pass replays its graph; text: its records file. */
static PyObject *Profiler_graph_adopt(PyObject *self_, PyObject *args) {
  ProfilerObject *self = (ProfilerObject *)self_;
  PyObject *kept_obj;
  Py_buffer text;
  if (!check(self) || !PyArg_ParseTuple(args, "O!y*", &ProfilerType, &kept_obj, &text)) return NULL;
  ProfilerObject *kept = (ProfilerObject *)kept_obj;
  int adopted = 0;
  if (kept->p) {
    Py_BEGIN_ALLOW_THREADS
    adopted = sp_graph_adopt(self->p, kept->p, text.buf, (size_t)text.len);
    Py_END_ALLOW_THREADS
  }
  PyBuffer_Release(&text);
  return PyBool_FromLong(adopted);
}

static PyObject *Profiler_graph_known(PyObject *self_, PyObject *args) {
  ProfilerObject *self = (ProfilerObject *)self_;
  long long key = 0;
  const char *phase = NULL;
  if (!check(self) || !PyArg_ParseTuple(args, "Lz", &key, &phase)) return NULL;
  return PyBool_FromLong(sp_graph_known(self->p, key, phase));
}

static PyObject *Profiler_pass_reopen(PyObject *self_, PyObject *noargs) {
  ProfilerObject *self = (ProfilerObject *)self_;
  (void)noargs;
  if (!check(self)) return NULL;
  return pass_opened(self, sp_pass_reopen(self->p), 0);
}

static PyObject *Profiler_pass_end(PyObject *self_, PyObject *noargs) {
  ProfilerObject *self = (ProfilerObject *)self_;
  (void)noargs;
  if (!check(self)) return NULL;
  /* Without the GIL only when it may wait for the flusher thread (it holds
   * the pass lock while it cuts the file) or flush here (no thread could
   * be started): letting go of the GIL at every pass end costs its hand-off,
   * and in a server another thread may take it for a while. */
  if (!sp_pass_end_nowait(self->p)) {
    Py_BEGIN_ALLOW_THREADS
    sp_pass_end(self->p);
    Py_END_ALLOW_THREADS
  }
  sp_fallback_disable(); /* after: the key follows this thread's pass */
  Py_RETURN_NONE;
}

static PyObject *Profiler_close(PyObject *self_, PyObject *noargs) {
  ProfilerObject *self = (ProfilerObject *)self_;
  (void)noargs;
  if (!check(self)) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = sp_close(self->p);
  Py_END_ALLOW_THREADS
  sp_fallback_disable(); /* after: the key follows this thread's pass */
  if (rc != SP_OK) return raise_for(rc, sp_errmsg(self->p));
  Py_RETURN_NONE;
}

static PyObject *Profiler_stats(PyObject *self_, PyObject *noargs) {
  ProfilerObject *self = (ProfilerObject *)self_;
  (void)noargs;
  if (!check(self)) return NULL;
  sp_stats s;
  sp_get_stats(self->p, &s);
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "records", s.records,
                       "passes", s.passes, "logged_passes", s.logged_passes,
                       "dedupe_skipped", s.dedupe_skipped, "signatures",
                       s.signatures, "errors", s.errors, "bytes", s.bytes);
}

static PyObject *Profiler_get_logging(PyObject *self_, void *c) {
  ProfilerObject *self = (ProfilerObject *)self_;
  (void)c;
  return PyBool_FromLong(self->p && sp_logging(self->p));
}
static PyObject *Profiler_get_path(PyObject *self_, void *c) {
  ProfilerObject *self = (ProfilerObject *)self_;
  (void)c;
  if (!check(self)) return NULL;
  return PyUnicode_DecodeFSDefault(sp_records_path(self->p));
}
static PyObject *Profiler_get_summary_path(PyObject *self_, void *c) {
  ProfilerObject *self = (ProfilerObject *)self_;
  (void)c;
  if (!check(self)) return NULL;
  return PyUnicode_DecodeFSDefault(sp_summary_path(self->p));
}

static PyObject *mod_roctx_load(PyObject *m, PyObject *arg) {
  (void)m;
  PyObject *path = NULL;
  if (!PyUnicode_FSConverter(arg, &path)) return NULL;
  char err[512];
  int rc = sp_roctx_load(PyBytes_AS_STRING(path), err, sizeof err);
  Py_DECREF(path);
  if (rc) return PyErr_Format(PyExc_OSError, "%s", err);
  Py_RETURN_NONE;
}

static PyObject *mod_cupti_built(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  return PyLong_FromLong(sp_cupti_built());
}

static PyObject *mod_cupti_start(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *lib = NULL, *out = NULL, *owner = NULL;
  if (!PyArg_ParseTuple(args, "O&O&O!:cupti_start", PyUnicode_FSConverter, &lib, PyUnicode_FSConverter, &out,
                        &ProfilerType, &owner)) {
    Py_XDECREF(lib);
    Py_XDECREF(out);
    return NULL;
  }
  if (!check((ProfilerObject *)owner)) {
    Py_DECREF(lib);
    Py_DECREF(out);
    return NULL;
  }
  char err[512];
  int rc;
  const sp_profiler *p = ((ProfilerObject *)owner)->p;
  Py_BEGIN_ALLOW_THREADS /* CUPTI may flush buffers whose callback needs no GIL, but takes time */
  rc = sp_cupti_start(p, PyBytes_AS_STRING(lib), PyBytes_AS_STRING(out), err, sizeof err);
  Py_END_ALLOW_THREADS
  Py_DECREF(lib);
  Py_DECREF(out);
  /* ImportError: that library cannot be used (another may); OSError: CUPTI or this process refuses */
  if (rc == SP_CUPTI_NO_LIBRARY) return PyErr_Format(PyExc_ImportError, "%s", err);
  if (rc) return PyErr_Format(PyExc_OSError, "%s", err);
  Py_RETURN_NONE;
}

static PyObject *mod_cupti_stop(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  char err[512];
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = sp_cupti_stop(err, sizeof err);
  Py_END_ALLOW_THREADS
  if (rc) return PyErr_Format(PyExc_OSError, "%s", err);
  Py_RETURN_NONE;
}

static PyObject *mod_cupti_region_begin(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  /* inside an API call the launch is that call's part (sp_launch): its
   * kernels are under the call's id */
  return PyLong_FromUnsignedLongLong(sp_door_open() ? 0 : sp_cupti_region_begin());
}

static PyObject *mod_cupti_region_end(PyObject *m, PyObject *arg) {
  (void)m;
  unsigned long long ext = PyLong_AsUnsignedLongLong(arg);
  if (ext == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  sp_cupti_region_end(ext);
  Py_RETURN_NONE;
}

static PyObject *mod_nvtx_built(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  return PyBool_FromLong(sp_nvtx_built());
}

static PyMethodDef Profiler_methods[] = {
    {"pass_begin", (PyCFunction)(void (*)(void))Profiler_pass_begin, METH_FASTCALL,
     "pass_begin($self, phase=None, /)\n--\n\nStart a forward pass; True if logged."},
    {"graph_begin", Profiler_graph_begin, METH_VARARGS,
     "graph_begin($self, phase, key, /)\n--\n\n"
     "Start recording the capture of graph key; True if logged."},
    {"graph_replay", Profiler_graph_replay, METH_VARARGS,
     "graph_replay($self, key, n=1, real=-1, /)\n--\n\nCount n replays of graph key that served "
     "real size `real` (-1: not known); True if counted."},
    {"pass_size", Profiler_pass_size, METH_VARARGS,
     "pass_size($self, size, /)\n--\n\nThe server's batch size of this thread's open logged pass "
     "(counted in eager_sizes if it replays no graph); True if noted."},
    {"graph_adopt", Profiler_graph_adopt, METH_VARARGS,
     "graph_adopt($self, kept, text, /)\n--\n\nWrite in the graph capture that the closed "
     "profiler kept recorded (text: its records file), as this thread's logged pass replays it; "
     "True if adopted."},
    {"graph_known", Profiler_graph_known, METH_VARARGS,
     "graph_known($self, key, phase, /)\n--\n\nList graph key (captured elsewhere) in the "
     "summary's graphs when the phase filter takes its phase; True if listed."},
    {"pass_reopen", Profiler_pass_reopen, METH_NOARGS,
     "pass_reopen($self, /)\n--\n\nReopen the pass that ended last; True if logged."},
    {"pass_end", Profiler_pass_end, METH_NOARGS,
     "pass_end($self, /)\n--\n\nEnd the forward pass."},
    {"close", Profiler_close, METH_NOARGS,
     "close($self, /)\n--\n\nTrim the records file and write the summary (idempotent)."},
    {"stats", Profiler_stats, METH_NOARGS,
     "stats($self, /)\n--\n\nCounters so far, as a dict."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Profiler_getset[] = {
    {"logging", Profiler_get_logging, NULL,
     "True while a logged pass is open.", NULL},
    {"path", Profiler_get_path, NULL, "The records file.", NULL},
    {"summary_path", Profiler_get_summary_path, NULL,
     "The summary file.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject ProfilerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sgl_shapeprof._C.Profiler",
    .tp_basicsize = sizeof(ProfilerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Profiler(path, rank=0, skip_warmup=0, log_n_passes=0, "
              "dedupe=False, phases=None, args=False, sync=False, worker=None, max_bytes=0, "
              "exclusive=False, time=0, nvtx=False)\n--\n\nThe native profiler. max_bytes: the "
              "records file's cap (0: the default, -1: none); exclusive: the file must not exist; "
              "time: 1 each call timed, 2 and its GPU kernels (cupti_start()); nvtx: an NVTX range per "
              "call (nvtx_built()).",
    .tp_new = PyType_GenericNew,
    .tp_init = Profiler_init,
    .tp_dealloc = Profiler_dealloc,
    .tp_methods = Profiler_methods,
    .tp_getset = Profiler_getset,
};

static PyObject *mod_stop_sync(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  sp_fallback_sync(0);
  Py_RETURN_NONE;
}

static PyObject *mod_thread_enabled(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  return PyBool_FromLong(sp_fallback_thread_enabled());
}

static PyObject *mod_fallback_installed(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  return PyBool_FromLong(sp_fallback_installed());
}

static PyObject *mod_dispatch_key(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  return PyUnicode_FromString(sp_fallback_key());
}

static PyObject *mod_pause_thread(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  return PyBool_FromLong(sp_fallback_pause());
}

static PyObject *mod_resume_thread(PyObject *m, PyObject *noargs) {
  (void)m;
  (void)noargs;
  sp_fallback_resume();
  Py_RETURN_NONE;
}

static PyObject *mod_sync_stats(PyObject *m, PyObject *noargs) {
  static const char *const capture[] = {"unresolved", "guard", "driver", "none"};
  sp_sync_stats st;
  (void)m;
  (void)noargs;
  sp_fallback_sync_stats(&st);
  return Py_BuildValue("{s:s,s:K,s:K,s:K}", "capture", capture[st.capture], "waited",
                       (unsigned long long)st.waited, "capturing", (unsigned long long)st.capturing,
                       "unknown", (unsigned long long)st.unknown);
}

static PyMethodDef module_methods[] = {
    {"pause_thread", mod_pause_thread, METH_NOARGS,
     "pause_thread($module, /)\n--\n\n"
     "Stop logging on this thread until resume_thread() (compilers)."},
    {"resume_thread", mod_resume_thread, METH_NOARGS,
     "resume_thread($module, /)\n--\n\nUndo pause_thread() if this thread's pass is still logged."},
    {"stop_sync", mod_stop_sync, METH_NOARGS,
     "stop_sync($module, /)\n--\n\n"
     "No sync mode on this thread until its next pass (a graph is being captured)."},
    {"sync_stats", mod_sync_stats, METH_NOARGS,
     "sync_stats($module, /)\n--\n\n"
     "Sync mode in this process: how it tells a graph capture ('guard', 'driver', 'none', "
     "'unresolved'), calls it waited after, and did not (capturing, unknown)."},
    {"thread_enabled", mod_thread_enabled, METH_NOARGS,
     "thread_enabled($module, /)\n--\n\nWhether the fallback's dispatch key is in this thread's TLS."},
    {"fallback_installed", mod_fallback_installed, METH_NOARGS,
     "fallback_installed($module, /)\n--\n\n"
     "Whether the dispatcher fallback is registered in this process."},
    {"dispatch_key", mod_dispatch_key, METH_NOARGS,
     "dispatch_key($module, /)\n--\n\nThe dispatch key the fallback sits on (its route): 'Fake', or "
     "'TESTING_ONLY_GenericMode' where this torch has a fallback on Fake; 'Fake' before the first profiler."},
    {"roctx_load", mod_roctx_load, METH_O,
     "roctx_load($module, path, /)\n--\n\nLoads rocTX's ranges from the library at path (libroctx64.so) for "
     "Profiler(nvtx=2); OSError with the loader's reason."},
    {"cupti_built", mod_cupti_built, METH_NOARGS,
     "cupti_built($module, /)\n--\n\nThe CUPTI_API_VERSION of the headers this build reads CUPTI with (GPU "
     "kernel times), or 0: none were found when it was built."},
    {"cupti_start", mod_cupti_start, METH_VARARGS,
     "cupti_start($module, library, kernels_path, owner, /)\n--\n\nStarts the process's GPU kernel collector "
     "for the Profiler owner (time=2): CUPTI from library, its lines to a new file at kernels_path; "
     "ImportError when that library cannot be used (another may), OSError when CUPTI or the process refuses."},
    {"cupti_stop", mod_cupti_stop, METH_NOARGS,
     "cupti_stop($module, /)\n--\n\nFlushes the device's kernels to the kernels file and stops; OSError if "
     "lines were lost."},
    {"cupti_region_begin", mod_cupti_region_begin, METH_NOARGS,
     "cupti_region_begin($module, /)\n--\n\nFor a launch recorded after it ran: pushes an id around it "
     "and returns it (0: no collector runs); give it to launch(gpu_ext=) and cupti_region_end."},
    {"cupti_region_end", mod_cupti_region_end, METH_O,
     "cupti_region_end($module, ext, /)\n--\n\nPops the id cupti_region_begin pushed."},
    {"nvtx_built", mod_nvtx_built, METH_NOARGS,
     "nvtx_built($module, /)\n--\n\nWhether this build has NVTX ranges (its headers were found when it was built)."},
    {"logging_flags", sp_pycall_logging_flags, METH_NOARGS,
     "logging_flags($module, /)\n--\n\n"
     "The logging flags of the profiler this thread's calls go to (its sp_logging): 0 not "
     "recording, 1 recording, 3 with arguments; a launch's and an API call's mode."},
    {"launch", sp_launch, METH_VARARGS,
     "launch($module, key, operation, arg_names, values, mode, error=None, convert=None, start_ns=0, "
     "end_ns=0, gpu_ext=0, /)\n--\n\n"
     "Record one kernel launch (integrations/triton/door.py), a value per name; True if it was filed."},
    {"door_types", sp_pycall_set_types, METH_VARARGS,
     "door_types($module, tensor_type, enum_type, dtype_type, missing, /)\n--\n\n"
     "The types call_begin_args tells values by (recording/doors.py), given once."},
    {"call_begin_args", sp_call_api_begin_args, METH_VARARGS,
     "call_begin_args($module, key, operation, arg_names, defaults, index, positional, skip, args, kwargs, mode, other=None, /)\n--\n\n"
     "A kernel library's API call begins (recording/doors.py); True if recorded (call_end_obj follows); None: bind what it names, the rest as other."},
    {"call_end_obj", sp_call_api_end_obj, METH_VARARGS,
     "call_end_obj($module, output, error=None, /)\n--\n\n"
     "The API call begun on this thread returned output, or raised error."},
    {"door_call", (PyCFunction)(void (*)(void))sp_door_call, METH_FASTCALL,
     "door_call($module, api, fn, args, kwargs, mode, /)\n--\n\nfn(*args, **kwargs) recorded as a kernel "
     "library's API call in one native call; the missing marker when it must take the long way."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "sgl_shapeprof._C",
    "Native core of sgl_shapeprof.", -1, module_methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void) {
  if (PyType_Ready(&ProfilerType) < 0) return NULL;
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  Py_INCREF(&ProfilerType);
  if (PyModule_AddObject(m, "Profiler", (PyObject *)&ProfilerType) < 0) {
    Py_DECREF(&ProfilerType);
    Py_DECREF(m);
    return NULL;
  }
  /* Profiler(nvtx=): which ranges (sp_core.h) */
  if (PyModule_AddIntConstant(m, "RANGES_NVTX", SP_RANGES_NVTX) < 0 ||
      PyModule_AddIntConstant(m, "RANGES_ROCTX", SP_RANGES_ROCTX) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}

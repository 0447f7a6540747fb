/*
 * sp_fallback.h -- the torch layer's API, callable from C: the boxed fallback
 * (sp_fallback.cpp) and its tensor encoder (sp_tensor_put, sp_encode.cpp).
 */
#ifndef SP_FALLBACK_H
#define SP_FALLBACK_H

#include "core/sp_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the fallback once per process (not before the first profiler:
 * off means off). SP_OK, or an error that sp_fallback_error() explains. */
int sp_fallback_install(void);
const char *sp_fallback_error(void);
int sp_fallback_installed(void);
/* The key follows the calling thread's pass (sp_pass_current): its calls go
 * to the profiler the core says (sp_pass_target), and threads that
 * inherit its TLS go to the one whose logged pass began last.
 * sp_fallback_enable puts the key into this thread's TLS (a logged pass of
 * it just began); sp_fallback_disable takes it out unless this thread's
 * own pass logs (call it after a pass ends or opens unlogged, and after a
 * close). */
void sp_fallback_enable(void);
void sp_fallback_disable(void);
/* Sync mode on the calling thread until its pass ends (sp_fallback_disable):
 * after each recorded call with an input on a device (CUDA), wait for the
 * device, so that an asynchronous kernel failure is recorded as the error
 * of the call that launched it. Never while a graph is captured (the
 * caller's to know). */
void sp_fallback_sync(int on);
/* What sync mode did in this process, for the GPU check's report: how it
 * tells that a stream captures a graph (SP_CAPTURE_GUARD: the device guard,
 * torch 2.13+; SP_CAPTURE_DRIVER: cuStreamIsCapturing of the loaded CUDA
 * driver, torch 2.11; SP_CAPTURE_NONE: neither, so it never waits;
 * SP_CAPTURE_UNRESOLVED: the driver not asked yet), and how many calls it
 * waited after, and did not because a capture was on or could not be told. */
enum { SP_CAPTURE_UNRESOLVED, SP_CAPTURE_GUARD, SP_CAPTURE_DRIVER, SP_CAPTURE_NONE };
typedef struct {
  int capture;
  uint64_t waited, capturing, unknown;
} sp_sync_stats;
void sp_fallback_sync_stats(sp_sync_stats *out);
/* Takes the key out of this thread's TLS while something that is not the
 * model runs (a compiler); returns 1 if it was in. sp_fallback_resume puts it back
 * if this thread's pass is still logged. */
int sp_fallback_pause(void);
void sp_fallback_resume(void);
/* The profiler that a call on this thread goes to now, for calls that do not
 * pass the dispatcher (kernel launches: sp_launch_intern): sp_pass_target's
 * (the core then files the call as sp_call_begin says); NULL while this
 * thread is paused or that profiler does not log. Valid while the caller
 * holds what keeps the profiler (the interpreter lock, for the Python
 * module). */
sp_profiler *sp_fallback_target(void);
/* The op id + 1 of the recorded call running on the calling thread (its
 * kernel runs now), else 0: a call recorded from inside it is its work
 * (sp_thread_public.within). */
int sp_fallback_open_op(void);
/* Appends <tensor> of an at::Tensor (given as `const at::Tensor *`: this
 * header is C), strided when asked and it has strides, by the torch layer's
 * one tensor encoder (sp_encode.h's put_tensor, which writes an operator's
 * too); 1 if written, 0 if it cannot be read (undefined, symbolic or nested
 * sizes: nothing appended). For values that reach us outside the dispatcher
 * (a kernel library's API call, a launch). Defined in sp_encode.cpp. */
int sp_tensor_put(sp_enc *e, const void *tensor, int strided);
/* The dispatch key the fallback sits on, its route: "Fake", or on a torch
 * that has its own fallback there, "TESTING_ONLY_GenericMode" (see
 * sp_fallback.cpp's Route); "Fake" before sp_fallback_install. */
const char *sp_fallback_key(void);
/* Whether the key is in the calling thread's TLS (for tests). */
int sp_fallback_thread_enabled(void);

/* A kernel raised an exception that is not a c10::Error (a Python kernel's,
 * say): a describer, given it as a `const std::exception *`, sets the class
 * name the caller will see and str() of the exception (malloc'd, UTF-8 with
 * lone surrogates passed through, NUL bytes allowed) and returns SP_OK, or
 * returns SP_ERROR when it does not know the exception. The fallback knows
 * only c10; the Python layer registers one (sp_pyerror.cpp). */
typedef int (*sp_error_describer)(const void *exception, char **type, size_t *type_n,
                                  char **message, size_t *message_n);
void sp_fallback_set_describer(sp_error_describer describer);

#ifdef __cplusplus
}
#endif
#endif /* SP_FALLBACK_H */

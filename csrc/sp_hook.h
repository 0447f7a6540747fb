/*
 * sp_hook.h -- the dispatcher hook (sp_fallback.cpp), callable from C.
 */
#ifndef SP_HOOK_H
#define SP_HOOK_H

#include "sp_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the fallback once per process (not before the first profiler:
 * off means off). SP_OK, or an error that sp_hook_error() explains. */
int sp_hook_install(void);
const char *sp_hook_error(void);
int sp_hook_installed(void);
/* Puts the hook's key into the calling thread's TLS and makes p the profiler
 * its calls go to (and that of threads which inherit its TLS). */
void sp_hook_enable(sp_profiler *p);
/* Takes the key out of the calling thread's TLS (if it was enabled for p, or
 * p is NULL). */
void sp_hook_disable(sp_profiler *p);
/* Takes the key out of this thread's TLS while something that is not the
 * model runs (a compiler); returns 1 if it was in. sp_hook_resume puts it back
 * if this thread's pass is still logged. */
int sp_hook_pause(void);
void sp_hook_resume(void);
/* Whether the key is in the calling thread's TLS (for tests). */
int sp_hook_thread_enabled(void);

#ifdef __cplusplus
}
#endif
#endif /* SP_HOOK_H */

/*
 * sp_fallback.h -- the boxed fallback (sp_fallback.cpp), callable from C.
 */
#ifndef SP_FALLBACK_H
#define SP_FALLBACK_H

#include "sp_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the fallback once per process (not before the first profiler:
 * off means off). SP_OK, or an error that sp_fallback_error() explains. */
int sp_fallback_install(void);
const char *sp_fallback_error(void);
int sp_fallback_installed(void);
/* Puts the fallback's key into the calling thread's TLS and makes p the profiler
 * its calls go to (and that of threads which inherit its TLS). */
void sp_fallback_enable(sp_profiler *p);
/* Takes the key out of the calling thread's TLS (if it was enabled for p, or
 * p is NULL). */
void sp_fallback_disable(sp_profiler *p);
/* Takes the key out of this thread's TLS while something that is not the
 * model runs (a compiler); returns 1 if it was in. sp_fallback_resume puts it back
 * if this thread's pass is still logged. */
int sp_fallback_pause(void);
void sp_fallback_resume(void);
/* Whether the key is in the calling thread's TLS (for tests). */
int sp_fallback_thread_enabled(void);

#ifdef __cplusplus
}
#endif
#endif /* SP_FALLBACK_H */

/* sp_lock.c -- The lock order (sp_internal.h's top), checked in debug builds.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). Release builds compile nothing here. */
#include "sp_internal.h"

#ifdef SP_DEBUG
static _Thread_local unsigned t_held; /* a bit per SP_LOCK_* level held */

SP_PRIVATE unsigned *lock_held(void) { return &t_held; }
#endif

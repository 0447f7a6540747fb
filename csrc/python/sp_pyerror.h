/*
 * sp_pyerror.h -- describes a Python exception carried through the
 * dispatcher (sp_pyerror.cpp); registered with the fallback by sp_module.c.
 */
#ifndef SP_PYERROR_H
#define SP_PYERROR_H

#include <stddef.h>

#include "core/sp_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An sp_error_describer (sp_fallback.h). */
int sp_describe_python_error(const void *exception, char **type, size_t *type_n,
                             char **message, size_t *message_n);

#ifdef __cplusplus
}
#endif
#endif /* SP_PYERROR_H */

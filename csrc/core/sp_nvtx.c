/* sp_nvtx.c -- NVTX ranges (sp_config.nvtx): one range per recorded call,
 * named by its operation and input shapes (format_range_name), pushed as the
 * call begins and popped as it ends, in the "sgl_shapeprof" domain. Under
 * nsys (or any NVTX tool) each kernel a call launches then sits under the
 * range of the shapes that launched it. NVTX v3 is header-only: it loads the
 * tool that NVTX_INJECTION64_PATH names at its first call, and without one
 * every call is a test of a null function pointer. Built only where the
 * headers were found (SP_HAVE_NVTX, setup.py); without them, sp_nvtx_built()
 * says so and nothing here runs.
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

#ifdef SP_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>

static nvtxDomainHandle_t g_domain;
static pthread_once_t g_domain_once = PTHREAD_ONCE_INIT;

static void make_domain(void) { g_domain = nvtxDomainCreateA("sgl_shapeprof"); }

int sp_nvtx_built(void) { return 1; }

/* The registered name of t's call: from the thread's cache by its inputs'
 * key hash (salted by phase and graph: a few names more, never a wrong
 * one), else formatted and registered once. A tool that is not there
 * registers nothing (NULL): cached too, so that the name is not made again
 * per call. */
static nvtxStringHandle_t range_name(sp_thread *t) {
  if (!t->nvtx_names && !(t->nvtx_names = calloc(SP_NVTX_NAMES, sizeof *t->nvtx_names))) return NULL;
  uint64_t h = t->sig_hash | 1; /* 0: an empty slot */
  struct nvtx_name *slot = &t->nvtx_names[h & (SP_NVTX_NAMES - 1)];
  if (slot->hash == h) return (nvtxStringHandle_t)slot->handle;
  if (!format_range_name(t, &t->line)) return NULL;
  nvtxStringHandle_t s = nvtxDomainRegisterStringA(g_domain, t->line.p);
  slot->hash = h;
  slot->handle = s;
  return s;
}

SP_PRIVATE void nvtx_push(sp_thread *t) {
  pthread_once(&g_domain_once, make_domain);
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = range_name(t);
  nvtxDomainRangePushEx(g_domain, &a);
  t->nvtx_open = 1;
}

SP_PRIVATE void nvtx_pop(sp_thread *t) {
  t->nvtx_open = 0;
  nvtxDomainRangePop(g_domain);
}
#else
int sp_nvtx_built(void) { return 0; }
SP_PRIVATE void nvtx_push(sp_thread *t) { (void)t; }
SP_PRIVATE void nvtx_pop(sp_thread *t) { t->nvtx_open = 0; }
#endif

/* sp_nvtx.c -- ranges (sp_config.nvtx): one range per recorded call, named
 * by its operation and input shapes (format_range_name), pushed as the call
 * begins and popped as it ends. Under nsys, rocprof or RPD each kernel a
 * call launches then sits under the range of the shapes that launched it.
 *
 * NVTX (SP_RANGES_NVTX), in the "sgl_shapeprof" domain: NVTX v3 is
 * header-only; it loads the tool that NVTX_INJECTION64_PATH names at its
 * first call, and without one every call is a test of a null function
 * pointer. Built only where the headers were found (SP_HAVE_NVTX, setup.py);
 * without them, sp_nvtx_built() says so.
 *
 * rocTX (SP_RANGES_ROCTX), ROCm's: no headers needed, its two functions are
 * looked up in the library sp_roctx_load() opens (libroctx64.so), which
 * hands the ranges to the tool attached, if any.
 *
 * A part of the core: compiled alone, or inside the amalgamation sp_core.c
 * (see sp_internal.h). */
#include "sp_internal.h"

#include <dlfcn.h>

#ifdef SP_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

/* The thread's cached name of t's call, by its inputs' key hash (salted by
 * phase and graph: a few names more, never a wrong one): its slot in
 * *names (allocated on first use), or NULL without memory. */
static struct nvtx_name *name_slot(struct nvtx_name **names, sp_thread *t) {
  if (!*names && !(*names = calloc(SP_NVTX_NAMES, sizeof **names))) return NULL;
  uint64_t h = t->sig_hash | 1; /* 0: an empty slot */
  return &(*names)[h & (SP_NVTX_NAMES - 1)];
}

/* ---- rocTX ---- */
typedef int (*roctx_push_fn)(const char *);
typedef int (*roctx_pop_fn)(void);
static roctx_push_fn g_roctx_push;
static roctx_pop_fn g_roctx_pop;

int sp_roctx_load(const char *path, char *err, size_t n) {
  if (g_roctx_push && g_roctx_pop) return 0;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const char *why = lib ? NULL : dlerror();
  roctx_push_fn push = lib ? (roctx_push_fn)dlsym(lib, "roctxRangePushA") : NULL;
  roctx_pop_fn pop = lib ? (roctx_pop_fn)dlsym(lib, "roctxRangePop") : NULL;
  if (!push || !pop) {
    snprintf(err, n, "%s", why ? why : "it has no roctxRangePushA and roctxRangePop");
    if (lib) dlclose(lib);
    return -1;
  }
  g_roctx_pop = pop; /* before the push it pairs with */
  g_roctx_push = push;
  return 0;
}

/* t's call's name as text, made once per slot (the string is the slot's). */
static const char *roctx_name(sp_thread *t) {
  struct nvtx_name *slot = name_slot(&t->roctx_names, t);
  if (!slot) return NULL;
  uint64_t h = t->sig_hash | 1;
  if (slot->hash == h) return slot->handle;
  if (!format_range_name(t, &t->line)) return NULL;
  char *s = strdup(t->line.p);
  if (!s) return NULL;
  free(slot->handle);
  slot->hash = h;
  slot->handle = s;
  return s;
}

/* ---- NVTX ---- */
#ifdef SP_HAVE_NVTX
static nvtxDomainHandle_t g_domain;
static pthread_once_t g_domain_once = PTHREAD_ONCE_INIT;

static void make_domain(void) { g_domain = nvtxDomainCreateA("sgl_shapeprof"); }

int sp_nvtx_built(void) { return 1; }

/* The registered name of t's call, registered once per slot. A tool that is
 * not there registers nothing (NULL): cached too, so that the name is not
 * made again per call. */
static nvtxStringHandle_t range_name(sp_thread *t) {
  struct nvtx_name *slot = name_slot(&t->nvtx_names, t);
  if (!slot) return NULL;
  uint64_t h = t->sig_hash | 1;
  if (slot->hash == h) return (nvtxStringHandle_t)slot->handle;
  if (!format_range_name(t, &t->line)) return NULL;
  nvtxStringHandle_t s = nvtxDomainRegisterStringA(g_domain, t->line.p);
  slot->hash = h;
  slot->handle = s;
  return s;
}

static void nvtx_range_push(sp_thread *t) {
  pthread_once(&g_domain_once, make_domain);
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = range_name(t);
  nvtxDomainRangePushEx(g_domain, &a);
  t->nvtx_open = SP_RANGES_NVTX;
}

static void nvtx_range_pop(void) { nvtxDomainRangePop(g_domain); }
#else
int sp_nvtx_built(void) { return 0; }
static void nvtx_range_push(sp_thread *t) { (void)t; }
static void nvtx_range_pop(void) {}
#endif

SP_PRIVATE void nvtx_push(sp_thread *t, int ranges) {
  if (ranges == SP_RANGES_ROCTX) {
    const char *name = g_roctx_push ? roctx_name(t) : NULL;
    if (name && g_roctx_push(name) >= 0) t->nvtx_open = SP_RANGES_ROCTX;
    return;
  }
  nvtx_range_push(t);
}

SP_PRIVATE void nvtx_pop(sp_thread *t) {
  int open = t->nvtx_open;
  t->nvtx_open = 0;
  if (open == SP_RANGES_ROCTX) g_roctx_pop();
  else if (open) nvtx_range_pop();
}

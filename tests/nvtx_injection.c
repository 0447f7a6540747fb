/* A stand-in NVTX tool (as nsys is one), built by tests/test_nvtx.py: NVTX v3
 * loads the library NVTX_INJECTION64_PATH names and calls its
 * InitializeInjectionNvtx2, which takes over the domain functions. It writes
 * what it is told to the file NVTX_TEST_LOG names, one line each:
 * "domain NAME", "push DOMAIN TEXT", "pop DOMAIN". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

static FILE *g_log;

static nvtxDomainHandle_t NVTX_API domain_create(const char *name) {
  fprintf(g_log, "domain %s\n", name);
  return (nvtxDomainHandle_t)strdup(name);
}

static nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t domain, const char *s) {
  (void)domain;
  return (nvtxStringHandle_t)strdup(s);
}

static int NVTX_API push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *a) {
  const char *text = a->messageType == NVTX_MESSAGE_TYPE_REGISTERED ? (const char *)a->message.registered
                     : a->messageType == NVTX_MESSAGE_TYPE_ASCII   ? a->message.ascii
                                                                   : "?";
  fprintf(g_log, "push %s %s\n", domain ? (const char *)domain : "-", text ? text : "(null)");
  return 0;
}

static int NVTX_API pop(nvtxDomainHandle_t domain) {
  fprintf(g_log, "pop %s\n", domain ? (const char *)domain : "-");
  return 0;
}

__attribute__((visibility("default"))) int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  const char *path = getenv("NVTX_TEST_LOG");
  if (!cb || !path || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
      size <= NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  g_log = fopen(path, "w");
  if (!g_log) return 0;
  setvbuf(g_log, NULL, _IOLBF, 0);
  *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create;
  *table[NVTX_CBID_CORE2_DomainRegisterStringA] = (NvtxFunctionPointer)register_string;
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)push;
  *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)pop;
  return 1;
}

/* A stand-in for libcupti, for tests/test_kernels.py: the CUPTI functions the
 * collector (csrc/core/sp_cupti.c) calls, compiled against the same CUPTI
 * headers, with no GPU behind them. The test "launches" kernels through
 * standin_launch (from inside an operator it records, or outside), which
 * makes what real CUPTI would: an API record, the external correlation
 * record of the id pushed on the calling thread, and a kernel record with
 * the test's own duration; standin_graph_node / standin_graph_clone call the
 * resource callback as a stream capture and an instantiation do. Records are
 * handed back through the collector's own buffer callbacks at a flush. */
#include <cupti.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kernel_rec;
#else
typedef CUpti_ActivityKernel9 kernel_rec;
#endif

static CUpti_BuffersCallbackRequestFunc g_request;
static CUpti_BuffersCallbackCompleteFunc g_complete;
static CUpti_CallbackFunc g_callback;
static void *g_callback_user;
static int g_subscribed;
static CUpti_TimestampCallbackFunc g_timestamp;
static int g_enabled[CUPTI_ACTIVITY_KIND_COUNT];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *g_pending; /* records, each after a uint64_t size */
static size_t g_pending_n, g_pending_cap;
static uint32_t g_next_corr = 1;
static __thread uint64_t t_ext[64];
static __thread int t_ext_n;

static uint64_t now(void) {
  if (g_timestamp) return g_timestamp();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pend(const void *rec, size_t n) {
  size_t need = g_pending_n + 8 + ((n + 7) & ~(size_t)7);
  if (need > g_pending_cap) {
    g_pending_cap = need * 2;
    g_pending = realloc(g_pending, g_pending_cap);
  }
  uint64_t size = (n + 7) & ~(size_t)7;
  memcpy(g_pending + g_pending_n, &size, 8);
  memset(g_pending + g_pending_n + 8, 0, size);
  memcpy(g_pending + g_pending_n + 8, rec, n);
  g_pending_n += 8 + size;
}

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version) {
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str) {
  *str = result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
             ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
             : "CUPTI_ERROR_STANDIN";
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                    void *userdata) {
  if (getenv("STANDIN_CUPTI_BUSY") || g_subscribed) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  g_subscribed = 1;
  g_callback = callback;
  g_callback_user = userdata;
  *subscriber = (CUpti_SubscriberHandle)&g_subscribed;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  (void)subscriber;
  g_subscribed = 0;
  g_callback = NULL;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  (void)enable, (void)subscriber, (void)domain, (void)cbid;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetGraphNodeId(CUgraphNode node, uint64_t *nodeId) {
  *nodeId = (uint64_t)(uintptr_t)node;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                    CUpti_BuffersCallbackCompleteFunc complete) {
  g_request = request;
  g_complete = complete;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
  g_timestamp = f;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  g_enabled[kind] = 1;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  g_enabled[kind] = 0;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp) {
  *timestamp = now();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId, size_t *dropped) {
  (void)context, (void)streamId;
  *dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 || t_ext_n >= 64) return CUPTI_ERROR_INVALID_PARAMETER;
  t_ext[t_ext_n++] = id;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t *lastId) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return CUPTI_ERROR_INVALID_PARAMETER;
  if (!t_ext_n) return CUPTI_ERROR_QUEUE_EMPTY;
  uint64_t id = t_ext[--t_ext_n];
  if (lastId) *lastId = id;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                                CUpti_Activity **record) {
  uint8_t *at = *record ? (uint8_t *)*record - 8 : buffer;
  if (*record) {
    uint64_t size;
    memcpy(&size, at, 8);
    at += 8 + size;
  }
  if ((size_t)(at - buffer) + 8 > validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = (CUpti_Activity *)(at + 8);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  pthread_mutex_lock(&g_mu);
  if (!g_pending_n || !g_request || !g_complete) {
    pthread_mutex_unlock(&g_mu);
    return CUPTI_SUCCESS;
  }
  uint8_t *buf = NULL;
  size_t size = 0, max_records = 0;
  g_request(&buf, &size, &max_records);
  size_t n = g_pending_n < size ? g_pending_n : size;
  memcpy(buf, g_pending, n);
  g_pending_n = 0;
  pthread_mutex_unlock(&g_mu);
  g_complete(NULL, 0, buf, size, n);
  return CUPTI_SUCCESS;
}

/* ---- the test's side ---- */

/* A kernel of dur_ns launched now on this thread (a graph's node's, when
 * graph_node is set: a replay); its correlation id, or 0 when no collector
 * has the kinds on. */
uint32_t standin_launch(const char *name, uint64_t dur_ns, uint64_t graph_node, uint32_t graph_id) {
  if (!g_enabled[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL]) return 0;
  pthread_mutex_lock(&g_mu);
  uint32_t corr = g_next_corr++;
  uint64_t t = now();
  if (g_enabled[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION] && t_ext_n) {
    CUpti_ActivityExternalCorrelation e;
    memset(&e, 0, sizeof e);
    e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    e.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    e.externalId = t_ext[t_ext_n - 1];
    e.correlationId = corr;
    pend(&e, sizeof e);
  }
  if (g_enabled[CUPTI_ACTIVITY_KIND_RUNTIME]) {
    CUpti_ActivityAPI a;
    memset(&a, 0, sizeof a);
    a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a.start = t;
    a.end = t + 1;
    a.processId = (uint32_t)getpid();
    a.threadId = (uint32_t)syscall(SYS_gettid);
    a.correlationId = corr;
    pend(&a, sizeof a);
  }
  kernel_rec k;
  memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = strdup(name); /* CUPTI's names live as long as the process */
  k.start = t + 10;
  k.end = t + 10 + dur_ns;
  k.deviceId = 0;
  k.streamId = 7;
  k.gridX = 4, k.gridY = 2, k.gridZ = 1;
  k.blockX = 128, k.blockY = 1, k.blockZ = 1;
  k.correlationId = corr;
  k.graphNodeId = graph_node;
  k.graphId = graph_id;
  pend(&k, sizeof k);
  pthread_mutex_unlock(&g_mu);
  return corr;
}

static void graph_event(CUpti_CallbackId cbid, uint64_t node, uint64_t from) {
  if (!g_callback) return;
  CUpti_GraphData g;
  memset(&g, 0, sizeof g);
  g.node = (CUgraphNode)(uintptr_t)node;
  g.originalNode = (CUgraphNode)(uintptr_t)from;
  CUpti_ResourceData rd;
  memset(&rd, 0, sizeof rd);
  rd.resourceDescriptor = &g;
  g_callback(g_callback_user, CUPTI_CB_DOMAIN_RESOURCE, cbid, &rd);
}

/* A graph node made now on this thread (a stream capture of a launch). */
void standin_graph_node(uint64_t node) { graph_event(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node, 0); }

/* A node cloned from another (a graph instantiated). */
void standin_graph_clone(uint64_t node, uint64_t from) {
  graph_event(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, node, from);
}

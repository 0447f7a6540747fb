// sp_sync.cpp -- sync mode (sp_fallback_sync): after each recorded call on
// a device, wait for the device, so that a kernel's asynchronous failure is
// recorded as the error of the call that launched it; never while the
// stream captures a graph.
// A part of the torch layer: compiled alone, or inside sp_torch.cpp (see
// sp_torch_internal.h).
#include "torch/sp_torch_internal.h"

SP_TORCH_BEGIN

// The device of the first tensor among values (Tensor, Tensor[], Tensor?[])
// that is not on the host; the CPU device when none is (nothing to wait for).
[[gnu::cold, gnu::noinline]] SP_TORCH_PRIVATE c10::Device device_of(const c10::IValue* values, size_t n) {
  auto on_device = [](const c10::IValue& v) {
    if (!v.isTensor() || !v.toTensor().defined()) return false;
    c10::DeviceType type = v.toTensor().device().type();
    return type != c10::DeviceType::CPU && type != c10::DeviceType::Meta;
  };
  for (size_t i = 0; i < n; i++) {
    if (on_device(values[i])) return values[i].toTensor().device();
    if (values[i].isList())
      for (const c10::IValue& x : values[i].toListRef())
        if (on_device(x)) return x.toTensor().device();
  }
  return c10::Device(c10::DeviceType::CPU);
}

// Whether the thread's current stream on d is capturing a graph: waiting
// for the device then would break the capture (the model's call would get
// the error). Torch 2.13+ asks the device's guard; torch 2.11's guard
// cannot, so the CUDA driver is asked about the stream's native handle.
// -1: cannot tell.
template <class G, class = void>
struct GuardKnowsCapture : std::false_type {};
template <class G>
struct GuardKnowsCapture<G, std::void_t<decltype(std::declval<const G&>().isStreamCapturing(
                                std::declval<const c10::Stream&>()))>> : std::true_type {};

// How capture is told (SP_CAPTURE_*), and sync mode's decisions: for the
// report (sp_fallback_sync_stats), never read on the hot path.
static std::atomic<int> g_driver_lookup{SP_CAPTURE_UNRESOLVED};
static std::atomic<uint64_t> g_sync_waited{0}, g_sync_capturing{0}, g_sync_unknown{0};

static int driver_capturing(const c10::Stream& stream) {
  using IsCapturing = int (*)(void* stream, int* status);  // cuStreamIsCapturing
  static IsCapturing is_capturing = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    auto f = lib ? reinterpret_cast<IsCapturing>(dlsym(lib, "cuStreamIsCapturing")) : nullptr;
    g_driver_lookup.store(f ? SP_CAPTURE_DRIVER : SP_CAPTURE_NONE, std::memory_order_relaxed);
    return f;
  }();
  int status = 0;
  if (!is_capturing || stream.device_type() != c10::DeviceType::CUDA) return -1;
  try {
    if (is_capturing(stream.native_handle(), &status) != 0) return -1;
  } catch (const std::exception&) {
    return -1;  // this torch has no native handle for the stream
  }
  return status != 0;  // CU_STREAM_CAPTURE_STATUS_ACTIVE or _INVALIDATED
}

template <class G = c10::impl::DeviceGuardImplInterface>
static int capturing(c10::Device d) {
  const G* guard = c10::impl::getDeviceGuardImpl(d.type());
  c10::Stream stream = guard->getStream(d);
  if constexpr (GuardKnowsCapture<G>::value) {
    return guard->isStreamCapturing(stream) ? 1 : 0;
  } else {
    return driver_capturing(stream);
  }
}

static std::atomic<bool> g_sync_capture_said{false};
static std::atomic<bool> g_sync_unknown_said{false};

// After the call: waits for the device of its first input on one, else of
// its first output on one (factory calls, host-to-device copies). A kernel's
// asynchronous failure raises here, as this call's error. Never while the
// stream captures a graph, nor when that cannot be told.
[[gnu::cold, gnu::noinline]] SP_TORCH_PRIVATE void synchronize(c10::Device d, const torch::jit::Stack* stack, size_t n_rets) {
  if (d.type() == c10::DeviceType::CPU && stack->size() >= n_rets)
    d = device_of(stack->data() + stack->size() - n_rets, n_rets);
  if (d.type() == c10::DeviceType::CPU) return;
  int capture = capturing(d);
  (capture == 0 ? g_sync_waited : capture > 0 ? g_sync_capturing : g_sync_unknown)
      .fetch_add(1, std::memory_order_relaxed);
  if (capture != 0) {
    std::atomic<bool>& said = capture > 0 ? g_sync_capture_said : g_sync_unknown_said;
    if (!said.exchange(true))
      TORCH_WARN(capture > 0 ? "sgl_shapeprof: sync: not while a graph is being captured (waiting for the "
                               "device would break the capture): the capture's calls are recorded without it"
                             : "sgl_shapeprof: sync: this torch cannot tell whether a CUDA graph is being "
                               "captured, so sync mode does not wait for the device");
    return;
  }
  c10::impl::getDeviceGuardImpl(d.type())->synchronizeDevice(d.index());
}

SP_TORCH_END

using namespace sp_torch;

extern "C" {

void sp_fallback_sync_stats(sp_sync_stats* out) {
  out->capture = GuardKnowsCapture<c10::impl::DeviceGuardImplInterface>::value
                     ? SP_CAPTURE_GUARD
                     : g_driver_lookup.load(std::memory_order_relaxed);
  out->waited = g_sync_waited.load(std::memory_order_relaxed);
  out->capturing = g_sync_capturing.load(std::memory_order_relaxed);
  out->unknown = g_sync_unknown.load(std::memory_order_relaxed);
}

}  // extern "C"

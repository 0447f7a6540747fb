// sp_fallback.cpp -- the c10 side of sgl_shapeprof: a boxed fallback on one
// dispatch key that describes each call to the C core and forwards it.
//
// Knows c10 and sp_core.h only. The key sits in the calling thread's TLS
// "included" set only while that thread runs a logged pass, so nothing else
// is slowed down. Every failure here is contained: the host sees its own
// results and exceptions, never ours.
#include "torch/sp_fallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// Why Fake. The stream to match is what a TorchDispatchMode (the Python key)
// sees: below autograd and autocast, so composite ops arrive decomposed in
// grad and no-grad mode, whole under inference_mode(), and autocast's casts
// are visible. Fake sits there, next to Python (torch 2.13-2.15: just below
// it; 2.11: just above, see kAbovePython), and no core kernel registers a
// fallback on it. Every other key in that range has a core owner; the free keys above
// autograd (DeferredInit, TESTING_ONLY_GenericMode) see another stream.
// PyTorch is adding a C++ fake-tensor fallback on Fake: sp_fallback_install
// then refuses in one line (hasBackendFallbackForDispatchKey) rather than
// fail inside torch, and the parity tests compare the stream with a
// TorchDispatchMode logger record by record on every supported torch.
constexpr c10::DispatchKey kKey = c10::DispatchKey::Fake;

// Torch 2.11 orders Fake above Python (pytorch PR 178428 moved it below for
// 2.13). There a call that goes on to the Python key is seen before the
// Python code runs: a tensor subclass's call is recorded as the subclass's
// (as a TorchDispatchMode sees it; 2.13+ records the calls its
// __torch_dispatch__ makes instead, and the Python key keeps our key out of
// those on 2.11), and a FakeTensorMode's calls would be recorded
// as real ones: tracing_above_python() leaves those out, as the meta calls
// they become are left out on 2.13+.
constexpr bool kAbovePython =
    static_cast<int>(c10::DispatchKey::Fake) > static_cast<int>(c10::DispatchKey::Python);

// Plain data, so that a thread_local access needs no init guard; the scratch
// is freed at thread exit through a pthread key. Which profiler this
// thread's calls go to is the core's to say (sp_thread_profiler): the key
// only follows it.
struct ThreadState {
  sp_thread* scratch;
  bool paused;            // key taken out while a compiler runs
  bool saw_meta;          // the call being described has a meta tensor
  bool allow_meta;        // ...and is described anyway: it raised
  bool sync;              // synchronise the device after each recorded call (sp_fallback_sync)
};
thread_local ThreadState t_state;

pthread_key_t g_scratch_key;
pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;

// Runs on an exiting thread that had scratch (it ran an operator).
void free_scratch(void* scratch) {
  // Later exit-time code may still run ops here.
  if (t_state.scratch == scratch) t_state.scratch = nullptr;
  sp_thread_free(static_cast<sp_thread*>(scratch));
}
void make_scratch_key() { pthread_key_create(&g_scratch_key, free_scratch); }

sp_thread* new_scratch() {
  pthread_once(&g_scratch_once, make_scratch_key);
  sp_thread* t = sp_thread_new();
  if (t) pthread_setspecific(g_scratch_key, t);
  return t;
}

// Whether this thread's own pass is logged and its profiler logs (the key
// belongs in its TLS).
bool own_pass_logs() {
  int mode;
  sp_thread_pass(&mode);
  return mode != 0;
}

void set_key(bool on) {
  if (c10::impl::tls_is_dispatch_key_included(kKey) != on)
    c10::impl::tls_set_dispatch_key_included(kKey, on);
}

// The tensor's impl, or null when the call must not be logged (a meta tensor
// or symbolic sizes: someone is tracing, not running the model).
[[gnu::always_inline]] inline c10::TensorImpl* loggable(const at::Tensor& t) {
  if (t.is_meta() && !t_state.allow_meta) {
    t_state.saw_meta = true;
    return nullptr;
  }
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->has_symbolic_sizes_strides() || impl->is_nested()) return nullptr;
  return impl;
}

// Appends head_n words, then <tensor>; false when the call must not be
// logged.
[[gnu::always_inline]] inline bool encode_tensor_after(sp_enc* e, const int64_t* head, int head_n,
                                                       const at::Tensor& t) {
  c10::TensorImpl* impl = loggable(t);
  if (!impl) return false;
  c10::IntArrayRef sizes = impl->sizes();
  sp_enc_tensor_after(e, head, head_n, static_cast<int>(c10::typeMetaToScalarType(impl->dtype())),
                      static_cast<int>(sizes.size()), sizes.data());
  return true;
}

// Appends <tensor>; false when the call must not be logged.
bool encode_tensor(sp_enc* e, const at::Tensor& t) { return encode_tensor_after(e, nullptr, 0, t); }

bool encode_strided(sp_enc* e, const at::Tensor& t);

// A list argument or return: Tensor[] or Tensor?[], its tensors plain or
// strided. Returns -1 to skip the call, 0 if v holds no tensor (nothing
// appended), 1 if appended.
template <bool kStrided>
int encode_list(sp_enc* e, const c10::IValue& v) {
  if (!v.isList()) return 0;
  c10::ArrayRef<c10::IValue> list = v.toListRef();  // no copy
  bool any = false;
  for (const c10::IValue& x : list) any = any || (x.isTensor() && x.toTensor().defined());
  if (!any) return 0;
  sp_enc_push(e, static_cast<int64_t>(list.size()));
  for (const c10::IValue& x : list) {
    if (x.isTensor() && x.toTensor().defined()) {
      if (!(kStrided ? encode_strided(e, x.toTensor()) : encode_tensor(e, x.toTensor()))) return -1;
    } else {
      sp_enc_push(e, -1);
    }
  }
  return 1;
}

// Inputs: [op_id] then each argument that is a tensor or holds one. Inlined
// into the hot path (a second caller, the cold meta path, would stop that).
[[gnu::always_inline]] inline bool encode_inputs(sp_enc* e, int op_id, const c10::IValue* args, size_t n) {
  sp_enc_reset(e);
  sp_enc_push(e, op_id);
  for (size_t i = 0; i < n; i++) {
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      // A Python number passed where a Tensor goes arrives as a 0-dim
      // "wrapped number"; Python (and TorchDispatchMode) see a number.
      if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) continue;
      const int64_t head[2] = {SP_ENC_TENSOR, static_cast<int64_t>(i)};
      if (!encode_tensor_after(e, head, 2, t)) return false;
    } else if (v.isList()) {
      size_t mark = e->n;
      sp_enc_push(e, SP_ENC_LIST);
      sp_enc_push(e, static_cast<int64_t>(i));
      int r = encode_list<false>(e, v);
      if (r < 0) return false;
      if (r == 0) e->n = mark;
    }
  }
  return true;
}

// Where encode_outputs puts its words: the thread's outputs...
struct Writer {
  static constexpr bool kLists = true;
  sp_enc* e;
  void push(int64_t v) { sp_enc_push(e, v); }
  bool tensor(const int64_t* head, int head_n, const at::Tensor& t) {
    return encode_tensor_after(e, head, head_n, t);
  }
  bool done() const { return true; }
};

// ...or a comparison with the words a deduplicated repeat's outputs must
// encode to, in place: no copy, no second pass. It compares tensors and
// None; a list return makes it give up (false), and the outputs are then
// written for sp_call_end to compare.
struct Checker {
  static constexpr bool kLists = false;
  const int64_t* w;
  size_t n;
  size_t at = 0;
  bool same = true;
  void push(int64_t v) { same = same && at < n && w[at++] == v; }
  bool tensor(const int64_t* head, int head_n, const at::Tensor& t) {
    c10::TensorImpl* impl = loggable(t);
    if (!impl) return false;
    c10::IntArrayRef sizes = impl->sizes();
    return sp_enc_tensor_is(w, n, &at, head, head_n,
                            static_cast<int>(c10::typeMetaToScalarType(impl->dtype())),
                            static_cast<int>(sizes.size()), sizes.data());
  }
  bool done() const { return same && at == n; }
};

// Outputs: each return, a tensor, a list of them, or None for anything
// else. False when the call must not be logged (a Writer) or the outputs
// are not the expected ones (a Checker).
template <class Sink>
[[gnu::always_inline]] inline bool encode_outputs(Sink& s, const c10::IValue* rets, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const c10::IValue& v = rets[i];
    if (v.isTensor() && v.toTensor().defined()) {
      const int64_t head[1] = {SP_ENC_TENSOR};
      if (!s.tensor(head, 1, v.toTensor())) return false;
      continue;
    }
    if (v.isList()) {
      if constexpr (!Sink::kLists) {
        return false;
      } else {
        size_t mark = s.e->n;
        s.push(SP_ENC_LIST);
        int r = encode_list<false>(s.e, v);
        if (r < 0) return false;
        if (r == 1) continue;
        if (v.isTensorList()) {  // an empty Tensor[] is still a list
          s.push(0);
          continue;
        }
        s.e->n = mark;
      }
    }
    s.push(SP_ENC_NONE);
  }
  return s.done();
}

// Out of line: the hot path of a deduplicated repeat stays short.
[[gnu::noinline]] bool write_outputs(sp_enc* e, const c10::IValue* rets, size_t n) {
  sp_enc_reset(e);
  Writer write{e};
  return encode_outputs(write, rets, n);
}

// ---- arguments (SP_LOGGING_ARGS): what a call needs to be run again ----

// A strided input: sizes, strides, offset, device. Other layouts (sparse,
// mkldnn) have no strides: their sizes and dtype only.
bool encode_strided(sp_enc* e, const at::Tensor& t) {
  c10::TensorImpl* impl = loggable(t);
  if (!impl) return false;
  if (impl->layout() != c10::kStrided) return encode_tensor(e, t);
  c10::IntArrayRef sizes = impl->sizes();
  c10::Device device = impl->device();
  sp_enc_strided(e, static_cast<int>(t.scalar_type()), static_cast<int>(sizes.size()),
                 sizes.data(), impl->strides().data(), impl->storage_offset(),
                 static_cast<int>(device.type()), device.index());
  return true;
}

int64_t double_bits(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

void push_tag(sp_enc* e, int tag, size_t arg) {
  sp_enc_push(e, tag);
  sp_enc_push(e, static_cast<int64_t>(arg));
}

void push_opaque(sp_enc* e, size_t arg, const std::string& what) {
  push_tag(e, SP_ENC_OPAQUE, arg);
  sp_enc_bytes(e, what.data(), what.size());
}

// The enum an int argument holds, by its schema type: dtype, layout or
// memory format (also when optional); 0 for a plain int.
int enum_tag(const c10::Argument& a, int64_t* table) {
  const c10::Type* type = a.real_type().get();  // type() says int
  if (type->kind() == c10::TypeKind::OptionalType)
    type = static_cast<const c10::OptionalType*>(type)->getElementType().get();
  switch (type->kind()) {
    case c10::TypeKind::ScalarTypeType: return SP_ENC_DTYPE;
    case c10::TypeKind::LayoutType: *table = SP_NAMES_LAYOUT; return SP_ENC_NAME;
    case c10::TypeKind::MemoryFormatType: *table = SP_NAMES_MEMORY_FORMAT; return SP_ENC_NAME;
    default: return 0;
  }
}

// A Python number passed where a Tensor goes: the number (wrapped numbers
// are 0-dim CPU tensors of these dtypes; read without dispatching).
void encode_wrapped(sp_enc* e, size_t arg, const at::Tensor& t) {
  if (!t.is_cpu()) return push_opaque(e, arg, "wrapped number on " + t.device().str());  // not readable here
  const void* data = t.unsafeGetTensorImpl()->data();
  switch (t.scalar_type()) {
    case c10::ScalarType::Double:
      push_tag(e, SP_ENC_FLOAT, arg);
      sp_enc_push(e, double_bits(*static_cast<const double*>(data)));
      return;
    case c10::ScalarType::Long:
      push_tag(e, SP_ENC_INT, arg);
      sp_enc_push(e, *static_cast<const int64_t*>(data));
      return;
    case c10::ScalarType::Bool:
      push_tag(e, SP_ENC_BOOL, arg);
      sp_enc_push(e, *static_cast<const bool*>(data) ? 1 : 0);
      return;
    case c10::ScalarType::ComplexDouble: {
      auto z = *static_cast<const c10::complex<double>*>(data);
      push_tag(e, SP_ENC_COMPLEX, arg);
      sp_enc_push(e, double_bits(z.real()));
      sp_enc_push(e, double_bits(z.imag()));
      return;
    }
    default:
      push_opaque(e, arg, "wrapped number");
  }
}

// A list that holds no tensor: ints, floats or bools; false if it holds
// anything else (or is symbolic).
bool encode_plain_list(sp_enc* e, size_t arg, const c10::IValue& v) {
  c10::ArrayRef<c10::IValue> list = v.toListRef();
  int tag = SP_ENC_INTS;
  for (const c10::IValue& x : list) {
    if (x.isDouble()) tag = SP_ENC_FLOATS;
    else if (x.isBool() && tag == SP_ENC_INTS) tag = SP_ENC_BOOLS;
    else if (!x.isInt() && !x.isBool()) return false;
  }
  push_tag(e, tag, arg);
  sp_enc_push(e, static_cast<int64_t>(list.size()));
  for (const c10::IValue& x : list) {
    if (tag == SP_ENC_FLOATS) sp_enc_push(e, double_bits(x.isDouble() ? x.toDouble() : x.isInt() ? static_cast<double>(x.toInt()) : x.toBool()));
    else if (x.isBool()) sp_enc_push(e, x.toBool() ? 1 : 0);
    else sp_enc_push(e, x.toInt());
  }
  return true;
}

// Inputs with every argument (see sp_core.h): what `replay` needs to run
// the call again. False when the call must not be logged.
bool encode_inputs_args(sp_enc* e, int op_id, const c10::FunctionSchema& schema,
                        const c10::IValue* args, size_t n) {
  sp_enc_reset(e);
  sp_enc_push(e, op_id);
  for (size_t i = 0; i < n; i++) {
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        push_tag(e, SP_ENC_NULL, i);
      } else if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
        encode_wrapped(e, i, t);
      } else {
        push_tag(e, SP_ENC_TENSOR, i);
        if (!encode_strided(e, t)) return false;
      }
    } else if (v.isList()) {
      size_t mark = e->n;
      push_tag(e, SP_ENC_LIST, i);
      int r = encode_list<true>(e, v);
      if (r < 0) return false;
      if (r == 0) {
        e->n = mark;
        if (!encode_plain_list(e, i, v)) push_opaque(e, i, v.tagKind());
      }
    } else if (v.isNone()) {
      push_tag(e, SP_ENC_NULL, i);
    } else if (v.isInt()) {
      int64_t table = 0;
      int tag = i < schema.arguments().size() ? enum_tag(schema.arguments()[i], &table) : 0;
      push_tag(e, tag ? tag : SP_ENC_INT, i);
      if (tag == SP_ENC_NAME) sp_enc_push(e, table);
      sp_enc_push(e, v.toInt());
    } else if (v.isDouble()) {
      push_tag(e, SP_ENC_FLOAT, i);
      sp_enc_push(e, double_bits(v.toDouble()));
    } else if (v.isBool()) {
      push_tag(e, SP_ENC_BOOL, i);
      sp_enc_push(e, v.toBool() ? 1 : 0);
    } else if (v.isString()) {
      const std::string& str = v.toStringRef();
      push_tag(e, SP_ENC_STR, i);
      sp_enc_bytes(e, str.data(), str.size());
    } else if (v.isDevice()) {
      c10::Device d = v.toDevice();
      push_tag(e, SP_ENC_DEVICE, i);
      sp_enc_push(e, static_cast<int64_t>(d.type()));
      sp_enc_push(e, d.index());
    } else if (v.isComplexDouble()) {
      c10::complex<double> z = v.toComplexDouble();
      push_tag(e, SP_ENC_COMPLEX, i);
      sp_enc_push(e, double_bits(z.real()));
      sp_enc_push(e, double_bits(z.imag()));
    } else if (v.isSymInt() || v.isSymFloat() || v.isSymBool()) {
      return false;  // symbolic: someone is tracing
    } else {
      push_opaque(e, i, v.tagKind());  // Generator, Stream, objects...
    }
  }
  return true;
}

// An operator this thread has not met yet: its id from the registry (and
// its schema's names the first time anyone meets it).
[[gnu::noinline]] int intern_op_slow(sp_thread* t, const c10::OperatorHandle& op) {
  const void* key = &op.operator_name();
  if (!op.hasSchema()) return -1;
  const c10::FunctionSchema& schema = op.schema();
  std::vector<const char*> names;
  names.reserve(schema.arguments().size());
  for (const auto& a : schema.arguments()) names.push_back(a.name().c_str());
  int id = -1;
  if (sp_op_intern(key, op.operator_name().name.c_str(), op.operator_name().overload_name.c_str(),
                   static_cast<int>(names.size()), names.data(),
                   static_cast<int>(schema.returns().size()), &id) != SP_OK)
    return -1;
  sp_thread_cache_op(t, key, id);
  return id;
}

[[gnu::always_inline]] inline int intern_op(sp_thread* t, const c10::OperatorHandle& op) {
  int id = sp_thread_op(t, &op.operator_name());
  return id >= 0 ? id : intern_op_slow(t, op);
}

// The Python class name the caller will see, as torch's exception translation
// (torch/csrc/Exceptions.h) would choose it.
const char* c10_error_type(const c10::Error& e) {
  if (dynamic_cast<const c10::IndexError*>(&e)) return "IndexError";
  if (dynamic_cast<const c10::ValueError*>(&e)) return "ValueError";
  if (dynamic_cast<const c10::TypeError*>(&e)) return "TypeError";
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return "NotImplementedError";
  if (dynamic_cast<const c10::BufferError*>(&e)) return "BufferError";
  if (dynamic_cast<const c10::SyntaxError*>(&e)) return "SyntaxError";
  if (dynamic_cast<const c10::LinAlgError*>(&e)) return "_LinAlgError";
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return "OutOfMemoryError";
  if (dynamic_cast<const c10::DistBackendError*>(&e)) return "DistBackendError";
  if (dynamic_cast<const c10::DistNetworkError*>(&e)) return "DistNetworkError";
  if (dynamic_cast<const c10::DistQueueEmptyError*>(&e)) return "DistQueueEmptyError";
  if (dynamic_cast<const c10::DistStoreError*>(&e)) return "DistStoreError";
  if (dynamic_cast<const c10::DistError*>(&e)) return "DistError";
  if (dynamic_cast<const c10::AcceleratorError*>(&e)) return "AcceleratorError";
  return "RuntimeError";
}

std::atomic<sp_error_describer> g_describer{nullptr};

// A kernel's exception that is not c10's, described by the layer that knows
// it (the Python layer registers sp_pyerror.cpp's: a Python kernel's
// exception, by its own class name and str()); false when none does.
bool describe(sp_profiler* p, sp_thread* t, const std::exception& e) {
  sp_error_describer d = g_describer.load(std::memory_order_acquire);
  char *type = nullptr, *msg = nullptr;
  size_t type_n = 0, msg_n = 0;
  if (!d || d(&e, &type, &type_n, &msg, &msg_n) != SP_OK) return false;
  sp_call_fail_n(p, t, type, type_n, msg, msg_n);
  std::free(type);
  std::free(msg);
  return true;
}

void record_exception(sp_profiler* p, sp_thread* t, std::exception_ptr ex) {
  try {
    std::rethrow_exception(ex);
  } catch (const c10::Error& e) {
    // str(e) in Python; TORCH_SHOW_CPP_STACKTRACES=1 adds the C++ trace.
    sp_call_fail(p, t, c10_error_type(e), e.what_without_backtrace());
  } catch (const std::exception& e) {
    if (!describe(p, t, e)) sp_call_fail(p, t, "RuntimeError", e.what());
  } catch (...) {
    sp_call_fail(p, t, "RuntimeError", "unknown C++ exception");
  }
}

std::atomic<bool> g_internal_warned{false};

void internal_error(const char* what) {
  if (!g_internal_warned.exchange(true))
    TORCH_WARN("sgl_shapeprof: internal error, calls are no longer described: ", what);
}

void redispatch(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                torch::jit::Stack* stack) {
  // Ops a kernel calls are not the model's: TorchDispatchMode does not see
  // them either.
  c10::impl::ExcludeDispatchKeyGuard guard(kKey);
  op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kKey), stack);
}

// Torch 2.11's call bound for the Python key (kAbovePython): true when it
// computes no real shape -- a FakeTensorMode is active, or an input is a
// FakeTensor (its storage is on the meta device). A proxy tracer over real
// tensors runs real calls: recorded, as 2.13+ records the calls it makes.
[[gnu::cold, gnu::noinline]] bool tracing_above_python(const c10::IValue* args, size_t n) {
  using c10::impl::TorchDispatchModeKey;
  using c10::impl::TorchDispatchModeTLS;
  if (TorchDispatchModeTLS::get_mode(TorchDispatchModeKey::FAKE)) return true;
  auto fake = [](const c10::IValue& v) {
    if (!v.isTensor()) return false;
    const c10::TensorImpl* impl = v.toTensor().unsafeGetTensorImpl();
    return v.toTensor().defined() && impl->has_storage() &&
           impl->storage().device_type() == c10::DeviceType::Meta;
  };
  for (size_t i = 0; i < n; i++) {
    if (fake(args[i])) return true;
    if (args[i].isList())
      for (const c10::IValue& x : args[i].toListRef())
        if (fake(x)) return true;
  }
  return false;
}

// A call on meta tensors is not logged, unless it raises: a TorchDispatchMode
// logs it then, and errors are always written (FORMAT.md).
[[gnu::cold, gnu::noinline]] void redispatch_meta(sp_profiler* p, sp_thread* t, const c10::OperatorHandle& op,
                     c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  size_t n_args = op.schema().arguments().size();
  if (stack->size() < n_args) return redispatch(op, ks, stack);
  // The inputs, kept for describing them if the call raises: the stack's
  // arguments are consumed by the call.
  std::vector<c10::IValue> args(stack->end() - n_args, stack->end());
  try {
    redispatch(op, ks, stack);
  } catch (...) {
    std::exception_ptr ex = std::current_exception();
    try {
      int id = intern_op(t, op);
      t_state.allow_meta = true;
      sp_enc* in = &sp_thread_enc(t)->in;
      bool ok = id >= 0 && ((sp_logging(p) & SP_LOGGING_ARGS)
                                ? encode_inputs_args(in, id, op.schema(), args.data(), args.size())
                                : encode_inputs(in, id, args.data(), args.size()));
      t_state.allow_meta = false;
      if (ok && sp_call_begin(p, t) != SP_CALL_SKIP) record_exception(p, t, ex);
    } catch (const std::exception& e) {
      t_state.allow_meta = false;
      internal_error(e.what());
    }
    std::rethrow_exception(ex);
  }
}

// ---- sync mode (sp_fallback_sync): wait for the device after each call ----

// The device of the first tensor among values (Tensor, Tensor[], Tensor?[])
// that is not on the host; the CPU device when none is (nothing to wait for).
[[gnu::cold, gnu::noinline]] c10::Device device_of(const c10::IValue* values, size_t n) {
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
std::atomic<int> g_driver_lookup{SP_CAPTURE_UNRESOLVED};
std::atomic<uint64_t> g_sync_waited{0}, g_sync_capturing{0}, g_sync_unknown{0};

int driver_capturing(const c10::Stream& stream) {
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
int capturing(c10::Device d) {
  const G* guard = c10::impl::getDeviceGuardImpl(d.type());
  c10::Stream stream = guard->getStream(d);
  if constexpr (GuardKnowsCapture<G>::value) {
    return guard->isStreamCapturing(stream) ? 1 : 0;
  } else {
    return driver_capturing(stream);
  }
}

std::atomic<bool> g_sync_capture_said{false};
std::atomic<bool> g_sync_unknown_said{false};

// After the call: waits for the device of its first input on one, else of
// its first output on one (factory calls, host-to-device copies). A kernel's
// asynchronous failure raises here, as this call's error. Never while the
// stream captures a graph, nor when that cannot be told.
[[gnu::cold, gnu::noinline]] void synchronize(c10::Device d, const torch::jit::Stack* stack, size_t n_rets) {
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

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
              torch::jit::Stack* stack) {
  int mode;
  sp_profiler* p = sp_thread_profiler(&mode);
  if (!mode) {
    // A lingering key: this thread's profiler was closed by another thread,
    // or the pass whose key it inherited ended.
    set_key(false);
    return redispatch(op, ks, stack);
  }
  ThreadState& ts = t_state;
  if constexpr (kAbovePython) {
    if (C10_UNLIKELY(ks.has(c10::DispatchKey::Python))) {
      size_t n_args = op.schema().arguments().size();
      if (stack->size() < n_args || tracing_above_python(stack->data() + stack->size() - n_args, n_args))
        return redispatch(op, ks, stack);
    }
  }
  int state = SP_CALL_SKIP;
  sp_thread* t = ts.scratch;
  ts.saw_meta = false;
  try {
    if (!t) t = ts.scratch = new_scratch();
    if (t) {
      int id = intern_op(t, op);
      const c10::FunctionSchema& schema = op.schema();
      size_t n_args = schema.arguments().size();
      const c10::IValue* args = stack->data() + stack->size() - n_args;
      if (id >= 0 && stack->size() >= n_args &&
          ((mode & SP_LOGGING_ARGS)
               ? encode_inputs_args(&sp_thread_enc(t)->in, id, schema, args, n_args)
               : encode_inputs(&sp_thread_enc(t)->in, id, args, n_args)))
        state = sp_call_begin(p, t);
    }
  } catch (const std::exception& e) {
    internal_error(e.what());
  }
  if (state == SP_CALL_SKIP) {
    if (ts.saw_meta) return redispatch_meta(p, t, op, ks, stack);
    return redispatch(op, ks, stack);
  }
  c10::Device device(c10::DeviceType::CPU);
  if (C10_UNLIKELY(ts.sync)) {  // the inputs are consumed by the call
    size_t n_args = op.schema().arguments().size();
    if (stack->size() >= n_args) device = device_of(stack->data() + stack->size() - n_args, n_args);
  }
  try {
    redispatch(op, ks, stack);
    if (C10_UNLIKELY(ts.sync)) synchronize(device, stack, op.schema().returns().size());
  } catch (...) {
    record_exception(p, t, std::current_exception());
    throw;
  }
  // A deduplicated repeat (SP_CALL_COUNTED) too: its outputs say whether it
  // is one. They are compared in place first; if they differ, or cannot be
  // compared there, they are written and sp_call_end decides.
  size_t n_rets = op.schema().returns().size();
  sp_thread_public* pub = sp_thread_enc(t);
  bool ok = false;
  try {
    if (stack->size() >= n_rets) {
      const c10::IValue* rets = stack->data() + stack->size() - n_rets;
      if (state == SP_CALL_COUNTED) {
        Checker check{pub->expect, pub->expect_n};
        if (encode_outputs(check, rets, n_rets)) return sp_call_repeat(p, t);
      }
      ok = write_outputs(&pub->out, rets, n_rets);
    }
  } catch (const std::exception& e) {
    internal_error(e.what());
  }
  if (!ok) pub->out.failed = 1;  // written with "outputs": null
  sp_call_end(p, t);
}

std::mutex g_install_mu;
c10::RegistrationHandleRAII* g_fallback_handle = nullptr;
c10::RegistrationHandleRAII* g_listener_handle = nullptr;
std::string g_install_error;

class ForgetDeregistered final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  void onOperatorDeregistered(const c10::OperatorHandle& op) override {
    sp_op_forget(&op.operator_name());
  }
};

int set_dtype_names() {
  constexpr int n = static_cast<int>(c10::ScalarType::NumOptions);
  std::vector<std::string> names(n);
  std::vector<const char*> ptrs(n, nullptr);
  for (int i = 0; i < n; i++) {
    try {
      auto pair = c10::getDtypeNames(static_cast<c10::ScalarType>(i));
      if (pair.first.empty()) continue;
      names[i] = "torch." + std::string(pair.first);
      ptrs[i] = names[i].c_str();
    } catch (const std::exception&) {
      // A code without a Python name: written as torch.unknown<code>.
    }
  }
  return sp_set_dtype_names(ptrs.data(), n);
}

// The spellings of device types, layouts and memory formats, as Python
// prints them ("cuda", "torch.strided", "torch.channels_last").
int set_enum_names() {
  std::vector<std::string> devices;
  for (int i = 0; i < static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES); i++) {
    try {
      devices.push_back(c10::DeviceTypeName(static_cast<c10::DeviceType>(i), true));
    } catch (const std::exception&) {
      devices.emplace_back();
    }
  }
  const std::vector<std::string> layouts = {"torch.strided", "torch.sparse_coo", "torch.sparse_csr",
                                            "torch._mkldnn", "torch.sparse_csc", "torch.sparse_bsr",
                                            "torch.sparse_bsc", "torch.jagged"};
  const std::vector<std::string> formats = {"torch.contiguous_format", "torch.preserve_format",
                                            "torch.channels_last", "torch.channels_last_3d"};
  const std::pair<int, const std::vector<std::string>*> tables[] = {
      {SP_NAMES_DEVICE, &devices}, {SP_NAMES_LAYOUT, &layouts}, {SP_NAMES_MEMORY_FORMAT, &formats}};
  for (const auto& [table, names] : tables) {
    std::vector<const char*> ptrs;
    for (const std::string& name : *names) ptrs.push_back(name.c_str());
    int rc = sp_set_names(table, ptrs.data(), static_cast<int>(ptrs.size()));
    if (rc != SP_OK) return rc;
  }
  return SP_OK;
}

}  // namespace

extern "C" {

// This thread's scratch, for a fatal-signal handler (a thread_local read).
sp_thread* thread_scratch() { return t_state.scratch; }

int sp_fallback_install(void) {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (g_fallback_handle) return SP_OK;
  sp_set_thread_getter(&thread_scratch);
  try {
    auto& d = c10::Dispatcher::singleton();
    if (d.hasBackendFallbackForDispatchKey(kKey)) {
      g_install_error = "this torch already has a fallback on DispatchKey::Fake; "
                        "sgl_shapeprof cannot register its fallback in this build";
      return SP_ERROR;
    }
    if (set_dtype_names() != SP_OK || set_enum_names() != SP_OK) {
      g_install_error = "out of memory";
      return SP_NOMEM;
    }
    g_listener_handle = new c10::RegistrationHandleRAII(
        d.addRegistrationListener(std::make_unique<ForgetDeregistered>()));
    g_fallback_handle = new c10::RegistrationHandleRAII(d.registerFallback(
        kKey, c10::KernelFunction::makeFromBoxedFunction<&fallback>(),
        "sgl_shapeprof shape profiler"));
  } catch (const std::exception& e) {
    g_install_error = c10::str("cannot register the boxed fallback: ", e.what());
    return SP_ERROR;
  }
  return SP_OK;
}

const char* sp_fallback_error(void) { return g_install_error.c_str(); }

void sp_fallback_enable(void) {
  t_state.paused = false;
  set_key(true);
}

void sp_fallback_disable(void) {
  if (own_pass_logs()) return;  // (of another profiler than the one closed)
  set_key(false);
  t_state.sync = false;
}

void sp_fallback_sync(int on) { t_state.sync = on != 0; }

int sp_fallback_pause(void) {
  if (!c10::impl::tls_is_dispatch_key_included(kKey)) return 0;
  set_key(false);
  t_state.paused = true;
  return 1;
}

void sp_fallback_resume(void) {
  if (!t_state.paused) return;
  t_state.paused = false;
  if (own_pass_logs()) set_key(true);
}

sp_profiler* sp_fallback_target(void) {
  if (t_state.paused) return nullptr;
  int mode;
  sp_profiler* p = sp_thread_profiler(&mode);
  return mode ? p : nullptr;
}

void sp_fallback_sync_stats(sp_sync_stats* out) {
  out->capture = GuardKnowsCapture<c10::impl::DeviceGuardImplInterface>::value
                     ? SP_CAPTURE_GUARD
                     : g_driver_lookup.load(std::memory_order_relaxed);
  out->waited = g_sync_waited.load(std::memory_order_relaxed);
  out->capturing = g_sync_capturing.load(std::memory_order_relaxed);
  out->unknown = g_sync_unknown.load(std::memory_order_relaxed);
}

int sp_fallback_thread_enabled(void) {
  return c10::impl::tls_is_dispatch_key_included(kKey) ? 1 : 0;
}

void sp_fallback_set_describer(sp_error_describer describer) {
  g_describer.store(describer, std::memory_order_release);
}

int sp_fallback_installed(void) {
  std::lock_guard<std::mutex> lock(g_install_mu);
  return g_fallback_handle != nullptr;
}

}  // extern "C"

// sp_fallback.cpp -- the c10 side of sgl_shapeprof: a boxed fallback on one
// dispatch key that describes each call to the C core and forwards it.
//
// Knows c10 and sp_core.h only. The key sits in the calling thread's TLS
// "included" set only while that thread runs a logged pass, so nothing else
// is slowed down. Every failure here is contained: the host sees its own
// results and exceptions, never ours.
// A part of the torch layer: compiled alone, or inside sp_torch.cpp (see
// sp_torch_internal.h). The encoder is sp_encode.cpp's, sync mode
// sp_sync.cpp's.
#include "torch/sp_encode.h"

SP_TORCH_BEGIN

#ifndef SP_TORCH_AMALGAMATION
thread_local ThreadState t_state;
#endif

// ---- the route: which key the fallback sits on ----
// The stream to match is what a TorchDispatchMode (the Python key) sees:
// below autograd and autocast, so composite ops arrive decomposed in grad
// and no-grad mode, whole under inference_mode(), and autocast's casts are
// visible. Fake sits there, next to Python (torch 2.13-2.15: just below it;
// 2.11: just above), and no torch so far registers a fallback on it; every
// other key in that range has a core owner. That is the first route.
//
// PyTorch is moving FakeTensor into C++ with a fallback on Fake. On a torch
// that has one, the second route sits on TESTING_ONLY_GenericMode, a key
// no core kernel uses, above autograd and autocast (every torch 2.11+ has
// it). There every call arrives from the top, as the caller made it, so the
// stream is corrected to the first route's: a call that autocast will cast
// and call again, or that a CompositeImplicitAutograd kernel will decompose
// at the autograd key, goes on unrecorded with the key kept in, and the calls
// it becomes come back to be recorded (pass_through). docs/how-it-works.md
// has what each route costs and where they differ.
constexpr c10::DispatchKey kFakeKey = c10::DispatchKey::Fake;
constexpr c10::DispatchKey kModeKey = c10::DispatchKey::TESTING_ONLY_GenericMode;
constexpr c10::DispatchKeySet kMathBitKeys({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative});

struct Route {
  c10::DispatchKey key;
  c10::DispatchKeySet key_set;  // {key}, for the TLS guards
  c10::DispatchKeySet after;    // the keys a redispatch goes on to
  // Above the Python key (Fake on torch 2.11, and the mode route): a call
  // that goes on to the Python key is seen before its Python code runs. A
  // tensor subclass's call is recorded as the subclass's (as a
  // TorchDispatchMode sees it; below Python the calls its __torch_dispatch__
  // makes are recorded instead, and the Python key keeps our key out of
  // those above it), and a FakeTensorMode's calls would be recorded as real
  // ones: tracing_above_python() leaves those out, as the meta calls they
  // become are left out below Python.
  bool above_python;
  bool above_autograd;  // the mode route: passes_through() corrects the stream
};

static constexpr Route make_route(c10::DispatchKey key) {
  return Route{key, c10::DispatchKeySet(key), c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, key),
               static_cast<int>(key) > static_cast<int>(c10::DispatchKey::Python),
               static_cast<int>(key) > static_cast<int>(c10::DispatchKey::AutogradFunctionality)};
}

// Chosen once by sp_fallback_install, before the fallback is registered (the
// dispatcher's lock orders it before any call of the fallback).
static Route g_route = make_route(kFakeKey);

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;

// Runs on an exiting thread that had scratch (it ran an operator).
static void free_scratch(void* scratch) {
  // Later exit-time code may still run ops here.
  if (t_state.scratch == scratch) t_state.scratch = nullptr;
  sp_thread_free(static_cast<sp_thread*>(scratch));
}
static void make_scratch_key() { pthread_key_create(&g_scratch_key, free_scratch); }

static sp_thread* new_scratch() {
  pthread_once(&g_scratch_once, make_scratch_key);
  sp_thread* t = sp_thread_new();
  if (t) pthread_setspecific(g_scratch_key, t);
  return t;
}

// Whether this thread's own pass is logged and its profiler logs (the key
// belongs in its TLS).
static bool own_pass_logs() {
  int mode;
  sp_pass_current(&mode);
  return mode != 0;
}

static void set_key(bool on) {
  if (c10::impl::tls_is_dispatch_key_included(g_route.key) != on)
    c10::impl::tls_set_dispatch_key_included(g_route.key, on);
}

// An operator this thread has not met yet: its id from the registry (and
// its schema's names the first time anyone meets it).
[[gnu::noinline]] static int intern_op_slow(sp_thread* t, const c10::OperatorHandle& op) {
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

[[gnu::always_inline]] static inline int intern_op(sp_thread* t, const c10::OperatorHandle& op) {
  int id = sp_thread_op(t, &op.operator_name());
  return id >= 0 ? id : intern_op_slow(t, op);
}

// The Python class name the caller will see, as torch's exception translation
// (torch/csrc/Exceptions.h) would choose it.
static const char* c10_error_type(const c10::Error& e) {
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

static std::atomic<sp_error_describer> g_describer{nullptr};

// A kernel's exception that is not c10's, described by the layer that knows
// it (the Python layer registers sp_pyerror.cpp's: a Python kernel's
// exception, by its own class name and str()); false when none does.
static bool describe(sp_profiler* p, sp_thread* t, const std::exception& e) {
  sp_error_describer d = g_describer.load(std::memory_order_acquire);
  char *type = nullptr, *msg = nullptr;
  size_t type_n = 0, msg_n = 0;
  if (!d || d(&e, &type, &type_n, &msg, &msg_n) != SP_OK) return false;
  sp_call_fail_n(p, t, type, type_n, msg, msg_n);
  std::free(type);
  std::free(msg);
  return true;
}

static void record_exception(sp_profiler* p, sp_thread* t, std::exception_ptr ex) {
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

static std::atomic<bool> g_internal_warned{false};

static void internal_error(const char* what) {
  if (!g_internal_warned.exchange(true))
    TORCH_WARN("sgl_shapeprof: internal error, calls are no longer described: ", what);
}

static void redispatch(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                torch::jit::Stack* stack) {
  // Ops a kernel calls are not the model's: TorchDispatchMode does not see
  // them either.
  c10::impl::ExcludeDispatchKeyGuard guard(g_route.key_set);
  op.redispatchBoxed(ks & g_route.after, stack);
}

// The mode route: a call autograd's own kernel ends, never reaching the
// Python key (torch/csrc/autograd/VariableTypeManual.cpp: detach_ clears
// the tensor's autograd data and returns). Goes on unrecorded.
static bool ends_at_autograd(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  return name.overload_name.empty() && name.name == "aten::detach_";
}

// The mode route (Route::above_autograd): whether the Python key would not
// see this call as it is -- autocast will cast its inputs and call it again,
// or a CompositeImplicitAutograd kernel will decompose it at the autograd
// key. The dispatcher's own precedence for an autograd key (a kernel
// registered on it; else CompositeImplicitAutograd unless the backend has a
// kernel of its own or a CompositeExplicitAutograd one), asked per call: a
// few hash lookups, only on this route.
[[gnu::noinline]] static bool passes_through(const c10::OperatorHandle& op, c10::DispatchKeySet ks) {
  c10::DispatchKeySet rest = ks & g_route.after;
  c10::DispatchKeySet autocast = rest & c10::autocast_dispatch_keyset;
  if (!autocast.empty() && op.hasKernelForDispatchKey(autocast.highestPriorityTypeId())) return true;
  c10::DispatchKeySet autograd = rest & c10::autograd_dispatch_keyset;
  if (autograd.empty()) return false;  // inference_mode(), or an inference tensor: whole, as Python sees it
  if (ends_at_autograd(op)) return true;
  c10::DispatchKey k = autograd.highestPriorityTypeId();
  using c10::DispatchKey;
  return !op.hasKernelForDispatchKey(k) && op.hasKernelForDispatchKey(DispatchKey::CompositeImplicitAutograd) &&
         !op.hasKernelForDispatchKey(DispatchKey::CompositeExplicitAutograd) &&
         !op.hasKernelForDispatchKey(DispatchKey::CompositeExplicitAutogradNonFunctional) &&
         !op.hasKernelForAnyDispatchKey(c10::getBackendKeySetFromAutograd(k));
}

// The mode route: a call with an input whose conjugate or negative bit is
// set, and no kernel of its own on that bit's key, goes to ATen's
// MathOpFallback (ATen/native/MathBitsFallback.h), below autograd: it
// materializes each such input with aten::clone, called from the top, and
// calls on. The Python key sees those clones, then the call; a key above
// autograd sees the call first, and the clones inside its own redispatch,
// where it does not look. So they are made here, as that fallback makes
// them, before the call is recorded: recorded ahead of it, with the
// fallback below left nothing to do. Only for an out-of-place call that
// autograd does not record (a clone above autograd would join its graph):
// an in-place, out= or view call, or one in grad mode, is recorded as the
// caller made it (docs/how-it-works.md); so is one that a key between
// would see differently: the JIT tracer (which would trace the clone),
// ZeroTensor (whose fallback makes such an input zeros first) and
// functorch's transforms (whose levels keep grad modes of their own).
constexpr c10::DispatchKeySet kMathBitsLeftAlone({c10::DispatchKey::Tracer, c10::DispatchKey::ZeroTensor,
                                                  c10::DispatchKey::FuncTorchDynamicLayerFrontMode});

[[gnu::cold, gnu::noinline]] static void resolve_math_bits(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                                                          torch::jit::Stack* stack) {
  c10::DispatchKeySet rest = ks & g_route.after;
  if (!(rest & c10::autograd_dispatch_keyset).empty() && c10::GradMode::is_enabled()) return;
  if (!(rest & kMathBitsLeftAlone).empty()) return;
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  size_t n = arguments.size();
  if (stack->size() < n) return;
  for (const c10::Argument& a : arguments)
    if (a.alias_info()) return;
  static const c10::OperatorHandle clone = c10::Dispatcher::singleton().findSchemaOrThrow("aten::clone", "");
  // in the dispatcher's order: Negative is above Conjugate
  for (c10::DispatchKey key : {c10::DispatchKey::Negative, c10::DispatchKey::Conjugate}) {
    if (!rest.has(key) || op.hasKernelForDispatchKey(key)) continue;
    auto materialize = [&](at::Tensor& t) {
      if (!t.defined() || !t.key_set().has(key)) return;
      torch::jit::Stack s{t, c10::IValue()};
      clone.callBoxed(&s);
      t = s[0].toTensor();
    };
    for (size_t i = stack->size() - n; i < stack->size(); i++) {
      c10::IValue& v = (*stack)[i];
      if (v.isTensor()) {
        at::Tensor t = std::move(v).toTensor();
        materialize(t);
        v = std::move(t);
      } else if (v.isTensorList()) {
        c10::List<at::Tensor> list = std::move(v).toTensorList();
        for (size_t j = 0; j < list.size(); j++) {
          at::Tensor t = list[j];
          materialize(t);
          list[j] = std::move(t);
        }
        v = std::move(list);
      }
    }
  }
}

// Goes on with the key kept in: the calls it becomes are recorded.
static void pass_through(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  op.redispatchBoxed(ks & g_route.after, stack);
}

// A call bound for the Python key, seen above it (Route::above_python): true when it
// computes no real shape -- a FakeTensorMode is active, or an input is a
// FakeTensor (its storage is on the meta device). A proxy tracer over real
// tensors runs real calls: recorded, as below Python the calls it makes are.
[[gnu::cold, gnu::noinline]] static bool tracing_above_python(const c10::IValue* args, size_t n) {
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
[[gnu::cold, gnu::noinline]] static void redispatch_meta(sp_profiler* p, sp_thread* t, const c10::OperatorHandle& op,
                     c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  size_t n_args = op.schema().arguments().size();
  if (stack->size() < n_args) return redispatch(op, ks, stack);
  // The inputs, kept for describing them if the call raises: the stack's
  // arguments are consumed by the call.
  std::vector<c10::IValue> args(stack->end() - n_args, stack->end());
  // It is described only once it raised: a timed profiler's time is taken here.
  int64_t start = (sp_logging(p) & SP_LOGGING_TIME) ? sp_clock_ns() : 0;
  try {
    redispatch(op, ks, stack);
  } catch (...) {
    std::exception_ptr ex = std::current_exception();
    int64_t end = start ? sp_clock_ns() : 0;
    try {
      int id = intern_op(t, op);
      t_state.allow_meta = true;
      sp_enc* in = &sp_thread_enc(t)->in;
      bool ok = id >= 0 && ((sp_logging(p) & SP_LOGGING_ARGS)
                                ? encode_inputs_args(in, id, op.schema(), args.data(), args.size())
                                : encode_inputs(in, id, args.data(), args.size()));
      t_state.allow_meta = false;
      if (ok && sp_call_begin(p, t) != SP_CALL_SKIP) {
        sp_call_span(t, start, end);
        record_exception(p, t, ex);
      }
    } catch (const std::exception& e) {
      t_state.allow_meta = false;
      internal_error(e.what());
    }
    std::rethrow_exception(ex);
  }
}

// Marks the thread's recorded call as running for a scope (ThreadState::open_op).
struct OpenOp {
  ThreadState& ts;
  int outer;
  OpenOp(ThreadState& s, int op) : ts(s), outer(s.open_op) { ts.open_op = op; }
  ~OpenOp() { ts.open_op = outer; }
  OpenOp(const OpenOp&) = delete;
  OpenOp& operator=(const OpenOp&) = delete;
};

static void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                     torch::jit::Stack* stack) {
  int mode;
  sp_profiler* p = sp_pass_target(&mode);
  if (!mode) {
    // A lingering key: this thread's profiler was closed by another thread,
    // or the pass whose key it inherited ended.
    set_key(false);
    return redispatch(op, ks, stack);
  }
  ThreadState& ts = t_state;
  if (C10_UNLIKELY(g_route.above_autograd)) {
    // Code that keeps Fake out (torch's tensor constructors, say) keeps the
    // first route's key out: so the second's.
    if (c10::impl::tls_is_dispatch_key_excluded(kFakeKey)) return redispatch(op, ks, stack);
    if (passes_through(op, ks)) return pass_through(op, ks, stack);
    if (C10_UNLIKELY(!(ks & g_route.after & kMathBitKeys).empty())) resolve_math_bits(op, ks, stack);
  }
  if (C10_UNLIKELY(g_route.above_python)) {
    if (ks.has(c10::DispatchKey::Python)) {
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
  {
    // While it runs, calls that do not pass the dispatcher (a Triton launch,
    // a kernel library's call from the op's Python kernel) are its work.
    OpenOp open(ts, static_cast<int>(sp_thread_enc(t)->in.w[0]) + 1);
    try {
      redispatch(op, ks, stack);
      if (C10_UNLIKELY(ts.sync)) synchronize(device, stack, op.schema().returns().size());
      sp_call_returned(t);  // a timed call's time ends here (with sync: the device's too)
    } catch (...) {
      sp_call_returned(t);
      record_exception(p, t, std::current_exception());
      throw;
    }
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

static std::mutex g_install_mu;
static c10::RegistrationHandleRAII* g_fallback_handle = nullptr;
static c10::RegistrationHandleRAII* g_listener_handle = nullptr;
static std::string g_install_error;

class ForgetDeregistered final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  void onOperatorDeregistered(const c10::OperatorHandle& op) override {
    sp_op_forget(&op.operator_name());
  }
};

SP_TORCH_END

using namespace sp_torch;

extern "C" {

// This thread's scratch, for a fatal-signal handler (a thread_local read).
sp_thread* thread_scratch() { return t_state.scratch; }

int sp_fallback_install(void) {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (g_fallback_handle) return SP_OK;
  sp_set_thread_getter(&thread_scratch);
  try {
    auto& d = c10::Dispatcher::singleton();
    // The first free key of the routes (see Route).
    c10::DispatchKey key = kFakeKey;
    if (d.hasBackendFallbackForDispatchKey(key)) key = kModeKey;
    if (d.hasBackendFallbackForDispatchKey(key)) {
      g_install_error = c10::str("this torch already has fallbacks on DispatchKey::", kFakeKey, " and ",
                                 kModeKey, "; sgl_shapeprof has no free key to register its fallback on");
      return SP_ERROR;
    }
    g_route = make_route(key);
    if (set_dtype_names() != SP_OK || set_enum_names() != SP_OK) {
      g_install_error = "out of memory";
      return SP_NOMEM;
    }
    g_listener_handle = new c10::RegistrationHandleRAII(
        d.addRegistrationListener(std::make_unique<ForgetDeregistered>()));
    g_fallback_handle = new c10::RegistrationHandleRAII(d.registerFallback(
        key, c10::KernelFunction::makeFromBoxedFunction<&fallback>(),
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
  if (!c10::impl::tls_is_dispatch_key_included(g_route.key)) return 0;
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
  sp_profiler* p = sp_pass_target(&mode);
  return mode ? p : nullptr;
}

int sp_fallback_open_op(void) { return t_state.open_op; }

int sp_fallback_thread_enabled(void) {
  return c10::impl::tls_is_dispatch_key_included(g_route.key) ? 1 : 0;
}

const char* sp_fallback_key(void) { return c10::toString(g_route.key); }

void sp_fallback_set_describer(sp_error_describer describer) {
  g_describer.store(describer, std::memory_order_release);
}

int sp_fallback_installed(void) {
  std::lock_guard<std::mutex> lock(g_install_mu);
  return g_fallback_handle != nullptr;
}

}  // extern "C"

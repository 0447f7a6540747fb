// A boxed fallback on DispatchKey::Fake that records nothing and only
// forwards each call: the floor that any dispatch-key hook pays (the
// dispatcher boxes the arguments to call it and unboxes them again to
// redispatch), measured beside sgl_shapeprof (benchmarks/forward_only.py
// builds it; run.py and server.py load it with ctypes into processes where
// sgl_shapeprof's own fallback is not installed: both sit on Fake).
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace {

constexpr c10::DispatchKey kKey = c10::DispatchKey::Fake;

// The same forwarding as sgl_shapeprof's redispatch (csrc/torch/sp_fallback.cpp).
void forward(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard guard(kKey);
  op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kKey), stack);
}

}  // namespace

extern "C" {
// Puts the key in (on != 0) or out of this thread's included set; returns
// whether it was in.
int forward_only_key(int on) {
  bool was = c10::impl::tls_is_dispatch_key_included(kKey);
  c10::impl::tls_set_dispatch_key_included(kKey, on != 0);
  return was ? 1 : 0;
}
}

TORCH_LIBRARY_IMPL(_, Fake, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&forward>());
}

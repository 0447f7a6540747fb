// sp_torch_internal.h -- what the parts of the torch layer share: the
// dispatch key, the thread's state, and the functions one part calls in
// another.
//
// The torch layer is three parts, as torch's profiler keeps its
// InputOutputEncoder apart from its observers: sp_encode.cpp (a call's
// IValues as the core's words; its hot half inline in sp_encode.h),
// sp_sync.cpp (sync mode: waiting for the device, telling a graph capture)
// and sp_fallback.cpp (the boxed fallback itself, the key, exceptions,
// install). Each includes this header first and compiles alone;
// sp_torch.cpp includes them all in one translation unit, which is how the
// module is built (as the core's sp_core.c: the compiler inlines across
// parts as within one). SP_TORCH_PRIVATE marks what a part shares: static
// in that unit, plain (and hidden: -fvisibility=hidden) alone.
#ifndef SP_TORCH_INTERNAL_H
#define SP_TORCH_INTERNAL_H

#include "torch/sp_fallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/GradMode.h>
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

// In that unit the parts' names are in an unnamed namespace (internal
// linkage, as in one file: the inliner's choices are a single file's).
#ifdef SP_TORCH_AMALGAMATION
#define SP_TORCH_PRIVATE static
#define SP_TORCH_BEGIN namespace sp_torch { namespace {
#define SP_TORCH_END } }
#else
#define SP_TORCH_PRIVATE
#define SP_TORCH_BEGIN namespace sp_torch {
#define SP_TORCH_END }
#endif

SP_TORCH_BEGIN

// The key the fallback sits on, and why, are sp_fallback.cpp's (its route:
// Fake while torch leaves it free, else a key above autograd whose stream is
// corrected to Fake's).

// Plain data, so that a thread_local access needs no init guard; the scratch
// is freed at thread exit through a pthread key. Which profiler this
// thread's calls go to is the core's to say (sp_pass_target): the key
// only follows it.
struct ThreadState {
  sp_thread* scratch;
  bool paused;            // key taken out while a compiler runs
  bool saw_meta;          // the call being described has a meta tensor
  bool allow_meta;        // ...and is described anyway: it raised
  bool sync;              // synchronise the device after each recorded call (sp_fallback_sync)
  int open_op;            // op id + 1 of the recorded call running on this thread, else 0:
                          // what a launch inside it runs within (sp_fallback_open_op)
};
// A thread_local of a trivial type is zero-initialised with no init guard
// and no exit-time destructor: a read is a load (thread_scratch() reads it
// in a fatal-signal handler).
static_assert(std::is_trivial_v<ThreadState> && std::is_trivially_destructible_v<ThreadState> &&
                  std::is_standard_layout_v<ThreadState>,
              "ThreadState must stay plain data");
// The core's structs this layer fills are C's (sp_core.h, sp_fallback.h):
// plain data, one layout in both languages.
static_assert(std::is_standard_layout_v<sp_enc> && std::is_trivially_copyable_v<sp_enc>,
              "sp_enc is C's struct");
static_assert(std::is_standard_layout_v<sp_thread_public> && std::is_trivially_copyable_v<sp_thread_public>,
              "sp_thread_public is C's struct");
static_assert(std::is_standard_layout_v<sp_sync_stats> && std::is_trivially_copyable_v<sp_sync_stats>,
              "sp_sync_stats is C's struct");
#ifdef SP_TORCH_AMALGAMATION
static thread_local ThreadState t_state;
#else
extern thread_local ThreadState t_state;  // sp_fallback.cpp's
#endif

// ---- sp_encode.cpp (the inline half: sp_encode.h) ----
// Appends <tensor>, sizes, strides, offset and device (arguments on);
// false when the call must not be logged.
SP_TORCH_PRIVATE bool encode_tensor(sp_enc* e, const at::Tensor& t);
SP_TORCH_PRIVATE bool encode_strided(sp_enc* e, const at::Tensor& t);
// The outputs, written (not compared): out of the hot path of a repeat.
SP_TORCH_PRIVATE bool write_outputs(sp_enc* e, const c10::IValue* rets, size_t n);
// Inputs with every argument (SP_LOGGING_ARGS): what `replay` needs.
SP_TORCH_PRIVATE bool encode_inputs_args(sp_enc* e, int op_id, const c10::FunctionSchema& schema,
                                         const c10::IValue* args, size_t n);
// The names the encoder's codes stand for, given to the core once.
SP_TORCH_PRIVATE int set_dtype_names();
SP_TORCH_PRIVATE int set_enum_names();

// ---- sp_sync.cpp: sync mode ----
// The device of the first tensor among values that is not on the host.
SP_TORCH_PRIVATE c10::Device device_of(const c10::IValue* values, size_t n);
// After a recorded call: waits for its device, unless a graph is captured.
SP_TORCH_PRIVATE void synchronize(c10::Device d, const torch::jit::Stack* stack, size_t n_rets);

SP_TORCH_END

#endif  // SP_TORCH_INTERNAL_H

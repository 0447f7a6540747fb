// sp_encode.h -- the encoder's hot half, inline in the fallback: a call's
// tensors (inputs and outputs) as the core's words (sp_core.h's sp_enc),
// and a deduplicated repeat's outputs compared in place. The rest of the
// encoder (arguments, names) is sp_encode.cpp.
#ifndef SP_ENCODE_H
#define SP_ENCODE_H

#include "torch/sp_torch_internal.h"

SP_TORCH_BEGIN

// ---- the tensor encoder: the one place an at::Tensor is read ----
// (as torch's profiler reads a tensor in one RawTensorMetadata(const
// at::Tensor&)). Its dtype code, as <tensor> and the registry's names say it.
[[gnu::always_inline]] SP_TORCH_PRIVATE inline int dtype_code(const c10::TensorImpl* impl) {
  return static_cast<int>(c10::typeMetaToScalarType(impl->dtype()));
}

// The tensor's impl, or null when it has no plain sizes to read (symbolic or
// nested sizes: someone is tracing, or no <tensor> can say it).
[[gnu::always_inline]] SP_TORCH_PRIVATE inline c10::TensorImpl* readable(const at::Tensor& t) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->has_symbolic_sizes_strides() || impl->is_nested()) return nullptr;
  return impl;
}

// Appends head_n words, then <tensor> of impl (a readable one): strided
// (sizes, strides, offset, device) when asked and its layout has strides,
// else dtype and sizes. Every tensor the torch layer writes, an operator's
// (the fallback) or a value that reaches us outside the dispatcher
// (sp_tensor_put), is written here.
[[gnu::always_inline]] SP_TORCH_PRIVATE inline void put_tensor(sp_enc* e, const int64_t* head, int head_n,
                                                               const c10::TensorImpl* impl, bool strided) {
  if (strided && impl->layout() == c10::kStrided) {
    for (int i = 0; i < head_n; i++) sp_enc_push(e, head[i]);
    c10::IntArrayRef sizes = impl->sizes();
    c10::Device device = impl->device();
    sp_enc_strided(e, dtype_code(impl), static_cast<int>(sizes.size()), sizes.data(), impl->strides().data(),
                   impl->storage_offset(), static_cast<int>(device.type()), device.index());
  } else {  // other layouts (sparse, mkldnn) have no strides: their sizes and dtype only
    c10::IntArrayRef sizes = impl->sizes();
    sp_enc_tensor_after(e, head, head_n, dtype_code(impl), static_cast<int>(sizes.size()), sizes.data());
  }
}

// The impl of an operator's tensor, or null when the call must not be
// logged: a meta tensor (unless the call raised: t_state.allow_meta), or
// one readable() refuses -- someone is tracing, not running the model.
[[gnu::always_inline]] SP_TORCH_PRIVATE inline c10::TensorImpl* loggable(const at::Tensor& t) {
  if (t.is_meta() && !t_state.allow_meta) {
    t_state.saw_meta = true;
    return nullptr;
  }
  return readable(t);
}

// Appends head_n words, then an operator's <tensor>; false when the call
// must not be logged.
[[gnu::always_inline]] SP_TORCH_PRIVATE inline bool encode_tensor_after(sp_enc* e, const int64_t* head,
                                                                        int head_n, const at::Tensor& t) {
  c10::TensorImpl* impl = loggable(t);
  if (!impl) return false;
  put_tensor(e, head, head_n, impl, false);
  return true;
}

// A list argument or return: Tensor[] or Tensor?[], its tensors plain or
// strided. Returns -1 to skip the call, 0 if v holds no tensor (nothing
// appended), 1 if appended.
template <bool kStrided>
SP_TORCH_PRIVATE int encode_list(sp_enc* e, const c10::IValue& v) {
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
[[gnu::always_inline]] SP_TORCH_PRIVATE inline bool encode_inputs(sp_enc* e, int op_id, const c10::IValue* args, size_t n) {
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
    c10::IntArrayRef sizes = impl->sizes();  // the words put_tensor would write
    return sp_enc_tensor_is(w, n, &at, head, head_n, dtype_code(impl), static_cast<int>(sizes.size()),
                            sizes.data());
  }
  bool done() const { return same && at == n; }
};

// Outputs: each return, a tensor, a list of them, or None for anything
// else. False when the call must not be logged (a Writer) or the outputs
// are not the expected ones (a Checker).
template <class Sink>
[[gnu::always_inline]] SP_TORCH_PRIVATE inline bool encode_outputs(Sink& s, const c10::IValue* rets, size_t n) {
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

SP_TORCH_END

#endif  // SP_ENCODE_H

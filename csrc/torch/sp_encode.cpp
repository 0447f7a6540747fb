// sp_encode.cpp -- the encoder: a call's IValues as the core's words
// (sp_core.h's sp_enc), and the names its codes stand for. Its hot half
// (tensors, outputs) is inline in sp_encode.h.
// A part of the torch layer: compiled alone, or inside sp_torch.cpp (see
// sp_torch_internal.h).
#include "torch/sp_encode.h"

SP_TORCH_BEGIN

// Appends <tensor>; false when the call must not be logged.
SP_TORCH_PRIVATE bool encode_tensor(sp_enc* e, const at::Tensor& t) { return encode_tensor_after(e, nullptr, 0, t); }

// Out of line: the hot path of a deduplicated repeat stays short.
[[gnu::noinline]] SP_TORCH_PRIVATE bool write_outputs(sp_enc* e, const c10::IValue* rets, size_t n) {
  sp_enc_reset(e);
  Writer write{e};
  return encode_outputs(write, rets, n);
}

// ---- arguments (SP_LOGGING_ARGS): what a call needs to be run again ----

// A strided input: sizes, strides, offset, device (other layouts: their
// sizes and dtype only).
SP_TORCH_PRIVATE bool encode_strided(sp_enc* e, const at::Tensor& t) {
  c10::TensorImpl* impl = loggable(t);
  if (!impl) return false;
  put_tensor(e, nullptr, 0, impl, true);
  return true;
}

static int64_t double_bits(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

static void push_tag(sp_enc* e, int tag, size_t arg) {
  sp_enc_push(e, tag);
  sp_enc_push(e, static_cast<int64_t>(arg));
}

static void push_opaque(sp_enc* e, size_t arg, const std::string& what) {
  push_tag(e, SP_ENC_OPAQUE, arg);
  sp_enc_bytes(e, what.data(), what.size());
}

// The enum an int argument holds, by its schema type: dtype, layout or
// memory format (also when optional); 0 for a plain int.
static int enum_tag(const c10::Argument& a, int64_t* table) {
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
static void encode_wrapped(sp_enc* e, size_t arg, const at::Tensor& t) {
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
static bool encode_plain_list(sp_enc* e, size_t arg, const c10::IValue& v) {
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
SP_TORCH_PRIVATE bool encode_inputs_args(sp_enc* e, int op_id, const c10::FunctionSchema& schema,
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

// ---- names: what the encoder's dtype and enum codes are called ----

SP_TORCH_PRIVATE int set_dtype_names() {
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
SP_TORCH_PRIVATE int set_enum_names() {
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

SP_TORCH_END

// A value that reaches us outside the dispatcher (a kernel library's API
// call, a launch): written by the same encoder as an operator's tensors.
// Meta tensors too: the meta rule is the fallback's, for calls.
extern "C" int sp_tensor_put(sp_enc* e, const void* tensor, int strided) {
  const at::Tensor& t = *static_cast<const at::Tensor*>(tensor);
  if (!t.defined()) return 0;
  const c10::TensorImpl* impl = sp_torch::readable(t);
  if (!impl) return 0;
  sp_torch::put_tensor(e, nullptr, 0, impl, strided != 0);
  return 1;
}

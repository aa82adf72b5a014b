// hfa's torch ops in C++: torch.ops.hfa.{fwd, fwd_into, bwd, fwd_kvcache, fwd_kvcache_into}, and
// the plain calls' narrower {attention, varlen_attention, kvcache_attention}.
//
// Why C++: a forward that goes through the dispatcher straight into libhfa costs ~20 us of host
// time (6 of them libhfa's own), as SDPA's backends do; through Python glue and ctypes it cost
// ~90 (bench/bench_overhead.py). hfa::fwd and hfa::bwd have the schemas that
// python/hfa/_torch_ctypes.py registers where this library is absent, so one Python front end
// (python/hfa/_torch.py) and one set of fake kernels serve both; the out= and KV-cache ops exist
// here only (the ctypes path runs those calls without an op).
//
// What is here: tensor views and status translation (a bad argument raises ValueError, a dtype
// TypeError, "not supported" NotImplementedError, each with libhfa's message naming the
// argument), the kernels for the CPU and CUDA keys, and the autograd kernel of hfa::fwd (a
// torch::autograd::Function, so that eager training steps never enter Python either).
// Everything the library writes is allocated with torch's allocator on the inputs' device;
// nothing synchronizes the host.
//
// libhfa is reached through its C ABI alone (hfa.h): tensor views, options structs started from
// hfa_default_*options(), a prepared call (hfa_prepare_*: the arguments validated once, the
// workspace sized), torch's workspace, hfa_run, and hfa_last_error() on failure. No C++ type of
// hfa's (a Status, a std::string) crosses between this library and libhfa, so the two may be
// built with different libstdc++ ABIs (torch's wheels and a libhfa built beside them need not
// agree).
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hfa/hfa.h"

namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;

// --- views and statuses ------------------------------------------------------------------------

std::optional<hfa_dtype> dtype_code(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return HFA_F32;
    case at::kHalf: return HFA_F16;
    case at::kBFloat16: return HFA_BF16;
    case at::kFloat8_e4m3fn: return HFA_E4M3;
    case at::kFloat8_e5m2: return HFA_E5M2;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7)
    case at::kFloat8_e8m0fnu: return HFA_UE8M0;
#endif
    case at::kInt: return HFA_I32;
    default: return std::nullopt;
  }
}

hfa_dtype dtype_of(const Tensor& t, const char* name) {
  std::optional<hfa_dtype> code = dtype_code(t.scalar_type());
  TORCH_CHECK_TYPE(code.has_value(), name, ": dtype ", t.scalar_type(), " is not supported");
  return *code;
}

// libhfa takes any strides but a unit last one, and on a GPU no stride of 0 over several
// elements (a broadcast, e.g. the expanded gradient of a sum, which TMA cannot read): a tensor
// with either is copied (as the Python front end does), and the copy is what the caller keeps
// alive.
Tensor usable_strides(const Tensor& t) {
  bool copy = t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1;
  for (int64_t d = 0; d < t.dim() && !copy; ++d) copy = t.size(d) > 1 && t.stride(d) == 0;
  return copy ? t.contiguous() : t;
}

hfa_tensor view(const Tensor& t, hfa_dtype code, const char* name) {
  // The shape, strides and device read once each (a call makes a view of every tensor it has).
  const at::IntArrayRef shape = t.sizes(), strides = t.strides();
  const c10::Device device = t.device();
  TORCH_CHECK_VALUE(shape.size() <= HFA_MAX_RANK, name, ": rank ", shape.size(), " is more than ",
                    HFA_MAX_RANK);
  TORCH_CHECK_VALUE(device.is_cpu() || device.is_cuda(), name, ": device ", device,
                    " is not supported (cpu or cuda)");
  hfa_tensor v{};
  v.data = t.data_ptr();
  v.dtype = code;
  v.rank = static_cast<int32_t>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    v.shape[d] = shape[d];
    v.stride[d] = strides[d];
  }
  v.device = device.is_cuda() ? HFA_CUDA : HFA_CPU;
  v.device_index = device.is_cuda() ? device.index() : 0;
  return v;
}

hfa_tensor view(const Tensor& t, const char* name) { return view(t, dtype_of(t, name), name); }

// Which strides a view takes: usable ones (an input the library cannot take as it is is
// copied, as the Python front end does), or the given ones (what the library writes, and
// descales, which it reads in place even broadcast).
enum class Strides { usable, as_given };

// Whether an optional argument was given. None passed for a Tensor argument (a plain op's
// cu_seqlens) arrives as an undefined tensor: not given either, for the library to name.
bool given(const OptTensor& t) { return t.has_value() && t->defined(); }

// An optional argument's view, and the tensor it views (the caller's, or a copy), kept where
// the options can point at them.
struct OptionalView {
  Tensor kept;
  std::optional<hfa_tensor> tensor;
  OptionalView(const OptTensor& t, const char* name, Strides strides = Strides::usable) {
    if (given(t)) tensor = view(keep(*t, strides), name);
  }
  OptionalView(const OptTensor& t, hfa_dtype code, const char* name,
               Strides strides = Strides::usable) {
    if (given(t)) tensor = view(keep(*t, strides), code, name);
  }
  const hfa_tensor* get() const { return tensor ? &*tensor : nullptr; }

 private:
  const Tensor& keep(const Tensor& t, Strides strides) {
    kept = strides == Strides::usable ? usable_strides(t) : t;
    return kept;
  }
};

// The field at `offset` of an options struct (hfa_option_info's), of type T.
template <class T, class Options>
T& field(Options& options, std::size_t offset) {
  return *reinterpret_cast<T*>(reinterpret_cast<char*>(&options) + offset);
}

// --- the VECTOR rows of hfa/options.def: one list argument of the full ops -----------------------
//
// Every full op takes `Tensor?[]? vectors=None` after sm_margin: entry n, when given,
// sets the struct's n-th VECTOR row in the rows' order (hfa_describe_options), named by its caller
// name in messages. So a new row reaches the ops, their autograd and the Python front end with no
// edit here (python/tests/test_torch_schema.py checks the list against the description).
using Vectors = std::optional<c10::List<std::optional<Tensor>>>;
const Vectors kNoVectors;

// The VECTOR rows of an options struct, described.
std::vector<const hfa_option_info*> vector_rows(hfa_options_struct which) {
  int32_t count = 0;
  const hfa_option_info* rows = hfa_describe_options(which, &count, nullptr);
  std::vector<const hfa_option_info*> vectors;
  for (int32_t n = 0; n < count; ++n)
    if (rows[n].kind == HFA_KIND_VECTOR) vectors.push_back(&rows[n]);
  return vectors;
}

// The given vectors' views, alive for one call, set in the options struct.
struct VectorViews {
  std::vector<OptionalView> views;

  template <class Options>
  VectorViews(const Vectors& given, hfa_options_struct which, Options& options) {
    if (!given.has_value() || given->empty()) return;
    static const std::vector<const hfa_option_info*> kRows[2] = {
        vector_rows(HFA_OPTIONS_ATTENTION), vector_rows(HFA_OPTIONS_KVCACHE)};
    const std::vector<const hfa_option_info*>& rows = kRows[which];
    TORCH_CHECK_VALUE(given->size() <= rows.size(), "vectors: ", given->size(),
                      " given, but the options have ", rows.size(), " VECTOR rows");
    views.reserve(given->size());
    for (std::size_t n = 0; n < given->size(); ++n) {
      views.emplace_back(given->get(n), rows[n]->caller);
      field<const hfa_tensor*>(options, rows[n]->offset) = views.back().get();
    }
  }
};

// --- the scalar rows of hfa/options.def: one list argument of the full ops -----------------------
//
// Every full op takes `float[]? scalars=None` last (after the vectors and the TENSOR rows named
// after them: the block-sparse ones, the KV-cache ops' indices): (row, value) pairs, row the
// index of a FLAG, INT32, REAL or SCALE row among its struct's rows (hfa_describe_options' order,
// which only grows at its end) and value its value (a FLAG nonzero for on; an INT32 an integer,
// which a double holds exactly). They are set after the named arguments, so a scalar row that
// no argument names (python/hfa/_lib.py: scalars_of, from the caller's keyword) reaches the
// library with no edit here, as a VECTOR row does through `vectors`
// (python/tests/test_torch_schema.py checks that the ops take every row this way).
using Scalars = std::optional<at::ArrayRef<double>>;
const Scalars kNoScalars;

// One pair's row of an options struct, described; a ValueError for an index that is none.
const hfa_option_info& scalar_row(hfa_options_struct which, double index) {
  int32_t count = 0;
  const hfa_option_info* rows = hfa_describe_options(which, &count, nullptr);
  const bool in_range = index >= 0 && index < count && index == std::floor(index);
  const hfa_option_kind kind = in_range ? rows[static_cast<int32_t>(index)].kind : HFA_KIND_TENSOR;
  TORCH_CHECK_VALUE(kind == HFA_KIND_FLAG || kind == HFA_KIND_INT32 || kind == HFA_KIND_REAL ||
                        kind == HFA_KIND_SCALE,
                    "scalars: ", index, " is no scalar row of the options");
  return rows[static_cast<int32_t>(index)];
}

template <class Options>
void set_scalars(const Scalars& given, hfa_options_struct which, Options& options) {
  if (!given.has_value() || given->empty()) return;
  TORCH_CHECK_VALUE(given->size() % 2 == 0, "scalars: (row, value) pairs, got ", given->size(),
                    " numbers");
  for (std::size_t n = 0; n < given->size(); n += 2) {
    const hfa_option_info& row = scalar_row(which, (*given)[n]);
    const double value = (*given)[n + 1];
    switch (row.kind) {
      case HFA_KIND_FLAG: field<int32_t>(options, row.offset) = value != 0; break;
      case HFA_KIND_INT32:
        TORCH_CHECK_VALUE(value == std::trunc(value) && value >= INT32_MIN && value <= INT32_MAX,
                          row.caller, ": ", value, " is not an int32");
        field<int32_t>(options, row.offset) = static_cast<int32_t>(value);
        break;
      case HFA_KIND_SCALE: field<int32_t>(options, row.flag_offset) = 1; [[fallthrough]];
      default: field<float>(options, row.offset) = static_cast<float>(value); break;  // REAL
    }
  }
}

// The inputs' GPU current for the call (libhfa launches on the current device).
struct OnDevice {
  c10::OptionalDeviceGuard guard;
  explicit OnDevice(const Tensor& t) {
    if (t.is_cuda()) guard.reset_device(t.device());
  }
};

// The C ABI's names of the arguments whose Python name differs (python/hfa/_lib.py's
// _CALLER_NAMES): a message that starts with one names the argument as the caller wrote it.
std::string callers_words(const std::string& message) {
  static constexpr std::pair<std::string_view, std::string_view> kCallerNames[] = {
      {"k_new", "k"}, {"v_new", "v"}, {"sinks", "learnable_sink"}};
  const std::size_t colon = message.find(':');
  for (const auto& [abi, caller] : kCallerNames)
    if (colon == abi.size() && message.compare(0, colon, abi) == 0)
      return std::string(caller) + message.substr(colon);
  return message;
}

// A failed status as torch's error, with hfa_last_error()'s message (this thread's, read before
// anything else calls libhfa).
void check(hfa_status status) {
  if (status == HFA_SUCCESS) return;
  const char* last_error = hfa_last_error();
  const std::string message = callers_words(last_error != nullptr ? last_error : "");
  switch (status) {
    case HFA_ERROR_INVALID_ARGUMENT: TORCH_CHECK_VALUE(false, message);
    case HFA_ERROR_NOT_SUPPORTED: TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    default: TORCH_CHECK(false, "hfa: ", hfa_status_name(status), ": ", message);
  }
}

[[noreturn, gnu::cold, gnu::noinline]] void not_int32(int64_t value, const char* name) {
  TORCH_CHECK_VALUE(false, name, ": ", value, " does not fit the C ABI's int32");
  std::abort();  // not reached: TORCH_CHECK_VALUE threw
}

// An int argument of the schema as the C ABI's int32, rejected rather than wrapped when it does
// not fit. Inline, the message apart: a call converts five to nine of them.
inline int32_t to_int32(int64_t value, const char* name) {
  if (value < INT32_MIN || value > INT32_MAX) [[unlikely]] not_int32(value, name);
  return static_cast<int32_t>(value);
}

// torch's current stream on t's device (null on the CPU, where libhfa ignores it).
void* current_stream(const Tensor& t) {
  if (!t.is_cuda()) return nullptr;
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device())
      .native_handle();
}

// A call of libhfa, validated once: prepare(&call, &bytes) is an hfa_prepare_* with its arguments
// bound; the workspace it asks for comes from torch's caching allocator on like's device (no
// cudaMalloc, capturable in a CUDA graph), freed once the call is queued (the allocator reuses it
// in stream order); then hfa_run.
template <class Prepare>
void prepare_and_run(const Tensor& like, Prepare prepare) {
  hfa_call call;
  std::size_t bytes = 0;
  check(prepare(&call, &bytes));
  Tensor scratch;
  if (bytes > 0)
    scratch = at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
  check(hfa_run(&call, bytes > 0 ? scratch.data_ptr() : nullptr, bytes));
}

// The options structs as hfa_default_*options() starts them, asked of libhfa once: a call copies
// them rather than crossing into the library (and filling the struct there) again.
const hfa_options& default_options() {
  static const hfa_options defaults = hfa_default_options();
  return defaults;
}

const hfa_kvcache_options& default_kvcache_options() {
  static const hfa_kvcache_options defaults = hfa_default_kvcache_options();
  return defaults;
}

// A SCALE option's two fields (hfa/options.def); None leaves the default (no value).
void set_scale(int32_t& has_value, float& value, std::optional<double> given) {
  if (!given) return;
  has_value = 1;
  value = static_cast<float>(*given);
}

at::ScalarType out_dtype(const Tensor& q) {
  bool fp8 = q.scalar_type() == at::kFloat8_e4m3fn || q.scalar_type() == at::kFloat8_e5m2;
  return fp8 ? at::kBFloat16 : q.scalar_type();
}

// --- block-sparse attention: the kv_num_blocks ... kv_mask_bits rows of hfa/options.def --------
//
// Arguments of hfa::fwd, hfa::fwd_into and hfa::bwd after `vectors`, named by their rows' fields
// (the Python front end passes them by name, from block_mask=); the block sizes, sparse_block_q
// and sparse_block_kv, are scalar rows and come in `scalars`. The backward reads the forward's
// lists, so hfa::fwd's autograd saves them as they are.
#define HFA_BLOCK_SPARSE_PARAMETERS                                                              \
  const OptTensor &kv_num_blocks, const OptTensor &kv_indices,                                 \
      const OptTensor &full_kv_num_blocks, const OptTensor &full_kv_indices,                   \
      const OptTensor &kv_mask_bits
#define HFA_BLOCK_SPARSE_ARGUMENTS                                                               \
  kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, kv_mask_bits

struct BlockSparseArgs {
  OptTensor kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, kv_mask_bits;
  bool any() const {
    return given(kv_num_blocks) || given(kv_indices) || given(full_kv_num_blocks) ||
           given(full_kv_indices) || given(kv_mask_bits);
  }
};
const BlockSparseArgs kNoBlockSparse;

// The given lists' views, alive for one call, set in the options struct.
struct BlockSparseViews {
  OptionalView num, indices, full_num, full_indices, bits;

  BlockSparseViews(const BlockSparseArgs& a, hfa_options& o)
      : num(a.kv_num_blocks, "kv_num_blocks"), indices(a.kv_indices, "kv_indices"),
        full_num(a.full_kv_num_blocks, "full_kv_num_blocks"),
        full_indices(a.full_kv_indices, "full_kv_indices"), bits(a.kv_mask_bits, "kv_mask_bits") {
    o.kv_num_blocks = num.get();
    o.kv_indices = indices.get();
    o.full_kv_num_blocks = full_num.get();
    o.full_kv_indices = full_indices.get();
    o.kv_mask_bits = bits.get();
  }
};

// --- hfa::fwd, hfa::fwd_into -------------------------------------------------------------------

// A varlen call's q, k, v and out are (total_tokens, heads, headdim): one with either cu_seqlens
// given (the library names the other when it is missing).
bool is_varlen(const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k) {
  return given(cu_seqlens_q) || given(cu_seqlens_k);
}

struct AttentionArgs {  // what hfa::fwd and hfa::bwd share after q, k, v
  const OptTensor& cu_seqlens_q;
  const OptTensor& cu_seqlens_k;
  int64_t max_seqlen_q, max_seqlen_k;
  std::optional<double> softmax_scale;
  bool causal;
  int64_t window_left, window_right;
  double softcap;
  bool deterministic;
  const OptTensor& sinks;
  const OptTensor& seqused_q;
  const OptTensor& seqused_k;
  int64_t sm_margin;
  const Vectors& vectors = kNoVectors;
  const BlockSparseArgs& sparse = kNoBlockSparse;
  const Scalars& scalars = kNoScalars;
};

// The options' vectors (views), alive for one call.
struct AttentionViews {
  OptionalView cu_q, cu_k, sinks, used_q, used_k;
  explicit AttentionViews(const AttentionArgs& a)
      : cu_q(a.cu_seqlens_q, "cu_seqlens_q"), cu_k(a.cu_seqlens_k, "cu_seqlens_k"),
        sinks(a.sinks, "learnable_sink"), used_q(a.seqused_q, "seqused_q"),
        used_k(a.seqused_k, "seqused_k") {}

  // cu_seqlens_q without cu_seqlens_k, or the other way round, is the library's to name.
  hfa_options options(const AttentionArgs& a, const Tensor& q) const {
    hfa_options o = default_options();
    set_scale(o.has_softmax_scale, o.softmax_scale, a.softmax_scale);
    o.causal = a.causal ? 1 : 0;
    o.window_left = to_int32(a.window_left, "window_left");
    o.window_right = to_int32(a.window_right, "window_right");
    o.softcap = static_cast<float>(a.softcap);
    o.cu_seqlens_q = cu_q.get();
    o.cu_seqlens_k = cu_k.get();
    o.max_seqlen_q = to_int32(a.max_seqlen_q, "max_seqlen_q");
    o.max_seqlen_k = to_int32(a.max_seqlen_k, "max_seqlen_k");
    o.deterministic = a.deterministic ? 1 : 0;
    o.sinks = sinks.get();
    o.seqused_q = used_q.get();
    o.seqused_k = used_k.get();
    o.sm_margin = to_int32(a.sm_margin, "sm_margin");
    o.stream = current_stream(q);
    return o;
  }
};

// The FP8 arguments of a forward (hfa::fwd, hfa::fwd_into): the descales of e4m3 inputs and
// their rows per block (hfa.h).
struct Fp8Args {
  const OptTensor& q_descale;
  const OptTensor& k_descale;
  const OptTensor& v_descale;
  int64_t block_q, block_kv;
  bool any_descale() const { return given(q_descale) || given(k_descale) || given(v_descale); }
};

// The descales' views, alive for one call, with their strides as given: libhfa reads broadcast
// (stride 0) and transposed descales in place.
struct Fp8Views {
  OptionalView q, k, v;
  explicit Fp8Views(const Fp8Args& a)
      : q(a.q_descale, "q_descale", Strides::as_given),
        k(a.k_descale, "k_descale", Strides::as_given),
        v(a.v_descale, "v_descale", Strides::as_given) {}

  void apply(hfa_options& o) const {
    o.q_descale = q.get();
    o.k_descale = k.get();
    o.v_descale = v.get();
  }
};

void check_rank(const Tensor& t, const char* name, bool varlen) {
  if (varlen) {
    TORCH_CHECK_VALUE(t.dim() == 3, name,
                      ": expected rank 3 (total_tokens, heads, headdim), got shape ", t.sizes());
  } else {
    TORCH_CHECK_VALUE(t.dim() == 4, name,
                      ": expected rank 4 (batch, seqlen, heads, headdim), got shape ", t.sizes());
  }
}

// The forward into given out and lse tensors (lse null: not written).
void forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& out,
             const Tensor* lse, const AttentionArgs& a, const Fp8Args& fp8) {
  Tensor q = usable_strides(q_in), k = usable_strides(k_in), v = usable_strides(v_in);
  OnDevice on_device(q);
  AttentionViews views(a);
  hfa_options o = views.options(a, q);
  const VectorViews table_vectors(a.vectors, HFA_OPTIONS_ATTENTION, o);
  // The block-sparse lists and the descales are views only where given (a plain call has none:
  // the options keep their nulls, and no view is made and dropped).
  std::optional<BlockSparseViews> block_sparse;
  if (a.sparse.any()) block_sparse.emplace(a.sparse, o);
  std::optional<Fp8Views> descales;
  if (fp8.any_descale()) descales.emplace(fp8).apply(o);
  o.descale_block_q = to_int32(fp8.block_q, "descale_block_q");
  o.descale_block_kv = to_int32(fp8.block_kv, "descale_block_kv");
  set_scalars(a.scalars, HFA_OPTIONS_ATTENTION, o);
  const hfa_tensor qt = view(q, "q"), kt = view(k, "k"), vt = view(v, "v");
  const hfa_tensor ot = view(out, "out");
  std::optional<hfa_tensor> lt;
  if (lse != nullptr) lt = view(*lse, "lse");
  prepare_and_run(q, [&](hfa_call* call, std::size_t* bytes) {
    return hfa_prepare_forward(&qt, &kt, &vt, &ot, lt ? &*lt : nullptr, &o, call, bytes);
  });
}

std::array<int64_t, 3> lse_shape(const Tensor& q, bool varlen) {
  if (varlen) return {q.size(1), q.size(0), -1};
  return {q.size(0), q.size(2), q.size(1)};
}

Tensor empty_lse(const Tensor& q, bool varlen, bool rows_may_stay_unwritten) {
  std::array<int64_t, 3> s = lse_shape(q, varlen);
  at::IntArrayRef shape(s.data(), varlen ? 2 : 3);
  at::TensorOptions f32 = q.options().dtype(at::kFloat);
  // Rows beyond seqused_q are left untouched by libhfa: they read as an empty row's -inf.
  return rows_may_stay_unwritten ? at::full(shape, -INFINITY, f32) : at::empty(shape, f32);
}

// An output's shape: q's (rank 3 or 4, check_rank's) with the last extent `last`, kept on the
// stack (a vector would be a heap allocation a call).
struct OutShape {
  std::array<int64_t, HFA_MAX_RANK> extents{};
  std::size_t rank = 0;
  OutShape(const Tensor& q, int64_t last) : rank(q.sizes().size()) {
    std::copy(q.sizes().begin(), q.sizes().end() - 1, extents.begin());
    extents[rank - 1] = last;
  }
  operator at::IntArrayRef() const { return {extents.data(), rank}; }
};

// The output of a forward: zeros where rows may stay unwritten (beyond seqused_q).
Tensor new_out(const Tensor& q, const Tensor& v, bool varlen, bool rows_may_stay_unwritten) {
  check_rank(q, "q", varlen);
  check_rank(v, "v", varlen);
  const OutShape out_shape(q, v.size(-1));
  at::TensorOptions out_options = q.options().dtype(out_dtype(q));
  return rows_may_stay_unwritten ? at::zeros(out_shape, out_options)
                                 : at::empty(out_shape, out_options);
}

std::tuple<Tensor, Tensor> fwd(const Tensor& q, const Tensor& k, const Tensor& v,
                               const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k,
                               int64_t max_seqlen_q, int64_t max_seqlen_k,
                               std::optional<double> softmax_scale, bool causal,
                               int64_t window_left, int64_t window_right, double softcap,
                               bool deterministic, const OptTensor& sinks,
                               const OptTensor& seqused_q, const OptTensor& seqused_k,
                               const OptTensor& q_descale, const OptTensor& k_descale,
                               const OptTensor& v_descale, int64_t descale_block_q,
                               int64_t descale_block_kv, int64_t sm_margin,
                               const Vectors& vectors, HFA_BLOCK_SPARSE_PARAMETERS,
                               const Scalars& scalars) {
  const BlockSparseArgs sparse{HFA_BLOCK_SPARSE_ARGUMENTS};
  AttentionArgs a{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                  causal, window_left, window_right, softcap, deterministic, sinks,
                  seqused_q, seqused_k, sm_margin, vectors, sparse, scalars};
  Fp8Args fp8{q_descale, k_descale, v_descale, descale_block_q, descale_block_kv};
  bool varlen = is_varlen(cu_seqlens_q, cu_seqlens_k);
  Tensor out = new_out(q, v, varlen, seqused_q.has_value());
  Tensor lse = empty_lse(q, varlen, seqused_q.has_value());
  forward(q, k, v, out, &lse, a, fp8);
  return {out, lse};
}

Tensor fwd_into(const Tensor& q, const Tensor& k, const Tensor& v,
                const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k,
                int64_t max_seqlen_q, int64_t max_seqlen_k, std::optional<double> softmax_scale,
                bool causal, int64_t window_left, int64_t window_right, double softcap,
                const OptTensor& sinks, const OptTensor& seqused_q, const OptTensor& seqused_k,
                const OptTensor& q_descale, const OptTensor& k_descale,
                const OptTensor& v_descale, int64_t descale_block_q, int64_t descale_block_kv,
                int64_t sm_margin, const Vectors& vectors, HFA_BLOCK_SPARSE_PARAMETERS,
                const Scalars& scalars, const Tensor& out) {
  const BlockSparseArgs sparse{HFA_BLOCK_SPARSE_ARGUMENTS};
  AttentionArgs a{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                  causal, window_left, window_right, softcap, false, sinks,
                  seqused_q, seqused_k, sm_margin, vectors, sparse, scalars};
  Fp8Args fp8{q_descale, k_descale, v_descale, descale_block_q, descale_block_kv};
  bool varlen = is_varlen(cu_seqlens_q, cu_seqlens_k);
  check_rank(q, "q", varlen);
  TORCH_CHECK_VALUE(out.device() == q.device(), "out: on ", out.device(), ", q on ", q.device());
  Tensor lse = empty_lse(q, varlen, seqused_q.has_value());
  forward(q, k, v, out, &lse, a, fp8);
  return lse;
}

// --- hfa::bwd ----------------------------------------------------------------------------------

std::tuple<Tensor, Tensor, Tensor, Tensor> bwd(
    const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
    const Tensor& out_in, const Tensor& lse_in, const OptTensor& cu_seqlens_q,
    const OptTensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    std::optional<double> softmax_scale, bool causal, int64_t window_left, int64_t window_right,
    double softcap, bool deterministic, const OptTensor& sinks, const OptTensor& seqused_q,
    const OptTensor& seqused_k, int64_t sm_margin, const Vectors& vectors,
    HFA_BLOCK_SPARSE_PARAMETERS, const Scalars& scalars) {
  const BlockSparseArgs sparse{HFA_BLOCK_SPARSE_ARGUMENTS};
  AttentionArgs a{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                  causal, window_left, window_right, softcap, deterministic, sinks,
                  seqused_q, seqused_k, sm_margin, vectors, sparse, scalars};
  Tensor dout = usable_strides(dout_in), q = usable_strides(q_in);
  Tensor k = usable_strides(k_in), v = usable_strides(v_in), out = usable_strides(out_in);
  Tensor lse = usable_strides(lse_in);
  OnDevice on_device(q);
  Tensor dq = at::empty(q.sizes(), q.options());
  Tensor dk = at::empty(k.sizes(), k.options());
  Tensor dv = at::empty(v.sizes(), v.options());
  // A custom op cannot return None: without sinks, dsinks is an empty tensor.
  std::vector<int64_t> dsinks_shape = sinks ? sinks->sizes().vec() : std::vector<int64_t>{0};
  Tensor dsinks = at::empty(dsinks_shape, q.options().dtype(at::kFloat));
  AttentionViews views(a);
  hfa_options o = views.options(a, q);
  const VectorViews table_vectors(a.vectors, HFA_OPTIONS_ATTENTION, o);
  std::optional<BlockSparseViews> block_sparse;  // as the forward's: views only where given
  if (a.sparse.any()) block_sparse.emplace(a.sparse, o);
  set_scalars(a.scalars, HFA_OPTIONS_ATTENTION, o);
  hfa_tensor dsinks_view;
  if (sinks) {
    dsinks_view = view(dsinks, "dsinks");
    o.dsinks = &dsinks_view;
  }
  const hfa_tensor dot = view(dout, "dout"), qt = view(q, "q"), kt = view(k, "k"),
                   vt = view(v, "v"), ot = view(out, "out"), lt = view(lse, "lse"),
                   dqt = view(dq, "dq"), dkt = view(dk, "dk"), dvt = view(dv, "dv");
  prepare_and_run(q, [&](hfa_call* call, std::size_t* bytes) {
    return hfa_prepare_backward(&dot, &qt, &kt, &vt, &ot, &lt, &dqt, &dkt, &dvt, &o, call, bytes);
  });
  return {dq, dk, dv, dsinks};
}

// --- autograd of hfa::fwd ----------------------------------------------------------------------

using FwdSignature = decltype(fwd);
using BwdSignature = decltype(bwd);

template <class Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

const c10::TypedOperatorHandle<FwdSignature>& fwd_op() {
  static const auto handle = op<FwdSignature>("hfa::fwd");
  return handle;
}

// The options of a call, saved for its backward (optional tensors as IValues: None stays None).
constexpr const char* kSavedOptions[] = {
    "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "softmax_scale", "causal",
    "window_left", "window_right", "softcap", "deterministic", "sinks", "seqused_q", "seqused_k",
    "sm_margin", "vectors", "kv_num_blocks", "kv_indices", "full_kv_num_blocks",
    "full_kv_indices", "kv_mask_bits", "scalars"};

struct Attention : torch::autograd::Function<Attention> {
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
      const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k, int64_t max_seqlen_q,
      int64_t max_seqlen_k, std::optional<double> softmax_scale, bool causal,
      int64_t window_left, int64_t window_right, double softcap, bool deterministic,
      const OptTensor& sinks, const OptTensor& seqused_q, const OptTensor& seqused_k,
      const OptTensor& q_descale, const OptTensor& k_descale, const OptTensor& v_descale,
      int64_t descale_block_q, int64_t descale_block_kv, int64_t sm_margin,
      const Vectors& vectors, const BlockSparseArgs& sparse, const Scalars& scalars) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, lse] = fwd_op().call(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
        window_left, window_right, softcap, deterministic, sinks, seqused_q, seqused_k,
        q_descale, k_descale, v_descale, descale_block_q, descale_block_kv, sm_margin, vectors,
        sparse.kv_num_blocks, sparse.kv_indices, sparse.full_kv_num_blocks,
        sparse.full_kv_indices, sparse.kv_mask_bits, scalars);
    // No gradient flows through the LSE (libhfa's backward has no dLSE input, and
    // FlashAttention-3 drops it silently); marked, lse.requires_grad says so.
    ctx->mark_non_differentiable({lse});
    ctx->save_for_backward({q, k, v, out, lse});
    c10::IValue values[] = {cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            softmax_scale, causal, window_left, window_right, softcap,
                            deterministic, sinks, seqused_q, seqused_k, sm_margin,
                            vectors, sparse.kv_num_blocks, sparse.kv_indices,
                            sparse.full_kv_num_blocks, sparse.full_kv_indices,
                            sparse.kv_mask_bits, scalars};
    static_assert(sizeof(values) / sizeof(values[0]) == std::size(kSavedOptions));
    for (std::size_t i = 0; i < std::size(kSavedOptions); ++i)
      ctx->saved_data[kSavedOptions[i]] = values[i];
    return {out, lse};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    auto& d = ctx->saved_data;
    // Only lse was used downstream: the gradient through out is zero.
    Tensor dout = grads[0].defined() ? grads[0] : at::zeros_like(out);
    OptTensor sinks = d["sinks"].toOptional<Tensor>();
    const auto saved_scalars = d["scalars"].toOptional<std::vector<double>>();
    const Scalars scalars =
        saved_scalars ? Scalars(*saved_scalars) : kNoScalars;  // a view of the saved list
    static auto bwd_op = op<BwdSignature>("hfa::bwd");
    auto [dq, dk, dv, dsinks] = bwd_op.call(
        dout, q, k, v, out, lse, d["cu_seqlens_q"].toOptional<Tensor>(),
        d["cu_seqlens_k"].toOptional<Tensor>(), d["max_seqlen_q"].toInt(),
        d["max_seqlen_k"].toInt(), d["softmax_scale"].toOptional<double>(),
        d["causal"].toBool(), d["window_left"].toInt(), d["window_right"].toInt(),
        d["softcap"].toDouble(), d["deterministic"].toBool(), sinks,
        d["seqused_q"].toOptional<Tensor>(), d["seqused_k"].toOptional<Tensor>(),
        d["sm_margin"].toInt(), d["vectors"].toOptional<c10::List<std::optional<Tensor>>>(),
        d["kv_num_blocks"].toOptional<Tensor>(), d["kv_indices"].toOptional<Tensor>(),
        d["full_kv_num_blocks"].toOptional<Tensor>(), d["full_kv_indices"].toOptional<Tensor>(),
        d["kv_mask_bits"].toOptional<Tensor>(), scalars);
    // One gradient per input of forward: q, k, v, ten options, sinks, seqused_q, seqused_k,
    // the five FP8 arguments, sm_margin, the vectors (none: no VECTOR row has a gradient), the
    // block-sparse lists (none either) and the scalars. (FP8 inputs have no backward: hfa::bwd
    // says so. So no descale is saved.)
    torch::autograd::variable_list result(25);
    result[0] = dq;
    result[1] = dk;
    result[2] = dv;
    if (sinks) result[13] = dsinks;
    return result;
  }
};

std::tuple<Tensor, Tensor> fwd_autograd(
    const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& cu_seqlens_q,
    const OptTensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    std::optional<double> softmax_scale, bool causal, int64_t window_left, int64_t window_right,
    double softcap, bool deterministic, const OptTensor& sinks, const OptTensor& seqused_q,
    const OptTensor& seqused_k, const OptTensor& q_descale, const OptTensor& k_descale,
    const OptTensor& v_descale, int64_t descale_block_q, int64_t descale_block_kv,
    int64_t sm_margin, const Vectors& vectors, HFA_BLOCK_SPARSE_PARAMETERS,
    const Scalars& scalars) {
  // Inference (no input wants a gradient): no autograd node, a plain redispatch.
  const bool wants_grad =
      at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() ||
                                     v.requires_grad() || (sinks && sinks->requires_grad()));
  if (!wants_grad) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fwd_op().call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         softmax_scale, causal, window_left, window_right, softcap,
                         deterministic, sinks, seqused_q, seqused_k, q_descale, k_descale,
                         v_descale, descale_block_q, descale_block_kv, sm_margin, vectors,
                         HFA_BLOCK_SPARSE_ARGUMENTS, scalars);
  }
  torch::autograd::variable_list result = Attention::apply(
      q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
      window_left, window_right, softcap, deterministic, sinks, seqused_q, seqused_k, q_descale,
      k_descale, v_descale, descale_block_q, descale_block_kv, sm_margin, vectors,
      BlockSparseArgs{HFA_BLOCK_SPARSE_ARGUMENTS}, scalars);
  return {result[0], result[1]};
}

// The plain ops' autograd kernels: a redispatch for inference, hfa::fwd's function otherwise
// (defined below with the ops).
Tensor attention_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                          std::optional<double> softmax_scale, bool causal, int64_t window_left,
                          int64_t window_right, double softcap, bool deterministic);
Tensor varlen_attention_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                                 int64_t max_seqlen_q, int64_t max_seqlen_k,
                                 std::optional<double> softmax_scale, bool causal,
                                 int64_t window_left, int64_t window_right, double softcap,
                                 bool deterministic);

// --- hfa::fwd_kvcache, hfa::fwd_kvcache_into ---------------------------------------------------

struct KVCacheArgs {
  int64_t cache_code, scale_code;  // the caches' and scales' hfa_dtype (python/hfa/_kvcache.py)
  const OptTensor& cache_seqlens;  // absent only with indices
  const OptTensor &block_table, &k_scale, &v_scale, &k_global_scale, &v_global_scale;
  const OptTensor &k_new, &v_new, &rotary_cos, &rotary_sin;
  bool rotary_interleaved;
  const OptTensor& cu_seqlens_q;
  int64_t max_seqlen_q;
  const OptTensor& cu_seqlens_k_new;
  const OptTensor& indices;  // sparse (top-k) attention, MLA's (hfa.h)
  std::optional<double> softmax_scale;
  bool causal;
  int64_t window_left, window_right;
  double softcap;
  int64_t num_splits, split_size, sm_margin;
  const Vectors& vectors = kNoVectors;
  const Scalars& scalars = kNoScalars;
};

// A KV-cache argument's hfa_dtype: its own, never another argument's (the library trusts the
// label to size what it reads and writes, and names an argument whose dtype does not fit).
// uint8 has none: it holds the bytes of FP8 / FP4 codes or their scales, in the byte format
// python/hfa/_kvcache.py resolved for the call (`bytes`), and nothing else.
hfa_dtype own_code(const Tensor& t, int64_t bytes, const char* name) {
  if (t.scalar_type() != at::kByte) return dtype_of(t, name);
  TORCH_CHECK_TYPE(bytes == HFA_E4M3 || bytes == HFA_UE8M0 || bytes == HFA_FP4_E2M1X2 ||
                       bytes == HFA_FP8_MLA,
                   name, ": dtype ", t.scalar_type(), " is not supported here (uint8 holds FP8 / "
                   "FP4 codes, their scales and FP8 MLA records only)");
  return static_cast<hfa_dtype>(bytes);
}

OptionalView own_view(const OptTensor& t, int64_t bytes, const char* name, Strides strides) {
  if (!given(t)) return OptionalView(t, name);
  return OptionalView(t, own_code(*t, bytes, name), name, strides);
}

void forward_kvcache(const Tensor& q_in, const Tensor& k_cache, const Tensor& v_cache,
                     const Tensor& out, const Tensor* lse, const KVCacheArgs& a) {
  Tensor q = usable_strides(q_in);
  OnDevice on_device(q);
  // New tokens are written into the caches, and so are their scales where each token has its
  // own (every format but FP8's calibrated scale per kv-head, (heads_kv)): those are taken as
  // given, the inputs with usable strides.
  const bool appends = a.k_new.has_value() || a.v_new.has_value();
  const Strides caches = appends ? Strides::as_given : Strides::usable;
  const Strides scales = appends && a.k_scale && a.k_scale->dim() > 1 ? caches : Strides::usable;
  const OptionalView seqlens(a.cache_seqlens, "cache_seqlens"), indices(a.indices, "indices");
  OptionalView table(a.block_table, "page_table"),
      k_scale = own_view(a.k_scale, a.scale_code, "k_scale", scales),
      v_scale = own_view(a.v_scale, a.scale_code, "v_scale", scales),
      k_global(a.k_global_scale, "k_global_scale"), v_global(a.v_global_scale, "v_global_scale"),
      k_new(a.k_new, "k"), v_new(a.v_new, "v"), cos_table(a.rotary_cos, "rotary_cos"),
      sin_table(a.rotary_sin, "rotary_sin"), cu_q(a.cu_seqlens_q, "cu_seqlens_q"),
      cu_k_new(a.cu_seqlens_k_new, "cu_seqlens_k_new");
  hfa_kvcache_options o = default_kvcache_options();
  o.cache_seqlens = seqlens.get();
  o.indices = indices.get();
  o.block_table = table.get();
  o.k_scale = k_scale.get();
  o.v_scale = v_scale.get();
  o.k_global_scale = k_global.get();
  o.v_global_scale = v_global.get();
  set_scale(o.has_softmax_scale, o.softmax_scale, a.softmax_scale);
  o.causal = a.causal ? 1 : 0;
  o.window_left = to_int32(a.window_left, "window_left");
  o.window_right = to_int32(a.window_right, "window_right");
  o.softcap = static_cast<float>(a.softcap);
  o.num_splits = to_int32(a.num_splits, "num_splits");
  o.stream = current_stream(q);
  o.k_new = k_new.get();
  o.v_new = v_new.get();
  o.rotary_cos = cos_table.get();
  o.rotary_sin = sin_table.get();
  o.rotary_interleaved = a.rotary_interleaved ? 1 : 0;
  o.split_size = to_int32(a.split_size, "split_size");
  o.cu_seqlens_q = cu_q.get();
  o.max_seqlen_q = to_int32(a.max_seqlen_q, "max_seqlen_q");
  o.cu_seqlens_k_new = cu_k_new.get();
  o.sm_margin = to_int32(a.sm_margin, "sm_margin");
  const VectorViews table_vectors(a.vectors, HFA_OPTIONS_KVCACHE, o);
  set_scalars(a.scalars, HFA_OPTIONS_KVCACHE, o);
  OptionalView k_view(k_cache, own_code(k_cache, a.cache_code, "k_cache"), "k_cache", caches),
      v_view(v_cache, own_code(v_cache, a.cache_code, "v_cache"), "v_cache", caches);
  const hfa_tensor qt = view(q, "q"), ot = view(out, "out");
  std::optional<hfa_tensor> lt;
  if (lse != nullptr) lt = view(*lse, "lse");
  prepare_and_run(q, [&](hfa_call* call, std::size_t* bytes) {
    return hfa_prepare_forward_kvcache(&qt, k_view.get(), v_view.get(), &ot, lt ? &*lt : nullptr,
                                       &o, call, bytes);
  });
}

#define HFA_KVCACHE_PARAMETERS                                                                  \
  const Tensor &q, const Tensor &k_cache, const Tensor &v_cache, int64_t cache_code,           \
      int64_t scale_code, const OptTensor &cache_seqlens, const OptTensor &block_table,        \
      const OptTensor &k_scale, const OptTensor &v_scale, const OptTensor &k_global_scale,      \
      const OptTensor &v_global_scale, const OptTensor &k_new, const OptTensor &v_new,         \
      const OptTensor &rotary_cos, const OptTensor &rotary_sin, bool rotary_interleaved,        \
      const OptTensor &cu_seqlens_q, int64_t max_seqlen_q, const OptTensor &cu_seqlens_k_new,  \
      std::optional<double> softmax_scale, bool causal, int64_t window_left,                   \
      int64_t window_right, double softcap, int64_t num_splits, int64_t split_size,            \
      int64_t sm_margin, const Vectors &vectors, const OptTensor &indices,                     \
      const Scalars &scalars
#define HFA_KVCACHE_ARGUMENTS                                                                   \
  KVCacheArgs {                                                                                 \
    cache_code, scale_code, cache_seqlens, block_table, k_scale, v_scale, k_global_scale,       \
        v_global_scale, k_new, v_new, rotary_cos, rotary_sin, rotary_interleaved,               \
        cu_seqlens_q, max_seqlen_q, cu_seqlens_k_new, indices, softmax_scale, causal,           \
        window_left, window_right, softcap, num_splits, split_size, sm_margin, vectors,         \
        scalars                                                                                 \
  }

Tensor kvcache_lse(const Tensor& q, bool varlen) {
  return empty_lse(q, varlen, /*rows_may_stay_unwritten=*/false);
}

std::tuple<Tensor, Tensor> fwd_kvcache(HFA_KVCACHE_PARAMETERS) {
  bool varlen = cu_seqlens_q.has_value();
  check_rank(q, "q", varlen);
  TORCH_CHECK_VALUE(v_cache.dim() == 4, "v_cache: expected rank 4, got shape ", v_cache.sizes());
  const OutShape out_shape(q, v_cache.size(-1) * (cache_code == HFA_FP4_E2M1X2 ? 2 : 1));
  Tensor out = at::empty(out_shape, q.options());
  Tensor lse = kvcache_lse(q, varlen);
  forward_kvcache(q, k_cache, v_cache, out, &lse, HFA_KVCACHE_ARGUMENTS);
  return {out, lse};
}

Tensor fwd_kvcache_into(HFA_KVCACHE_PARAMETERS, const Tensor& out) {
  bool varlen = cu_seqlens_q.has_value();
  check_rank(q, "q", varlen);
  TORCH_CHECK_VALUE(out.device() == q.device(), "out: on ", out.device(), ", q on ", q.device());
  Tensor lse = kvcache_lse(q, varlen);
  forward_kvcache(q, k_cache, v_cache, out, &lse, HFA_KVCACHE_ARGUMENTS);
  return lse;
}

#undef HFA_KVCACHE_ARGUMENTS
#undef HFA_KVCACHE_PARAMETERS

// --- hfa::attention, hfa::varlen_attention, hfa::kvcache_attention: the plain calls ------------
//
// Why beside hfa::fwd and hfa::fwd_kvcache: from Python every argument of an op costs ~0.4 us to
// parse, and an LSE the caller did not ask for costs an allocation and a Python object
// (bench/overhead_parts.py on the H200: a no-op op with hfa::fwd's 21 arguments 11.5 us, with 3
// arguments 3.8 us; two allocations 5 us). These take what a plain call gives (no sinks, seqused,
// FP8 descales, out=, sm_margin, appended tokens or quantized caches: the Python front end sends
// those to the full ops) and return out alone. Inference writes no LSE; when an input wants a gradient,
// hfa::attention and hfa::varlen_attention run hfa::fwd's autograd function, which keeps it.

const OptTensor kNone;
const Fp8Args kNoFp8{kNone, kNone, kNone, 0, 0};

Tensor plain_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                       const OptTensor& cu_seqlens_q, const OptTensor& cu_seqlens_k,
                       int64_t max_seqlen_q, int64_t max_seqlen_k,
                       std::optional<double> softmax_scale, bool causal, int64_t window_left,
                       int64_t window_right, double softcap, bool deterministic) {
  AttentionArgs a{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                  causal, window_left, window_right, softcap, deterministic, kNone, kNone,
                  kNone, /*sm_margin=*/0};
  Tensor out = new_out(q, v, is_varlen(cu_seqlens_q, cu_seqlens_k), false);
  forward(q, k, v, out, nullptr, a, kNoFp8);
  return out;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 std::optional<double> softmax_scale, bool causal, int64_t window_left,
                 int64_t window_right, double softcap, bool deterministic) {
  return plain_attention(q, k, v, kNone, kNone, 0, 0, softmax_scale, causal, window_left,
                         window_right, softcap, deterministic);
}

Tensor varlen_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                        int64_t max_seqlen_q, int64_t max_seqlen_k,
                        std::optional<double> softmax_scale, bool causal, int64_t window_left,
                        int64_t window_right, double softcap, bool deterministic) {
  return plain_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         softmax_scale, causal, window_left, window_right, softcap,
                         deterministic);
}

// A 16-bit cache of q's dtype, read in place (nothing appended).
Tensor kvcache_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const Tensor& cache_seqlens, const OptTensor& block_table,
                         std::optional<double> softmax_scale, bool causal, int64_t window_left,
                         int64_t window_right, double softcap, int64_t num_splits) {
  check_rank(q, "q", false);
  TORCH_CHECK_VALUE(v_cache.dim() == 4, "v_cache: expected rank 4, got shape ", v_cache.sizes());
  for (const Tensor* cache : {&k_cache, &v_cache}) {
    const char* name = cache == &k_cache ? "k_cache" : "v_cache";
    TORCH_CHECK_TYPE(cache->scalar_type() == q.scalar_type(), name,
                     ": hfa::kvcache_attention reads a cache of q's dtype ", q.scalar_type(),
                     ", got ", cache->scalar_type(), " (quantized caches: hfa::fwd_kvcache)");
  }
  const OutShape out_shape(q, v_cache.size(-1));
  Tensor out = at::empty(out_shape, q.options());
  const OptTensor seqlens = cache_seqlens;
  const KVCacheArgs a{dtype_of(q, "q"), HFA_F32, seqlens, block_table, kNone, kNone,
                      kNone, kNone, kNone, kNone, kNone, kNone, false, kNone, 0, kNone, kNone,
                      softmax_scale, causal, window_left, window_right, softcap, num_splits,
                      /*split_size=*/0, /*sm_margin=*/0};
  forward_kvcache(q, k_cache, v_cache, out, nullptr, a);
  return out;
}

bool wants_grad(const Tensor& q, const Tensor& k, const Tensor& v) {
  return at::GradMode::is_enabled() &&
         (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

Tensor attention_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                          std::optional<double> softmax_scale, bool causal, int64_t window_left,
                          int64_t window_right, double softcap, bool deterministic) {
  if (!wants_grad(q, k, v)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto handle = op<decltype(attention)>("hfa::attention");
    return handle.call(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                       deterministic);
  }
  return Attention::apply(q, k, v, kNone, kNone, 0, 0, softmax_scale, causal, window_left,
                          window_right, softcap, deterministic, kNone, kNone, kNone, kNone,
                          kNone, kNone, 0, 0, /*sm_margin=*/0, kNoVectors, kNoBlockSparse,
                          kNoScalars)[0];
}

Tensor varlen_attention_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                                 int64_t max_seqlen_q, int64_t max_seqlen_k,
                                 std::optional<double> softmax_scale, bool causal,
                                 int64_t window_left, int64_t window_right, double softcap,
                                 bool deterministic) {
  if (!wants_grad(q, k, v)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto handle = op<decltype(varlen_attention)>("hfa::varlen_attention");
    return handle.call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                       softmax_scale, causal, window_left, window_right, softcap,
                       deterministic);
  }
  const OptTensor cu_q = cu_seqlens_q, cu_k = cu_seqlens_k;
  return Attention::apply(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                          causal, window_left, window_right, softcap, deterministic, kNone,
                          kNone, kNone, kNone, kNone, kNone, 0, 0, /*sm_margin=*/0,
                          kNoVectors, kNoBlockSparse, kNoScalars)[0];
}

}  // namespace

// Schemas: the same as python/hfa/_torch_ctypes.py's custom ops (fwd, bwd), plus the out=
// and KV-cache forms. Optional arguments after the options keep their defaults, so that older
// callers of hfa::fwd still bind. After sm_margin every full op takes, in this order, the VECTOR
// rows' list, the TENSOR rows added since by their fields' names (the attention ops' block-sparse
// rows, the KV-cache ops' indices) and the scalar rows' pairs. An option argument is named by its
// hfa/options.def row's field and typed by the row's kind (FLAG bool, INT32 int, REAL float,
// SCALE float?, TENSOR Tensor?; the VECTOR rows are the entries of `vectors`, and every scalar
// row may also be set through `scalars`, which a row no argument names takes):
// python/tests/test_torch_schema.py checks every op against the library's description
// (hfa_describe_options), and that the full ops take every row their calls read.
#define HFA_ATTENTION_OPTIONS                                                                  \
  "Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, "      \
  "float? softmax_scale, bool causal, int window_left, int window_right, float softcap, "
#define HFA_ATTENTION_VECTORS "Tensor? sinks=None, Tensor? seqused_q=None, Tensor? seqused_k=None"
// The forward's FP8 arguments (hfa::fwd, hfa::fwd_into), after the vectors.
#define HFA_FP8_ARGUMENTS                                                                      \
  ", Tensor? q_descale=None, Tensor? k_descale=None, Tensor? v_descale=None, "                 \
  "int descale_block_q=0, int descale_block_kv=0"
// SMs left free for other kernels (hfa_options.sm_margin), and the VECTOR rows (VectorViews).
#define HFA_SM_MARGIN ", int sm_margin=0, Tensor?[]? vectors=None"
// The block-sparse rows' tensors (BlockSparseArgs), after the vectors in hfa::fwd, hfa::fwd_into
// and hfa::bwd.
#define HFA_BLOCK_SPARSE                                                                       \
  ", Tensor? kv_num_blocks=None, Tensor? kv_indices=None, Tensor? full_kv_num_blocks=None, "   \
  "Tensor? full_kv_indices=None, Tensor? kv_mask_bits=None"
// The scalar rows' pairs (set_scalars), last in every full op.
#define HFA_SCALARS ", float[]? scalars=None"
#define HFA_KVCACHE_SCHEMA                                                                     \
  "Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, int cache_code, int scale_code, "         \
  "Tensor? cache_seqlens, Tensor? block_table, Tensor? k_scale, Tensor? v_scale, "               \
  "Tensor? k_global_scale, Tensor? v_global_scale, Tensor? k_new, Tensor? v_new, "              \
  "Tensor? rotary_cos, Tensor? rotary_sin, bool rotary_interleaved, Tensor? cu_seqlens_q, "     \
  "int max_seqlen_q, Tensor? cu_seqlens_k_new, float? softmax_scale, bool causal, "          \
  "int window_left, int window_right, float softcap, int num_splits, int split_size"          \
  HFA_SM_MARGIN ", Tensor? indices=None" HFA_SCALARS

TORCH_LIBRARY(hfa, m) {
  m.def("fwd(Tensor q, Tensor k, Tensor v, " HFA_ATTENTION_OPTIONS
        "bool deterministic, " HFA_ATTENTION_VECTORS HFA_FP8_ARGUMENTS HFA_SM_MARGIN
        HFA_BLOCK_SPARSE HFA_SCALARS ") -> (Tensor, Tensor)");
  m.def("fwd_into(Tensor q, Tensor k, Tensor v, " HFA_ATTENTION_OPTIONS HFA_ATTENTION_VECTORS
        HFA_FP8_ARGUMENTS HFA_SM_MARGIN HFA_BLOCK_SPARSE HFA_SCALARS
        ", *, Tensor(o!) out) -> Tensor");
  m.def("bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        HFA_ATTENTION_OPTIONS "bool deterministic, " HFA_ATTENTION_VECTORS HFA_SM_MARGIN
        HFA_BLOCK_SPARSE HFA_SCALARS ") -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("fwd_kvcache(" HFA_KVCACHE_SCHEMA ") -> (Tensor, Tensor)");
  m.def("fwd_kvcache_into(" HFA_KVCACHE_SCHEMA ", *, Tensor(o!) out) -> Tensor");
  // The plain calls (the section above their kernels says why).
  m.def("attention(Tensor q, Tensor k, Tensor v, float? softmax_scale, bool causal, "
        "int window_left, int window_right, float softcap, bool deterministic) -> Tensor");
  m.def("varlen_attention(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, "
        "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float? softmax_scale, "
        "bool causal, int window_left, int window_right, float softcap, bool deterministic) "
        "-> Tensor");
  m.def("kvcache_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cache_seqlens, "
        "Tensor? block_table, float? softmax_scale, bool causal, int window_left, "
        "int window_right, float softcap, int num_splits) -> Tensor");
}

namespace {
// The same kernels serve both keys: libhfa picks its backend from the tensors' device.
void register_kernels(torch::Library& m) {
  m.impl("fwd", &fwd);
  m.impl("fwd_into", &fwd_into);
  m.impl("bwd", &bwd);
  m.impl("fwd_kvcache", &fwd_kvcache);
  m.impl("fwd_kvcache_into", &fwd_kvcache_into);
  m.impl("attention", &attention);
  m.impl("varlen_attention", &varlen_attention);
  m.impl("kvcache_attention", &kvcache_attention);
}
}  // namespace

TORCH_LIBRARY_IMPL(hfa, CPU, m) { register_kernels(m); }
TORCH_LIBRARY_IMPL(hfa, CUDA, m) { register_kernels(m); }

TORCH_LIBRARY_IMPL(hfa, Autograd, m) {
  m.impl("fwd", &fwd_autograd);
  m.impl("attention", &attention_autograd);
  m.impl("varlen_attention", &varlen_attention_autograd);
}

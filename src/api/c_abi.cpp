// The C ABI: thin glue over the C++ API. Each call clears, then (on failure) sets, this
// thread's last-error message; nothing unwinds through here.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "api/dispatch.hpp"
#include "api/options.hpp"
#include "api/prepared_call.hpp"
#include "api/validate.hpp"
#include "hfa/hfa.h"
#include "hfa/hfa.hpp"

namespace {

thread_local std::string last_error;

// Records the outcome of a call for hfa_last_error and converts it to the C status.
hfa_status finish(const hfa::Status& status) {
  try {
    last_error = status.message();
  } catch (...) {
    last_error.clear();  // out of memory for the message: the status still tells the caller
  }
  return static_cast<hfa_status>(status.code());
}

hfa::Status null_argument(const char* name) {
  return {hfa::Code::invalid_argument, std::string(name) + ": is null"};
}

// The caller's options struct, checked before any other field is read (hfa.h): its size. Null
// options mean the defaults, as in the C++ API, but for hfa_forward_kvcache's, which carry a
// required tensor (no defaults to fall back on).
template <typename C>
hfa::Status check_options(const C* options, bool required = false) {
  if (options == nullptr) return required ? null_argument("options") : hfa::Status::ok();
  return hfa::detail::check_struct_size(options->struct_size, sizeof(C));
}

// Checked options in C++, made where the caller declares them (from_c's aggregate: no default
// struct set first and overwritten).
template <typename C, typename Cpp = decltype(hfa::detail::from_c(std::declval<C>()))>
Cpp cpp_options(const C* options) {
  return options != nullptr ? hfa::detail::from_c(*options) : Cpp{};
}

// hfa_init_*options: the library's defaults, cut to (or zero-padded to) the caller's size.
template <typename C>
void init_struct(C* options, size_t struct_size, const C& defaults) {
  if (options == nullptr || struct_size < sizeof defaults.struct_size) return;
  auto* bytes = reinterpret_cast<unsigned char*>(options);
  std::memset(bytes, 0, struct_size);
  std::memcpy(bytes, &defaults, std::min(struct_size, sizeof defaults));
  std::memcpy(bytes, &struct_size, sizeof struct_size);  // the caller's: the calls check it
}

hfa::QuantizeOptions quantize_options_from(const hfa_quantize_options& options) {
  return {static_cast<hfa::KVFormat>(options.format), options.global_scale, options.stream};
}

hfa::QuantizeFp8Options quantize_fp8_options_from(const hfa_quantize_fp8_options& options) {
  return {static_cast<hfa::Fp8Granularity>(options.granularity), options.block_rows,
          options.cu_seqlens, options.signs, options.stream};
}

// The first null among required tensors, by name, or null when all are present.
const char* first_null(std::initializer_list<std::pair<const char*, const hfa_tensor*>> args) {
  for (const auto& [name, tensor] : args)
    if (tensor == nullptr) return name;
  return nullptr;
}

// A prepare rejected here, before the C++ API's, leaves no call in *call either.
hfa::Status no_call(hfa_call* call, hfa::Status status) {
  if (call != nullptr) hfa::detail::clear(call);
  return status;
}

}  // namespace

extern "C" {

void hfa_init_options(hfa_options* options, size_t struct_size) {
  init_struct(options, struct_size, hfa::detail::default_c_options());
}

hfa_status hfa_forward(const hfa_tensor* q, const hfa_tensor* k, const hfa_tensor* v,
                       const hfa_tensor* out, const hfa_tensor* lse, const hfa_options* options) {
  return finish(hfa::detail::guarded("hfa_forward", [&]() -> hfa::Status {
    if (const char* name = first_null({{"q", q}, {"k", k}, {"v", v}, {"out", out}}))
      return null_argument(name);
    HFA_RETURN_IF_ERROR(check_options(options));
    const hfa::Options o = cpp_options(options);
    return hfa::forward(*q, *k, *v, *out, lse, o);
  }));
}

hfa_status hfa_forward_workspace_size(const hfa_tensor* q, const hfa_tensor* k,
                                      const hfa_tensor* v, const hfa_options* options,
                                      size_t* bytes) {
  return finish(hfa::detail::guarded("hfa_forward_workspace_size", [&]() -> hfa::Status {
    if (const char* name = first_null({{"q", q}, {"k", k}, {"v", v}})) return null_argument(name);
    HFA_RETURN_IF_ERROR(check_options(options));
    const hfa::Options o = cpp_options(options);
    return hfa::forward_workspace_size(*q, *k, *v, o, bytes);
  }));
}

hfa_status hfa_backward(const hfa_tensor* dout, const hfa_tensor* q, const hfa_tensor* k,
                        const hfa_tensor* v, const hfa_tensor* out, const hfa_tensor* lse,
                        const hfa_tensor* dq, const hfa_tensor* dk, const hfa_tensor* dv,
                        const hfa_options* options) {
  return finish(hfa::detail::guarded("hfa_backward", [&]() -> hfa::Status {
    if (const char* name = first_null({{"dout", dout}, {"q", q}, {"k", k}, {"v", v},
                                       {"out", out}, {"lse", lse}, {"dq", dq}, {"dk", dk},
                                       {"dv", dv}}))
      return null_argument(name);
    HFA_RETURN_IF_ERROR(check_options(options));
    const hfa::Options o = cpp_options(options);
    return hfa::backward(*dout, *q, *k, *v, *out, *lse, *dq, *dk, *dv, o);
  }));
}

hfa_status hfa_backward_workspace_size(const hfa_tensor* q, const hfa_tensor* k,
                                       const hfa_tensor* v, const hfa_options* options,
                                       size_t* bytes) {
  return finish(hfa::detail::guarded("hfa_backward_workspace_size", [&]() -> hfa::Status {
    if (const char* name = first_null({{"q", q}, {"k", k}, {"v", v}})) return null_argument(name);
    HFA_RETURN_IF_ERROR(check_options(options));
    const hfa::Options o = cpp_options(options);
    return hfa::backward_workspace_size(*q, *k, *v, o, bytes);
  }));
}

void hfa_init_kvcache_options(hfa_kvcache_options* options, size_t struct_size) {
  init_struct(options, struct_size, hfa::detail::default_c_kvcache_options());
}

const hfa_option_info* hfa_describe_options(hfa_options_struct which, int32_t* count,
                                            size_t* size) {
  const std::span<const hfa_option_info> rows = hfa::detail::describe_options(which);
  if (count != nullptr) *count = static_cast<int32_t>(rows.size());
  if (size != nullptr) {
    *size = which == HFA_OPTIONS_ATTENTION ? sizeof(hfa_options)
            : which == HFA_OPTIONS_KVCACHE ? sizeof(hfa_kvcache_options)
                                           : 0;
  }
  return rows.empty() ? nullptr : rows.data();
}

hfa_status hfa_forward_kvcache(const hfa_tensor* q, const hfa_tensor* k_cache,
                               const hfa_tensor* v_cache, const hfa_tensor* out,
                               const hfa_tensor* lse, const hfa_kvcache_options* options) {
  return finish(hfa::detail::guarded("hfa_forward_kvcache", [&]() -> hfa::Status {
    if (const char* name =
            first_null({{"q", q}, {"k_cache", k_cache}, {"v_cache", v_cache}, {"out", out}}))
      return null_argument(name);
    HFA_RETURN_IF_ERROR(check_options(options, /*required=*/true));
    const hfa::KVCacheOptions o = cpp_options(options);
    return hfa::forward_kvcache(*q, *k_cache, *v_cache, *out, lse, o);
  }));
}

hfa_status hfa_forward_kvcache_workspace_size(const hfa_tensor* q, const hfa_tensor* k_cache,
                                              const hfa_tensor* v_cache,
                                              const hfa_kvcache_options* options, size_t* bytes) {
  return finish(hfa::detail::guarded("hfa_forward_kvcache_workspace_size", [&]() -> hfa::Status {
    if (const char* name = first_null({{"q", q}, {"k_cache", k_cache}, {"v_cache", v_cache}}))
      return null_argument(name);
    HFA_RETURN_IF_ERROR(check_options(options, /*required=*/true));
    const hfa::KVCacheOptions o = cpp_options(options);
    return hfa::forward_kvcache_workspace_size(*q, *k_cache, *v_cache, o, bytes);
  }));
}

hfa_status hfa_prepare_forward(const hfa_tensor* q, const hfa_tensor* k, const hfa_tensor* v,
                               const hfa_tensor* out, const hfa_tensor* lse,
                               const hfa_options* options, hfa_call* call,
                               size_t* workspace_bytes) {
  return finish(hfa::detail::guarded("hfa_prepare_forward", [&]() -> hfa::Status {
    if (const char* name = first_null({{"q", q}, {"k", k}, {"v", v}, {"out", out}}))
      return no_call(call, null_argument(name));
    if (hfa::Status status = check_options(options); !status) return no_call(call, status);
    const hfa::Options o = cpp_options(options);
    return hfa::prepare_forward(*q, *k, *v, *out, lse, o, call, workspace_bytes);
  }));
}

hfa_status hfa_prepare_backward(const hfa_tensor* dout, const hfa_tensor* q, const hfa_tensor* k,
                                const hfa_tensor* v, const hfa_tensor* out, const hfa_tensor* lse,
                                const hfa_tensor* dq, const hfa_tensor* dk, const hfa_tensor* dv,
                                const hfa_options* options, hfa_call* call,
                                size_t* workspace_bytes) {
  return finish(hfa::detail::guarded("hfa_prepare_backward", [&]() -> hfa::Status {
    if (const char* name = first_null({{"dout", dout}, {"q", q}, {"k", k}, {"v", v},
                                       {"out", out}, {"lse", lse}, {"dq", dq}, {"dk", dk},
                                       {"dv", dv}}))
      return no_call(call, null_argument(name));
    if (hfa::Status status = check_options(options); !status) return no_call(call, status);
    const hfa::Options o = cpp_options(options);
    return hfa::prepare_backward(*dout, *q, *k, *v, *out, *lse, *dq, *dk, *dv, o, call,
                                 workspace_bytes);
  }));
}

hfa_status hfa_prepare_forward_kvcache(const hfa_tensor* q, const hfa_tensor* k_cache,
                                       const hfa_tensor* v_cache, const hfa_tensor* out,
                                       const hfa_tensor* lse, const hfa_kvcache_options* options,
                                       hfa_call* call, size_t* workspace_bytes) {
  return finish(hfa::detail::guarded("hfa_prepare_forward_kvcache", [&]() -> hfa::Status {
    if (const char* name =
            first_null({{"q", q}, {"k_cache", k_cache}, {"v_cache", v_cache}, {"out", out}}))
      return no_call(call, null_argument(name));
    if (hfa::Status status = check_options(options, /*required=*/true); !status)
      return no_call(call, status);
    const hfa::KVCacheOptions o = cpp_options(options);
    return hfa::prepare_forward_kvcache(*q, *k_cache, *v_cache, *out, lse, o, call,
                                        workspace_bytes);
  }));
}

hfa_status hfa_run(const hfa_call* call, void* workspace, size_t workspace_bytes) {
  return finish(hfa::detail::guarded("hfa_run", [&]() -> hfa::Status {
    if (call == nullptr) return null_argument("call");
    return hfa::run(*call, workspace, workspace_bytes);
  }));
}

// Not in hfa.h: the tests' count of validations on the calling thread (validate.hpp), for the
// Python tests through ctypes.
HFA_API uint64_t hfa_detail_validations(void) {
  return hfa::detail::validations_on_this_thread();
}

hfa_status hfa_quantize_kv(const hfa_tensor* x, const hfa_tensor* codes, const hfa_tensor* scale,
                           const hfa_quantize_options* options) {
  return finish(hfa::detail::guarded("hfa_quantize_kv", [&]() -> hfa::Status {
    if (const char* name = first_null({{"x", x}, {"codes", codes}})) return null_argument(name);
    if (options == nullptr) return null_argument("options");  // it names the format
    // A null scale is fp8_mla's (its scales are in its records); the API says which needs one.
    const hfa::QuantizeOptions o = quantize_options_from(*options);
    return scale ? hfa::quantize_kv(*x, *codes, *scale, o) : hfa::quantize_kv(*x, *codes, o);
  }));
}

hfa_status hfa_dequantize_kv(const hfa_tensor* codes, const hfa_tensor* scale,
                             const hfa_tensor* out, const hfa_quantize_options* options) {
  return finish(hfa::detail::guarded("hfa_dequantize_kv", [&]() -> hfa::Status {
    if (const char* name = first_null({{"codes", codes}, {"out", out}})) return null_argument(name);
    if (options == nullptr) return null_argument("options");
    const hfa::QuantizeOptions o = quantize_options_from(*options);
    return scale ? hfa::dequantize_kv(*codes, *scale, *out, o)
                 : hfa::dequantize_kv(*codes, *out, o);
  }));
}

hfa_status hfa_quantize_fp8(const hfa_tensor* x, const hfa_tensor* codes, const hfa_tensor* scale,
                            const hfa_quantize_fp8_options* options) {
  return finish(hfa::detail::guarded("hfa_quantize_fp8", [&]() -> hfa::Status {
    if (const char* name = first_null({{"x", x}, {"codes", codes}, {"scale", scale}}))
      return null_argument(name);
    if (options == nullptr) return null_argument("options");  // it names the granularity
    return hfa::quantize_fp8(*x, *codes, *scale, quantize_fp8_options_from(*options));
  }));
}

hfa_status hfa_hadamard_signs(uint64_t seed, const hfa_tensor* signs, void* stream) {
  return finish(hfa::detail::guarded("hfa_hadamard_signs", [&]() -> hfa::Status {
    if (signs == nullptr) return null_argument("signs");
    return hfa::hadamard_signs(seed, *signs, stream);
  }));
}

hfa_status hfa_merge_partials(const hfa_tensor* const* outs, const hfa_tensor* const* lses,
                              int32_t num_partials, const hfa_tensor* out, const hfa_tensor* lse,
                              void* stream) {
  return finish(hfa::detail::guarded("hfa_merge_partials", [&]() -> hfa::Status {
    // In argument order; then each outs[i] and lses[i] is named by the C++ API's checks.
    if (outs == nullptr) return null_argument("outs");
    if (lses == nullptr) return null_argument("lses");
    if (num_partials < 1 || num_partials > HFA_MAX_MERGE_PARTIALS)
      return hfa::detail::invalid("num_partials", "expected 1 to ", HFA_MAX_MERGE_PARTIALS,
                                  " (HFA_MAX_MERGE_PARTIALS), got ", num_partials);
    if (out == nullptr) return null_argument("out");
    const auto count = static_cast<std::size_t>(num_partials);
    return hfa::merge_partials({outs, count}, {lses, count}, *out, lse, stream);
  }));
}

const char* hfa_last_error(void) { return last_error.c_str(); }

const char* hfa_status_name(hfa_status status) {
  switch (status) {
    case HFA_SUCCESS: return "HFA_SUCCESS";
    case HFA_ERROR_INVALID_ARGUMENT: return "HFA_ERROR_INVALID_ARGUMENT";
    case HFA_ERROR_NOT_SUPPORTED: return "HFA_ERROR_NOT_SUPPORTED";
    case HFA_ERROR_CUDA: return "HFA_ERROR_CUDA";
    case HFA_ERROR_INTERNAL: return "HFA_ERROR_INTERNAL";
  }
  return "HFA_UNKNOWN_STATUS";
}

const char* hfa_version(void) { return HFA_VERSION_STRING; }

int32_t hfa_cuda_device_count(void) { return hfa::cuda_device_count(); }

}  // extern "C"

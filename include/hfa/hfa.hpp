// hfa: exact attention, softmax(Q·Kᵀ·scale)·V, for Hopper GPUs and CPUs. The C++ API.
//
// The same functions as the C ABI (hfa.h), with C++ types: tensors are the C views, options
// use std::optional, and every call returns a Status that carries its message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "hfa/hfa.h"

namespace hfa {

enum class DType : int32_t {
  f32 = HFA_F32,
  f16 = HFA_F16,
  bf16 = HFA_BF16,
  e4m3 = HFA_E4M3,
  e5m2 = HFA_E5M2,
  i32 = HFA_I32,
  fp4_e2m1x2 = HFA_FP4_E2M1X2,  // two E2M1 values per byte (KV caches)
  ue8m0 = HFA_UE8M0,            // MXFP4 block scales
  fp8_mla = HFA_FP8_MLA,        // FlashMLA's 656-byte FP8 MLA token record (KV caches)
};

enum class DeviceKind : int32_t { cpu = HFA_CPU, cuda = HFA_CUDA };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int32_t index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int32_t index = 0) { return {DeviceKind::cuda, index}; }
};

using Tensor = hfa_tensor;

// A view with the given shape; strides default to row-major contiguous.
HFA_API Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           std::initializer_list<int64_t> strides = {}, Device device = {});

HFA_API std::size_t dtype_size(DType dtype);
HFA_API const char* dtype_name(DType dtype);

enum class Code : int32_t {
  success = HFA_SUCCESS,
  invalid_argument = HFA_ERROR_INVALID_ARGUMENT,
  not_supported = HFA_ERROR_NOT_SUPPORTED,
  cuda = HFA_ERROR_CUDA,
  internal = HFA_ERROR_INTERNAL,
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const { return code_ == Code::success; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::success;
  std::string message_;
};

// The options structs' members, one a row of hfa/options.def (where each is described), by the
// row's kind:
#define HFA_CPP_MEMBER_FLAG(name, value) bool name = value;
#define HFA_CPP_MEMBER_INT32(name, value) int32_t name = value;
#define HFA_CPP_MEMBER_REAL(name, value) float name = value;
#define HFA_CPP_MEMBER_SCALE(name, value) std::optional<float> name;  // empty: the default
#define HFA_CPP_MEMBER_TENSOR(name, value) const Tensor* name = nullptr;
#define HFA_CPP_MEMBER_VECTOR HFA_CPP_MEMBER_TENSOR
#define HFA_CPP_MEMBER_HANDLE(name, value) void* name = nullptr;
#define HFA_CPP_MEMBER_BYTES(name, value) std::size_t name = value;

// hfa_options in C++ (HFA_ATTENTION_OPTION rows).
struct Options {
  // This struct's size as the caller was compiled, checked by every call that takes it, as the C
  // structs' struct_size (hfa.h): a caller built against another hfa.hpp is refused by name.
  std::size_t struct_size = sizeof(Options);
#define HFA_ATTENTION_OPTION(kind, name, value, ...) HFA_CPP_MEMBER_##kind(name, value)
#include "hfa/options.def"
};

HFA_API hfa_options to_c(const Options& options);

// See hfa_forward. lse may be null.
HFA_API Status forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor* lse, const Options& options = {});
HFA_API Status forward_workspace_size(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Options& options, std::size_t* bytes);

// See hfa_backward.
HFA_API Status backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, const Options& options = {});
HFA_API Status backward_workspace_size(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Options& options, std::size_t* bytes);

// hfa_kvcache_options in C++ (HFA_KVCACHE_OPTION rows).
struct KVCacheOptions {
  std::size_t struct_size = sizeof(KVCacheOptions);  // as Options::struct_size
#define HFA_KVCACHE_OPTION(kind, name, value, ...) HFA_CPP_MEMBER_##kind(name, value)
#include "hfa/options.def"
};

HFA_API hfa_kvcache_options to_c(const KVCacheOptions& options);

// See hfa_forward_kvcache. lse may be null.
HFA_API Status forward_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                               const Tensor& out, const Tensor* lse,
                               const KVCacheOptions& options);
// See hfa_forward_kvcache_workspace_size.
HFA_API Status forward_kvcache_workspace_size(const Tensor& q, const Tensor& k_cache,
                                              const Tensor& v_cache, const KVCacheOptions& options,
                                              std::size_t* bytes);

// A prepared call (see hfa_call): prepare_* validate and plan once, run() runs with no second
// validation. The tensors and options may be temporaries; the memory they view may not (hfa.h).
using Call = hfa_call;

// See hfa_prepare_forward, hfa_prepare_backward, hfa_prepare_forward_kvcache. workspace_bytes
// may be null.
HFA_API Status prepare_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor* lse, const Options& options,
                               Call* call, std::size_t* workspace_bytes);
HFA_API Status prepare_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& out, const Tensor& lse,
                                const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const Options& options, Call* call, std::size_t* workspace_bytes);
HFA_API Status prepare_forward_kvcache(const Tensor& q, const Tensor& k_cache,
                                       const Tensor& v_cache, const Tensor& out, const Tensor* lse,
                                       const KVCacheOptions& options, Call* call,
                                       std::size_t* workspace_bytes);
// See hfa_run.
HFA_API Status run(const Call& call, void* workspace = nullptr, std::size_t workspace_bytes = 0);

// See hfa_quantize_kv for the formats and the shapes.
enum class KVFormat : int32_t {
  fp8_per_head = HFA_KV_FP8_PER_HEAD,
  fp8_per_token = HFA_KV_FP8_PER_TOKEN,
  nvfp4 = HFA_KV_NVFP4,
  mxfp4 = HFA_KV_MXFP4,
  fp8_mla = HFA_KV_FP8_MLA,
};

struct QuantizeOptions {
  KVFormat format = KVFormat::fp8_per_token;
  const Tensor* global_scale = nullptr;  // NVFP4 only: fp32 (1)
  void* stream = nullptr;                // cudaStream_t
};

// See hfa_quantize_kv / hfa_dequantize_kv.
HFA_API Status quantize_kv(const Tensor& x, const Tensor& codes, const Tensor& scale,
                           const QuantizeOptions& options);
HFA_API Status dequantize_kv(const Tensor& codes, const Tensor& scale, const Tensor& out,
                             const QuantizeOptions& options);
// The formats without a scale tensor (fp8_mla: the scales are inside its records).
HFA_API Status quantize_kv(const Tensor& x, const Tensor& codes, const QuantizeOptions& options);
HFA_API Status dequantize_kv(const Tensor& codes, const Tensor& out,
                             const QuantizeOptions& options);

// See hfa_quantize_fp8 for the shapes and the rule of each scale.
enum class Fp8Granularity : int32_t {
  per_tensor = HFA_FP8_PER_TENSOR,
  per_head = HFA_FP8_PER_HEAD,
  per_block = HFA_FP8_PER_BLOCK,
};

struct QuantizeFp8Options {
  Fp8Granularity granularity = Fp8Granularity::per_tensor;
  int32_t block_rows = 0;               // per_block only
  const Tensor* cu_seqlens = nullptr;   // varlen: int32 (batch + 1)
  const Tensor* signs = nullptr;        // Hadamard rotation: fp32 (d) of ±1; null = none
  void* stream = nullptr;               // cudaStream_t
};

// See hfa_quantize_fp8 / hfa_hadamard_signs.
HFA_API Status quantize_fp8(const Tensor& x, const Tensor& codes, const Tensor& scale,
                            const QuantizeFp8Options& options);
HFA_API Status hadamard_signs(uint64_t seed, const Tensor& signs, void* stream = nullptr);

// See hfa_merge_partials: partial i is (*outs[i], *lses[i]), one lse per out and at most
// HFA_MAX_MERGE_PARTIALS of them; lse may be null. stream: a cudaStream_t for CUDA tensors.
HFA_API Status merge_partials(std::span<const Tensor* const> outs,
                              std::span<const Tensor* const> lses, const Tensor& out,
                              const Tensor* lse = nullptr, void* stream = nullptr);

HFA_API int32_t cuda_device_count();

}  // namespace hfa

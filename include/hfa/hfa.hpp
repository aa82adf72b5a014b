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

struct Options {
  std::optional<float> softmax_scale;  // default 1/sqrt(headdim_qk)
  bool causal = false;                 // bottom-right aligned
  int32_t window_left = -1;            // -1 = unbounded
  int32_t window_right = -1;
  float softcap = 0.0f;                // 0 = off

  // Varlen: (total_tokens, heads, headdim) tensors delimited by int32 cu_seqlens (batch + 1).
  const Tensor* cu_seqlens_q = nullptr;
  const Tensor* cu_seqlens_k = nullptr;
  int32_t max_seqlen_q = 0;
  int32_t max_seqlen_k = 0;

  bool deterministic = false;

  void* stream = nullptr;  // cudaStream_t
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;

  // See hfa_options: attention sinks (fp32, heads_q), used lengths (int32, batch) and, for the
  // backward only, the sinks' gradient (fp32, heads_q). Null = off.
  const Tensor* sinks = nullptr;
  const Tensor* seqused_q = nullptr;
  const Tensor* seqused_k = nullptr;
  const Tensor* dsinks = nullptr;

  // See hfa_options: the descales of FP8 (e4m3) inputs, fp32 of rank 1 (per tensor), 2
  // (batch, heads) or 3 (batch, num_blocks, heads) with the rows per block below. Null = 1.
  const Tensor* q_descale = nullptr;
  const Tensor* k_descale = nullptr;
  const Tensor* v_descale = nullptr;
  int32_t descale_block_q = 0;
  int32_t descale_block_kv = 0;

  // SMs left free for kernels running beside this call (NCCL's); see hfa_options.sm_margin.
  int32_t sm_margin = 0;

  // Attention split over keys; see hfa_options. accumulate (forward): merge into an f32 out
  // and its lse. softmax_d (backward): the given D = rowsum(dout ∘ out), fp32 like lse.
  bool accumulate = false;
  const Tensor* softmax_d = nullptr;
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

// See hfa_kvcache_options for every field.
struct KVCacheOptions {
  const Tensor* cache_seqlens = nullptr;  // int32 (batch); required
  const Tensor* block_table = nullptr;    // int32 (batch, max_pages); null = contiguous cache
  const Tensor* k_scale = nullptr;        // quantized caches only
  const Tensor* v_scale = nullptr;
  const Tensor* k_global_scale = nullptr;  // NVFP4 only: fp32 (1)
  const Tensor* v_global_scale = nullptr;

  std::optional<float> softmax_scale;  // default 1/sqrt(headdim_qk)
  bool causal = false;                 // bottom-right aligned within each sequence
  int32_t window_left = -1;            // -1 = unbounded
  int32_t window_right = -1;
  float softcap = 0.0f;  // 0 = off

  int32_t num_splits = 0;  // 0 = chosen by hfa
  bool validate = false;   // check block_table / cache_seqlens values on CUDA too

  void* stream = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;

  const Tensor* k_new = nullptr;  // appended in place before the attention; null = no append
  const Tensor* v_new = nullptr;
  const Tensor* rotary_cos = nullptr;  // (seqlen_ro, rotary_dim / 2); needs k_new
  const Tensor* rotary_sin = nullptr;
  bool rotary_interleaved = false;     // pairs (2j, 2j+1); false: (j, j + rotary_dim / 2)
  int32_t split_size = 0;  // keys per split-KV chunk (batch-invariant); 0 = off
  // Varlen queries: q / out (total_q, heads_q, d) delimited by int32 cu_seqlens_q (batch + 1),
  // lse (heads_q, total_q); max_seqlen_q bounds the rows of a sequence. Null / 0 = fixed length.
  const Tensor* cu_seqlens_q = nullptr;
  int32_t max_seqlen_q = 0;
  // Varlen new tokens: k_new / v_new (total_k_new, heads_kv, d) delimited by int32
  // cu_seqlens_k_new (batch + 1). Null = seqlen_new tokens per sequence.
  const Tensor* cu_seqlens_k_new = nullptr;
  // SMs left free for kernels running beside this call; see hfa_kvcache_options.sm_margin.
  int32_t sm_margin = 0;
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

// See hfa_quantize_kv for the formats and the shapes.
enum class KVFormat : int32_t {
  fp8_per_head = HFA_KV_FP8_PER_HEAD,
  fp8_per_token = HFA_KV_FP8_PER_TOKEN,
  nvfp4 = HFA_KV_NVFP4,
  mxfp4 = HFA_KV_MXFP4,
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

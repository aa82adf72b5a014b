// Multi-head Latent Attention (DeepSeek-V2/V3/V3.2) as hfa_forward_kvcache takes it: absorbed
// for decode, MLA is MQA over one latent KV head whose key is the 576-wide cache row
// [latent (512) ; rotary (64)] and whose value is the first 512 columns of that same row. hfa
// has no MLA operation of its own: MLA is a shape of the KV-cache problem (head dims 576 / 512,
// v_cache a view of k_cache's first 512 columns), one more cache format (FlashMLA's 656-byte
// FP8 record, quant/mla_fp8.hpp) and the sparse top-k option (indices). What is true of MLA
// problems in general is here, for the API's checks and the backends' support checks alike.
#pragma once

#include <string>

#include "common/errors.hpp"
#include "common/kvcache_problem.hpp"
#include "common/quantize_problem.hpp"
#include "quant/mla_fp8.hpp"

namespace hfa::detail {

inline constexpr int32_t kMlaHeadDimQK = quant::kMlaHeadDim;   // 576
inline constexpr int32_t kMlaHeadDimV = quant::kMlaLatentDim;  // 512

// The MLA shape: K's 576 columns, V's 512.
inline bool is_mla_shape(int64_t hdim_qk, int64_t hdim_v) {
  return hdim_qk == kMlaHeadDimQK && hdim_v == kMlaHeadDimV;
}

// Whether a problem uses any of the MLA forms: the shape, the FP8 record, sparse indices.
inline bool uses_mla_forms(const KVCacheProblem& p) {
  return is_mla_shape(p.hdim_qk, p.hdim_v) || p.format == CacheFormat::mla_fp8 ||
         p.indices != nullptr;
}

// The MLA forms a GPU backend has no kernel for: not_supported naming the argument that asks for
// one (the first found), ok for every other problem, the dense MLA shape included (the sm90
// backend's MLA decode kernels take bf16/fp16 caches and FlashMLA's FP8 records with bf16 q;
// its plan refuses by name what they do not read: page sizes other than 64, a V cache of its
// own, ...). Host code, so that a build without a GPU tests what a GPU build answers. These
// must be refused here: the decode kernels would ignore the indices, and the FP8 kernel widens
// the records to bf16 for q's MMA (bf16 holds every rotary value and, exactly, every e4m3 times
// a power-of-two scale; fp16's range holds neither).
inline Status refuse_mla_on_gpu(const KVCacheProblem& p, const char* family) {
  auto refuse = [&](const char* argument, const std::string& what) {
    return Status{Code::not_supported, std::string(argument) + ": " + what +
                                           " is not supported by the " + family +
                                           " yet (the CPU backend computes it)"};
  };
  if (p.indices != nullptr) return refuse("indices", "sparse (top-k) MLA decode");
  if (p.format == CacheFormat::mla_fp8 && p.dtype != DType::bf16)
    return refuse("q", std::string("dtype ") + dtype_name(p.dtype) +
                           " with FlashMLA's FP8 MLA cache (dtype fp8_mla; bf16 q is)");
  return Status::ok();
}

// hfa_quantize_kv / hfa_dequantize_kv on a GPU without an FP8 MLA record codec: its generic
// kernel would write per-row FP8 codes where the record wants its own layout.
inline Status refuse_mla_quantize_on_gpu(const QuantizeProblem& p, const char* family) {
  if (p.format != CacheFormat::mla_fp8) return Status::ok();
  return Status{Code::not_supported, std::string("format: fp8_mla (FlashMLA's 656-byte records) "
                                                 "is not supported by the ") +
                                         family + " yet (the CPU backend writes and reads them)"};
}

}  // namespace hfa::detail

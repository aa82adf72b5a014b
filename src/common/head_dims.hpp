// The head dims a call may have (the API accepts each of q/k and v from kSupportedHeadDims) and
// the pairs the Hopper kernels are compiled for (kernel_list.def); every supported pair fits a
// compiled one, which the static_assert below keeps true when either list changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hfa/hfa.hpp"

namespace hfa::detail {

inline constexpr int32_t kSupportedHeadDims[] = {64, 96, 128, 192, 256};

struct HeadDims {
  int32_t qk, v;
};

inline constexpr HeadDims kCompiledHeadDims[] = {
#define HFA_KERNEL_HEAD_DIMS(qk, v) {qk, v},
#include "common/kernel_list.def"
#undef HFA_KERNEL_HEAD_DIMS
};

// The FP8 forward's pairs (e4m3 q, k, v): smaller head dims run zero-padded on the first that
// holds them, as above. Per-block k and v scales come in blocks of a multiple of kFp8KeyBlock
// keys, and the FP8 kernels that take them walk tiles of that many keys (ForwardProblem::
// k_descale; the others may take wider tiles, sm90/fwd/tile_config.hpp).
inline constexpr HeadDims kCompiledFp8HeadDims[] = {
#define HFA_KERNEL_FP8_HEAD_DIMS(qk, v) {qk, v},
#include "common/kernel_list.def"
#undef HFA_KERNEL_FP8_HEAD_DIMS
};
inline constexpr int32_t kFp8KeyBlock = 128;

// The out types the FP8 kernels write (HFA_KERNEL_FP8_OUT), and those the 16-bit forward writes
// besides its inputs' own (HFA_KERNEL_PARTIAL_OUT).
inline constexpr DType kCompiledFp8Outs[] = {
#define HFA_KERNEL_FP8_OUT(name, type) DType::name,
#include "common/kernel_list.def"
#undef HFA_KERNEL_FP8_OUT
};
inline constexpr DType kCompiledPartialOuts[] = {
#define HFA_KERNEL_PARTIAL_OUT(name, type) DType::name,
#include "common/kernel_list.def"
#undef HFA_KERNEL_PARTIAL_OUT
};

template <std::size_t N>
inline constexpr bool is_listed(const DType (&compiled)[N], DType dtype) {
  for (DType d : compiled)
    if (d == dtype) return true;
  return false;
}
inline constexpr bool is_compiled_fp8_out(DType dtype) {
  return is_listed(kCompiledFp8Outs, dtype);
}
inline constexpr bool is_compiled_partial_out(DType dtype) {
  return is_listed(kCompiledPartialOuts, dtype);
}

inline constexpr bool is_supported_head_dim(int64_t d) {
  for (int32_t supported : kSupportedHeadDims)
    if (d == supported) return true;
  return false;
}

// The index of the first pair of `compiled` that holds both head dims (zero-padded), or -1.
// (An index, not a pointer, for the static_assert below: GCC's -fsanitize=undefined makes
// pointer comparisons non-constant.)
template <std::size_t N>
inline constexpr int first_holding(const HeadDims (&compiled)[N], int64_t qk, int64_t v) {
  for (std::size_t i = 0; i < N; ++i)
    if (qk <= compiled[i].qk && v <= compiled[i].v) return static_cast<int>(i);
  return -1;
}

// The first compiled pair that holds both head dims, or null.
inline constexpr const HeadDims* compiled_head_dims_for(int64_t qk, int64_t v) {
  const int i = first_holding(kCompiledHeadDims, qk, v);
  return i < 0 ? nullptr : &kCompiledHeadDims[i];
}

inline constexpr const HeadDims* compiled_fp8_head_dims_for(int64_t qk, int64_t v) {
  const int i = first_holding(kCompiledFp8HeadDims, qk, v);
  return i < 0 ? nullptr : &kCompiledFp8HeadDims[i];
}

inline constexpr bool every_supported_pair_is_compiled() {
  for (int32_t qk : kSupportedHeadDims)
    for (int32_t v : kSupportedHeadDims)
      if (first_holding(kCompiledHeadDims, qk, v) < 0 ||
          first_holding(kCompiledFp8HeadDims, qk, v) < 0)
        return false;
  return true;
}
static_assert(every_supported_pair_is_compiled(),
              "a supported head dim pair fits no compiled kernel (kernel_list.def)");

// "64, 96, 128, 192, 256", for messages.
inline std::string supported_head_dim_list() {
  std::string list;
  for (int32_t d : kSupportedHeadDims) list += (list.empty() ? "" : ", ") + std::to_string(d);
  return list;
}

}  // namespace hfa::detail

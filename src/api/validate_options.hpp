// The VECTOR options (hfa/options.def): each checked and viewed from its row alone.
#pragma once

#include <cstdint>

#include "common/errors.hpp"
#include "common/option_vectors.hpp"

namespace hfa::detail {

// The dims a vector's shapes are written in (hfa_option_shape).
struct VectorDims {
  int64_t batch = 0;    // sequences
  int64_t heads_q = 0;  // query heads
};

// A given VECTOR row `name` (dtype and shapes: its row's low and high) checked against `dims`
// and q, and its view in *view; the failure names it.
Status attach_vector(const char* name, const Tensor& t, double dtype, double shapes,
                     VectorDims dims, const Tensor& q, OptionVector* view);

// Every VECTOR row that `call` (an hfa_option_calls bit) reads, when given: the row's dtype, one
// of its shapes in `dims`, a unit last stride, on q's device; then its view in *vectors. The
// first failure names the row's field. Inline: a call that gives none (the usual one) pays a
// null test a row.
inline Status attach_vectors(const Options& options, uint32_t call, VectorDims dims,
                             const Tensor& q, AttentionVectors* vectors) {
#define HFA_ATTENTION_OPTION(kind, name, value, low, high, calls, ...) \
  HFA_IF_VECTOR_##kind(if (((calls) & call) && options.name)             \
                           HFA_RETURN_IF_ERROR(attach_vector(#name, *options.name, low, high, \
                                                             dims, q, &vectors->name));)
#include "hfa/options.def"
  (void)options, (void)call, (void)dims, (void)q, (void)vectors;
  return Status::ok();
}

inline Status attach_vectors(const KVCacheOptions& options, VectorDims dims, const Tensor& q,
                             KVCacheVectors* vectors) {
#define HFA_KVCACHE_OPTION(kind, name, value, low, high, calls, ...)                       \
  HFA_IF_VECTOR_##kind(if (options.name) HFA_RETURN_IF_ERROR(attach_vector(               \
                           #name, *options.name, low, high, dims, q, &vectors->name));)
#include "hfa/options.def"
  (void)options, (void)dims, (void)q, (void)vectors;
  return Status::ok();
}

}  // namespace hfa::detail

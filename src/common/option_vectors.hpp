// The VECTOR options of hfa/options.def as the backends see them: each a view indexed by
// (sequence, query head), made by the API from the row alone (api/validate_options.cpp), so that
// a new one reaches the kernels with no hand-written field or check.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "common/host_device.hpp"
#include "hfa/hfa.hpp"

// What a row macro writes for a VECTOR row only: HFA_IF_VECTOR_##kind(code).
#define HFA_IF_VECTOR_FLAG(...)
#define HFA_IF_VECTOR_INT32(...)
#define HFA_IF_VECTOR_REAL(...)
#define HFA_IF_VECTOR_SCALE(...)
#define HFA_IF_VECTOR_TENSOR(...)
#define HFA_IF_VECTOR_HANDLE(...)
#define HFA_IF_VECTOR_BYTES(...)
#define HFA_IF_VECTOR_VECTOR(...) __VA_ARGS__

namespace hfa::detail {

// A vector given: element (b, h) of sequence b and query head h, whichever of its row's shapes
// it has (a stride is 0 over a dim its shape lacks). Not given: data is null.
struct OptionVector {
  const void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;

  HFA_HD explicit operator bool() const { return data != nullptr; }
  template <class T>
  HFA_HD T at(int64_t b, int64_t h) const {
    return static_cast<const T*>(data)[b * batch_stride + h * head_stride];
  }
};

// One member per VECTOR row of hfa_options (ForwardProblem::vectors)...
struct AttentionVectors {
#define HFA_ATTENTION_OPTION(kind, name, ...) HFA_IF_VECTOR_##kind(OptionVector name;)
#include "hfa/options.def"
};

// ... and of hfa_kvcache_options (KVCacheProblem::vectors).
struct KVCacheVectors {
#define HFA_KVCACHE_OPTION(kind, name, ...) HFA_IF_VECTOR_##kind(OptionVector name;)
#include "hfa/options.def"
};

// f(name, vector) for each VECTOR row of the struct, in the rows' order.
template <class F>
void for_each_vector(const AttentionVectors& v, F&& f) {
#define HFA_ATTENTION_OPTION(kind, name, ...) HFA_IF_VECTOR_##kind(f(#name, v.name);)
#include "hfa/options.def"
  (void)v, (void)f;
}

template <class F>
void for_each_vector(const KVCacheVectors& v, F&& f) {
#define HFA_KVCACHE_OPTION(kind, name, ...) HFA_IF_VECTOR_##kind(f(#name, v.name);)
#include "hfa/options.def"
  (void)v, (void)f;
}

// The name of the first vector given that is not among those a backend reads, or null. A backend
// answers HFA_ERROR_NOT_SUPPORTED naming it rather than ignore a row it has no code for: a new
// row is refused by every backend until its kernels read it.
template <class Vectors>
const char* first_unread(const Vectors& vectors, std::initializer_list<std::string_view> read) {
  const char* found = nullptr;
  for_each_vector(vectors, [&](const char* name, const OptionVector& v) {
    if (found != nullptr || !v) return;
    for (std::string_view r : read)
      if (r == name) return;
    found = name;
  });
  return found;
}

// Ok, or HFA_ERROR_NOT_SUPPORTED naming the first vector given that `kernels` (a backend's words
// for itself) do not read.
template <class Vectors>
Status refuse_unread(const Vectors& vectors, const char* kernels,
                     std::initializer_list<std::string_view> read) {
  const char* unread = first_unread(vectors, read);
  if (unread == nullptr) return Status::ok();
  return {Code::not_supported,
          std::string(unread) + ": not supported by the " + kernels + " kernels"};
}

}  // namespace hfa::detail

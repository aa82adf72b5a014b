// What an hfa_call holds once prepared (hfa.h): the problem as the backends take it, the
// workspace it needs, and the operation it is. api.cpp writes and reads it; nothing else looks
// inside but to clear it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/kvcache_problem.hpp"
#include "common/problem.hpp"
#include "hfa/hfa.h"

namespace hfa::detail {

// A call's first word: the operation prepared, above a mark that zeroed or stray storage does not
// carry. A failed prepare leaves none.
enum class Operation : uint64_t {
  none = 0,
  forward = 0x68666163'00000001,  // "hfac"
  backward = 0x68666163'00000002,
  forward_kvcache = 0x68666163'00000003,
};

template <typename Problem>
struct PreparedCall {
  Operation operation = Operation::none;
  std::size_t workspace_bytes = 0;  // what hfa_run must be given
  Problem problem;
};

template <typename Problem>
inline constexpr Operation kOperationOf = Operation::none;
template <>
inline constexpr Operation kOperationOf<ForwardProblem> = Operation::forward;
template <>
inline constexpr Operation kOperationOf<BackwardProblem> = Operation::backward;
template <>
inline constexpr Operation kOperationOf<KVCacheProblem> = Operation::forward_kvcache;

// A prepared problem lives in the caller's hfa_call, which the caller may copy as bytes.
template <typename Problem>
inline constexpr bool kFitsACall = sizeof(PreparedCall<Problem>) <= sizeof(hfa_call) &&
                                   alignof(PreparedCall<Problem>) <= alignof(hfa_call) &&
                                   std::is_trivially_copyable_v<PreparedCall<Problem>> &&
                                   std::is_standard_layout_v<PreparedCall<Problem>>;
static_assert(kFitsACall<ForwardProblem> && kFitsACall<BackwardProblem> &&
                  kFitsACall<KVCacheProblem>,
              "a prepared problem outgrew hfa_call: raise HFA_CALL_BYTES (an ABI change)");

inline Operation operation_of(const hfa_call& call) {
  Operation operation;
  std::memcpy(&operation, call.opaque, sizeof operation);
  return operation;
}

// Makes *call hold no call, as a failed prepare leaves it.
inline void clear(hfa_call* call) {
  constexpr Operation none = Operation::none;
  std::memcpy(call->opaque, &none, sizeof none);
}

}  // namespace hfa::detail

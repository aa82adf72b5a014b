// Memory shared between the tensors of one call, told from the extents of their views alone:
// pointer arithmetic, no device access, so a CUDA call stays free of synchronization. The rule
// (hfa.h, "Memory shared between tensors"): a tensor the call writes shares no byte with any
// other tensor of the call, and no two of its own elements share a byte; where the operation
// works in place, an output may instead be the very view of an input. Inputs may overlap freely.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "hfa/hfa.hpp"

namespace hfa::detail {

// One tensor argument of a call. An aggregate with no member defaults, so that CallTensors'
// storage costs nothing until a tensor is added: `{name, tensor}` leaves written false and the
// group 0.
struct CallTensor {
  const char* name;      // as the caller knows it: "out", "outs[2]"
  const Tensor* tensor;  // null: not given
  bool written;          // the call writes it (an output, or a cache it appends to)
  // Nonzero: a written tensor may be the very view (same data, dtype, shape and strides) of a
  // read tensor of the same group, which the call then updates in place.
  int in_place_group;
};

// The most tensors a call has: hfa_merge_partials' outs, lses, out and lse.
inline constexpr std::size_t kMaxCallTensors = 2 * HFA_MAX_MERGE_PARTIALS + 2;

// The tensors of one call, gathered in argument order for check_shared_memory. add() keeps only
// those given: a call pays for the few tensors it has, not for every optional one it could take
// (twenty-odd for an attention call, three to six given in the usual one).
class CallTensors {
 public:
  void add(const char* name, const Tensor* tensor, bool written = false,
           int in_place_group = 0) {
    if (tensor == nullptr) return;
    if (count_ < given_.size()) given_[count_] = {name, tensor, written, in_place_group};
    ++count_;  // past kMaxCallTensors too: check_shared_memory reports it
  }
  std::size_t count() const { return count_; }
  std::span<const CallTensor> given() const {
    return {given_.data(), std::min(count_, given_.size())};
  }

 private:
  std::array<CallTensor, kMaxCallTensors> given_;  // the first count_ are set (by add)
  std::size_t count_ = 0;
};

// The first violation of the rule among `tensors` (at most kMaxCallTensors), given in argument
// order: the message names the written tensor (of two written ones, the later) and the other. Each
// tensor must have passed its own checks (check_tensor_form): known dtype, non-negative strides,
// offsets within int64.
Status check_shared_memory(std::span<const CallTensor> tensors);
Status check_shared_memory(const CallTensors& tensors);

// The two tests the rule is made of. Both are exact (and the first interval test settles most
// pairs), unless a search for shared bytes runs past its budget, which only strides that
// interleave irregularly (no framework's layout) can make it do: it then answers false, so that a
// call is never refused for memory it may not share.
//
// Whether some byte lies in both views.
bool views_share_memory(const Tensor& a, const Tensor& b);
// Whether two elements of one view share a byte; if so, their indices in first and second (left
// as they were otherwise).
bool elements_overlap(const Tensor& t, int64_t (&first)[HFA_MAX_RANK],
                      int64_t (&second)[HFA_MAX_RANK]);

}  // namespace hfa::detail

// The bytes of one element of each dtype, inline: the validation asks it of every tensor of every
// call (its offsets in bytes, the memory rule's spans), where a call into the exported
// hfa::dtype_size (through the PLT) cost more than the answer. dtype_size returns this.
#pragma once

#include <cstddef>

#include "hfa/hfa.h"

namespace hfa::detail {

// 0 for a value that is no dtype (callers treat size 0 as "unknown").
constexpr std::size_t element_bytes(hfa_dtype dtype) {
  switch (dtype) {
    case HFA_F32: return 4;
    case HFA_F16: return 2;
    case HFA_BF16: return 2;
    case HFA_E4M3: return 1;
    case HFA_E5M2: return 1;
    case HFA_I32: return 4;
    case HFA_FP4_E2M1X2: return 1;  // one byte holds two values
    case HFA_UE8M0: return 1;
    case HFA_FP8_MLA: return 1;  // a record's bytes
  }
  return 0;
}

}  // namespace hfa::detail

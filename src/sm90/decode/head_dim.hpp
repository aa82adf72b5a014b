// The head dims the decode path is compiled for, and the one place a call's head dim becomes a
// template argument (the attention's launch and the append's).
#pragma once

#include <iterator>
#include <string>
#include <type_traits>

#include "hfa/hfa.hpp"

namespace hfa::sm90::decode {

// hdim_qk == hdim_v, one of these; plan.cpp's check_support refuses the rest, but for MLA's pair
// (576 / 512), which its own kernel takes (mla_shape.hpp, mla_kernel.cuh; entry.cpp dispatches).
inline constexpr int kSupportedHeadDims[] = {64, 128, 256};

// launch(std::integral_constant<int, hdim>{}) for a supported hdim. Any other is a bug of the
// caller (check_support comes first): an internal error, never a kernel of the wrong size.
template <typename Launch>
Status with_head_dim(int hdim, Launch&& launch) {
  static_assert(std::size(kSupportedHeadDims) == 3, "one case per supported head dim");
  switch (hdim) {
    case kSupportedHeadDims[0]: return launch(std::integral_constant<int, kSupportedHeadDims[0]>{});
    case kSupportedHeadDims[1]: return launch(std::integral_constant<int, kSupportedHeadDims[1]>{});
    case kSupportedHeadDims[2]: return launch(std::integral_constant<int, kSupportedHeadDims[2]>{});
    default:
      return {Code::internal, "sm90 KV-cache: no kernel for head dim " + std::to_string(hdim) +
                                  " (check_support admits only kSupportedHeadDims)"};
  }
}

}  // namespace hfa::sm90::decode

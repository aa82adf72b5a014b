// Constants of the exp2 domain the kernels compute softmax in: exp(x) = exp2(x·log2(e)) and a
// log2-domain LSE times ln(2) is the natural-log LSE users get.
#pragma once

namespace hfa::sm90 {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

}  // namespace hfa::sm90

// Compile-time checks of the codecs, built into the library so that a header that stops
// compiling, or stops being constexpr, fails the library build rather than only the tests.
#include "quant/e2m1.hpp"
#include "quant/e4m3.hpp"
#include "quant/e5m2.hpp"
#include "quant/fp8_kv.hpp"
#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"
#include "quant/ue8m0.hpp"

namespace hfa::quant {
namespace {

constexpr double kBf16Bytes = 2.0;
constexpr double kFp4BudgetVsBf16 = 0.29;  // the serving-path target for 4-bit caches

static_assert(e4m3_decode(0x7e) == E4M3::kMax && e4m3_encode(E4M3::kMax) == 0x7e);
static_assert(e5m2_decode(0x7b) == E5M2::kMax && e5m2_encode(E5M2::kMax) == 0x7b);
static_assert(e2m1_decode(0x7) == E2M1::kMax && e2m1_encode(E2M1::kMax) == 0x7);
static_assert(ue8m0_decode(kUe8m0Bias) == 1.0f && ue8m0_encode_floor(1.0f) == kUe8m0Bias);
static_assert(nvfp4_bytes_per_element() <= kFp4BudgetVsBf16 * kBf16Bytes);
static_assert(mxfp4_bytes_per_element() <= kFp4BudgetVsBf16 * kBf16Bytes);

}  // namespace
}  // namespace hfa::quant

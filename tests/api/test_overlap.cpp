// The two tests behind the memory rule (src/api/overlap.hpp), held to brute force: every byte of
// small random views, with strides regular or not, zero included; then framework layouts at full
// size, where brute force would be too slow.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "api/overlap.hpp"

namespace hfa::test {
namespace {

using detail::elements_overlap;
using detail::views_share_memory;

// How many elements of t cover each byte address.
std::map<uintptr_t, int> byte_counts(const Tensor& t) {
  std::map<uintptr_t, int> counts;
  int64_t count = 1;
  for (int d = 0; d < t.rank; ++d) count *= t.shape[d];
  const auto size = static_cast<int64_t>(dtype_size(static_cast<DType>(t.dtype)));
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t offset = 0;
    for (int64_t d = t.rank - 1, rest = flat; d >= 0; --d) {
      offset += (rest % t.shape[d]) * t.stride[d];
      rest /= t.shape[d];
    }
    for (int64_t b = 0; b < size; ++b)
      ++counts[reinterpret_cast<uintptr_t>(t.data) + offset * size + b];
  }
  return counts;
}

bool brute_force_share(const Tensor& a, const Tensor& b) {
  const std::map<uintptr_t, int> x = byte_counts(a), y = byte_counts(b);
  for (const auto& [address, n] : x)
    if (y.count(address)) return true;
  return false;
}

bool brute_force_self_overlap(const Tensor& t) {
  for (const auto& [address, n] : byte_counts(t))
    if (n > 1) return true;
  return false;
}

// The byte addresses of one element.
std::vector<uintptr_t> element_bytes(const Tensor& t, const int64_t (&index)[HFA_MAX_RANK]) {
  int64_t offset = 0;
  for (int d = 0; d < t.rank; ++d) offset += index[d] * t.stride[d];
  const auto size = static_cast<int64_t>(dtype_size(static_cast<DType>(t.dtype)));
  std::vector<uintptr_t> bytes;
  for (int64_t b = 0; b < size; ++b)
    bytes.push_back(reinterpret_cast<uintptr_t>(t.data) + offset * size + b);
  return bytes;
}

// A random small view into `arena`: rank 1 to 4, extents 0 to 4, strides 0 to 12 elements (some
// nested, some not), an element of 1, 2 or 4 bytes at an aligned offset.
Tensor random_view(std::mt19937_64& rng, std::vector<unsigned char>& arena) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const DType dtypes[] = {DType::e4m3, DType::bf16, DType::f32};
  const DType dtype = dtypes[uniform(0, 2)];
  const auto size = static_cast<int64_t>(dtype_size(dtype));
  Tensor t{};
  t.dtype = static_cast<hfa_dtype>(dtype);
  t.rank = static_cast<int32_t>(uniform(1, 4));
  t.device = HFA_CPU;
  const bool nested = uniform(0, 1) == 1;
  int64_t running = uniform(1, 2);
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = uniform(0, 100) < 3 ? 0 : uniform(1, 4);
    t.stride[d] = nested ? running : uniform(0, 12);
    running *= t.shape[d] + uniform(0, 1);
  }
  t.data = arena.data() + size * uniform(0, 48);
  return t;
}

std::string describe(const Tensor& t) {
  std::string s = std::string(dtype_name(static_cast<DType>(t.dtype))) + " shape (";
  for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  s += ") strides (";
  for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.stride[d]);
  return s + ") at +" + std::to_string(reinterpret_cast<uintptr_t>(t.data) % 4096);
}

TEST(Overlap, PairsAgreeWithBruteForce) {
  std::mt19937_64 rng(31);
  std::vector<unsigned char> arena(4096);
  int shared = 0;
  for (int i = 0; i < 20000; ++i) {
    const Tensor a = random_view(rng, arena), b = random_view(rng, arena);
    const bool want = brute_force_share(a, b);
    ASSERT_EQ(views_share_memory(a, b), want) << describe(a) << " / " << describe(b);
    ASSERT_EQ(views_share_memory(b, a), want) << describe(b) << " / " << describe(a);
    shared += want;
  }
  // Both answers drawn often, so that neither side of the comparison is idle.
  EXPECT_GT(shared, 2000);
  EXPECT_LT(shared, 18000);
}

TEST(Overlap, SelfOverlapAgreesWithBruteForce) {
  std::mt19937_64 rng(32);
  std::vector<unsigned char> arena(4096);
  int overlapping = 0;
  for (int i = 0; i < 20000; ++i) {
    const Tensor t = random_view(rng, arena);
    int64_t first[HFA_MAX_RANK], second[HFA_MAX_RANK];
    const bool found = elements_overlap(t, first, second);
    ASSERT_EQ(found, brute_force_self_overlap(t)) << describe(t);
    if (!found) continue;
    ++overlapping;
    // The witness: two distinct elements of the view, sharing a byte.
    bool distinct = false;
    for (int d = 0; d < t.rank; ++d) {
      ASSERT_TRUE(first[d] >= 0 && first[d] < t.shape[d] && second[d] >= 0 &&
                  second[d] < t.shape[d])
          << describe(t);
      distinct = distinct || first[d] != second[d];
    }
    ASSERT_TRUE(distinct) << describe(t);
    bool meet = false;
    for (uintptr_t x : element_bytes(t, first))
      for (uintptr_t y : element_bytes(t, second)) meet = meet || x == y;
    ASSERT_TRUE(meet) << describe(t);
  }
  EXPECT_GT(overlapping, 2000);
  EXPECT_LT(overlapping, 18000);
}

// Framework layouts at full size: packed QKV (and its gradient dqkv) as (batch, seqlen, 3, heads,
// headdim), q, k and v the three interleaved parts; an LSE inside an output; a KV pool laid out
// (pages, 2, page_size, heads, headdim) whose keys and values alternate by page.
TEST(Overlap, FrameworkLayoutsAtFullSize) {
  const int64_t batch = 64, seqlen = 8192, heads = 32, hdim = 128;
  const int64_t row = 3 * heads * hdim;
  // Addresses only: nothing here is read, so no memory backs them.
  auto at = [](int64_t byte) {
    return reinterpret_cast<void*>(uintptr_t{1} << 40 | uintptr_t(byte));
  };
  auto part = [&](int64_t first_element) {
    return make_tensor(at(2 * first_element), DType::bf16, {batch, seqlen, heads, hdim},
                       {seqlen * row, row, hdim, 1});
  };
  const Tensor q = part(0), k = part(heads * hdim), v = part(2 * heads * hdim);
  EXPECT_FALSE(views_share_memory(q, k));
  EXPECT_FALSE(views_share_memory(k, v));
  EXPECT_FALSE(views_share_memory(q, v));
  EXPECT_TRUE(views_share_memory(q, part(heads * hdim - 1)));  // one element into k's place
  EXPECT_TRUE(views_share_memory(v, part(heads * hdim + 1)));  // k one element on
  int64_t first[HFA_MAX_RANK], second[HFA_MAX_RANK];
  EXPECT_FALSE(elements_overlap(q, first, second));

  const Tensor out = make_tensor(at(0), DType::bf16, {batch, seqlen, heads, hdim});
  const Tensor lse = make_tensor(at(2 * out.stride[0] * 7), DType::f32, {batch, heads, seqlen});
  EXPECT_TRUE(views_share_memory(out, lse));
  Tensor heads_overlap = out;
  heads_overlap.stride[2] = hdim - 1;
  ASSERT_TRUE(elements_overlap(heads_overlap, first, second));
  EXPECT_EQ(first[2] - second[2], 1);
  EXPECT_EQ(second[3] - first[3], hdim - 1);

  const int64_t pages = 4096, page_size = 16, heads_kv = 8;
  const int64_t page = 2 * page_size * heads_kv * hdim;
  const Tensor k_cache = make_tensor(at(0), DType::bf16, {pages, page_size, heads_kv, hdim},
                                     {page, heads_kv * hdim, hdim, 1});
  Tensor v_cache = k_cache;
  v_cache.data = at(2 * (page / 2));
  EXPECT_FALSE(views_share_memory(k_cache, v_cache));
  EXPECT_FALSE(elements_overlap(v_cache, first, second));
  v_cache.data = at(2 * (page / 2 - 1));
  EXPECT_TRUE(views_share_memory(k_cache, v_cache));
}

// A tensor with no element has no byte; zero strides (an input's broadcast) add none.
TEST(Overlap, EmptyAndBroadcastViews) {
  std::vector<float> memory(64);
  const Tensor whole = make_tensor(memory.data(), DType::f32, {64});
  const Tensor empty = make_tensor(memory.data(), DType::f32, {0, 8});
  EXPECT_FALSE(views_share_memory(whole, empty));
  const Tensor broadcast = make_tensor(memory.data() + 63, DType::f32, {5, 3}, {0, 0});
  EXPECT_TRUE(views_share_memory(whole, broadcast));
  int64_t first[HFA_MAX_RANK], second[HFA_MAX_RANK];
  ASSERT_TRUE(elements_overlap(broadcast, first, second));
  EXPECT_EQ(first[0] + first[1], 1);  // the first two elements along a zero stride
  EXPECT_EQ(second[0] + second[1], 0);
}

}  // namespace
}  // namespace hfa::test

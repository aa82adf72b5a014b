// The options' one description (hfa/options.def) against what the library does, row by row and
// through the C ABI alone, the way a binding sees it (hfa_describe_options): the defaults are
// the described ones, every value out of a row's range is rejected by a message naming the row's
// field with nothing written, the range's ends are accepted, and a C struct survives the trip
// through C++ and back. A row added to the table is tested here with no new test code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "api/fixture.hpp"
#include "api/options.hpp"
#include "api/validate.hpp"
#include "kvcache/kv_case.hpp"

namespace hfa::test {
namespace {

std::span<const hfa_option_info> rows(hfa_options_struct which) {
  int32_t count = 0;
  const hfa_option_info* info = hfa_describe_options(which, &count, nullptr);
  return {info, static_cast<std::size_t>(count)};
}

// A field's value as a double (a pointer: 0 or 1, whether it is set), and setting one.
double read(const void* c, const hfa_option_info& row) {
  const auto* at = static_cast<const unsigned char*>(c) + row.offset;
  switch (row.kind) {
    case HFA_KIND_FLAG:
    case HFA_KIND_INT32: return *reinterpret_cast<const int32_t*>(at);
    case HFA_KIND_REAL:
    case HFA_KIND_SCALE: return *reinterpret_cast<const float*>(at);
    case HFA_KIND_BYTES: return static_cast<double>(*reinterpret_cast<const std::size_t*>(at));
    case HFA_KIND_TENSOR:
    case HFA_KIND_VECTOR:
    case HFA_KIND_HANDLE: return *reinterpret_cast<void* const*>(at) != nullptr;
  }
  return std::nan("");
}

void write(void* c, const hfa_option_info& row, double value) {
  auto* at = static_cast<unsigned char*>(c) + row.offset;
  if (row.kind == HFA_KIND_INT32) *reinterpret_cast<int32_t*>(at) = static_cast<int32_t>(value);
  else *reinterpret_cast<float*>(at) = static_cast<float>(value);  // REAL, SCALE
  if (row.kind == HFA_KIND_SCALE)
    *reinterpret_cast<int32_t*>(static_cast<unsigned char*>(c) + row.flag_offset) = 1;
}

bool ranged(const hfa_option_info& row) {
  return row.kind == HFA_KIND_INT32 || row.kind == HFA_KIND_REAL || row.kind == HFA_KIND_SCALE;
}

// Values just outside a row's range (the C field's own limits left out: they cannot be passed).
std::vector<double> outside(const hfa_option_info& row) {
  std::vector<double> values;
  if (row.kind == HFA_KIND_INT32) {
    if (row.low > INT32_MIN) values.push_back(row.low - 1);
    if (row.high < INT32_MAX) values.push_back(row.high + 1);
  } else {
    values = {std::nan(""), -std::numeric_limits<double>::infinity(),
              std::numeric_limits<double>::infinity()};
    if (row.low > -HUGE_VALF) values.push_back(row.low - 0.5);
  }
  return values;
}

// The ends of a row's range that a valid call may take: its low (and, for a ranged top that
// is not the field's own limit, its high) where the rest of the fixture's call allows it.
std::vector<double> inside(const hfa_option_info& row) {
  std::vector<double> values = {row.low};
  if (row.kind == HFA_KIND_INT32 && row.high < INT32_MAX) values.push_back(row.high);
  return values;
}

::testing::AssertionResult RejectedNaming(hfa_status status, const hfa_option_info& row) {
  if (status != HFA_ERROR_INVALID_ARGUMENT)
    return ::testing::AssertionFailure() << "status " << hfa_status_name(status);
  const std::string message = hfa_last_error();
  if (message.rfind(std::string(row.name) + ": ", 0) != 0)
    return ::testing::AssertionFailure() << "message \"" << message << "\" names another argument";
  return ::testing::AssertionSuccess();
}

TEST(OptionTable, DescribesEveryStruct) {
  for (auto [which, size] : {std::pair{HFA_OPTIONS_ATTENTION, sizeof(hfa_options)},
                             std::pair{HFA_OPTIONS_KVCACHE, sizeof(hfa_kvcache_options)}}) {
    int32_t count = -1;
    std::size_t described = 0;
    ASSERT_NE(hfa_describe_options(which, &count, &described), nullptr);
    EXPECT_EQ(described, size);
    // In field order, each after the last (a SCALE's flag just before its value).
    std::size_t end = 0;
    for (const hfa_option_info& row : rows(which)) {
      EXPECT_GE(row.flag_offset, end) << row.name;
      EXPECT_GE(row.offset, row.flag_offset) << row.name;
      EXPECT_NE(*row.caller, '\0') << row.name;
      end = row.offset + 1;
    }
  }
  int32_t count = -1;
  std::size_t size = 1;
  EXPECT_EQ(hfa_describe_options(static_cast<hfa_options_struct>(7), &count, &size), nullptr);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(size, 0u);
}

TEST(OptionTable, DefaultsAreTheDescribedOnes) {
  const hfa_options attention = hfa_default_options();
  for (const hfa_option_info& row : rows(HFA_OPTIONS_ATTENTION))
    EXPECT_EQ(read(&attention, row), row.default_value) << row.name;
  const hfa_kvcache_options kvcache = hfa_default_kvcache_options();
  for (const hfa_option_info& row : rows(HFA_OPTIONS_KVCACHE))
    EXPECT_EQ(read(&kvcache, row), row.default_value) << row.name;
  // A default-constructed C++ struct is the C default.
  const hfa_options from_cpp = to_c(Options{});
  EXPECT_EQ(std::memcmp(&from_cpp, &attention, sizeof attention), 0);
  const hfa_kvcache_options kv_from_cpp = to_c(KVCacheOptions{});
  EXPECT_EQ(std::memcmp(&kv_from_cpp, &kvcache, sizeof kvcache), 0);
}

// Every field set to a value of its own (a distinct pointer, a flag on, a number in range)
// comes back from C++ as it went.
template <typename C, typename Cpp>
void expect_round_trip(hfa_options_struct which, C c) {
  unsigned char target[64];
  int distinct = 0;
  for (const hfa_option_info& row : rows(which)) {
    auto* at = reinterpret_cast<unsigned char*>(&c) + row.offset;
    ++distinct;
    switch (row.kind) {
      case HFA_KIND_FLAG: *reinterpret_cast<int32_t*>(at) = 1; break;
      case HFA_KIND_INT32: *reinterpret_cast<int32_t*>(at) = distinct; break;
      case HFA_KIND_REAL:
      case HFA_KIND_SCALE: write(&c, row, 0.25 * distinct); break;
      case HFA_KIND_BYTES: *reinterpret_cast<std::size_t*>(at) = 1000u + distinct; break;
      case HFA_KIND_TENSOR:
      case HFA_KIND_VECTOR:
      case HFA_KIND_HANDLE: *reinterpret_cast<void**>(at) = target + distinct % 64; break;
    }
  }
  const Cpp cpp = detail::from_c(c);
  const C back = to_c(cpp);
  EXPECT_EQ(std::memcmp(&back, &c, sizeof c), 0);
}

TEST(OptionTable, CThroughCppAndBack) {
  expect_round_trip<hfa_options, Options>(HFA_OPTIONS_ATTENTION, hfa_default_options());
  expect_round_trip<hfa_kvcache_options, KVCacheOptions>(HFA_OPTIONS_KVCACHE,
                                                         hfa_default_kvcache_options());
}

// The fixture's call with its C options changed by edit(c), through the C ABI: a forward for
// a row a forward reads, else a backward.
template <class Edit>
hfa_status attention_call_edited(Attention& a, const hfa_option_info& row, Edit edit) {
  a.poison_outputs();
  hfa_options c = to_c(a.options);
  edit(c);
  if (row.calls & HFA_CALL_FORWARD)
    return hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, &a.lse.tensor, &c);
  return hfa_backward(&a.dout.tensor, &a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor,
                      &a.lse.tensor, &a.dq.tensor, &a.dk.tensor, &a.dv.tensor, &c);
}

// ... with one field set to `value`.
hfa_status attention_call(Attention& a, const hfa_option_info& row, double value) {
  return attention_call_edited(a, row, [&](hfa_options& c) { write(&c, row, value); });
}

TEST(OptionTable, AttentionValuesOutOfRangeAreRejected) {
  Attention a;
  int tested = 0, ranged_rows = 0;
  for (const hfa_option_info& row : rows(HFA_OPTIONS_ATTENTION)) {
    if (!ranged(row)) continue;
    ++ranged_rows;
    for (double value : outside(row)) {
      SCOPED_TRACE(std::string(row.name) + " = " + std::to_string(value));
      EXPECT_TRUE(RejectedNaming(attention_call(a, row, value), row));
      EXPECT_TRUE(a.forward_outputs_untouched() && a.backward_outputs_untouched());
      ++tested;
    }
  }
  EXPECT_GE(ranged_rows, 9);  // softmax_scale, softcap, the window, max_seqlen_*, ...
  EXPECT_GE(tested, ranged_rows);
}

TEST(OptionTable, AttentionRangeEndsAreAccepted) {
  Attention a;
  for (const hfa_option_info& row : rows(HFA_OPTIONS_ATTENTION)) {
    if (!ranged(row)) continue;
    // The fixture is fixed length: a varlen bound is only accepted at 0, a block only at 0
    // (no per-block descales), the window at any end.
    for (double value : inside(row)) {
      SCOPED_TRACE(std::string(row.name) + " = " + std::to_string(value));
      const hfa_status status = attention_call(a, row, value);
      EXPECT_EQ(status, HFA_SUCCESS) << hfa_last_error();
    }
  }
}

TEST(OptionTable, KVCacheValuesOutOfRangeAreRejected) {
  int tested = 0, ranged_rows = 0;
  for (const hfa_option_info& row : rows(HFA_OPTIONS_KVCACHE)) {
    if (!ranged(row)) continue;
    ++ranged_rows;
    for (double value : outside(row)) {
      SCOPED_TRACE(std::string(row.name) + " = " + std::to_string(value));
      KVCase c;
      c.cache_seqlens = {5, 0, 40};
      c.build();
      const std::vector<unsigned char> out_before = c.out.bytes, k_before = c.k.bytes;
      hfa_kvcache_options o = to_c(c.options);
      write(&o, row, value);
      EXPECT_TRUE(RejectedNaming(hfa_forward_kvcache(&c.q.tensor, &c.k.tensor, &c.v.tensor,
                                                     &c.out.tensor, &c.lse.tensor, &o),
                                 row));
      EXPECT_TRUE(c.out.bytes == out_before && c.k.bytes == k_before);
      ++tested;
    }
  }
  EXPECT_GE(ranged_rows, 8);  // the score options, num_splits, split_size, ...
  EXPECT_GE(tested, ranged_rows);
}

// ---- VECTOR rows: each tried with the forms its row accepts and with forms it does not ---------

// A vector of `rank` dims of zeros over storage aligned for any dtype, packed unless `last`
// (the last dim's stride) says otherwise.
struct VectorArg {
  std::vector<double> storage = std::vector<double>(512);
  hfa_tensor tensor{};
  VectorArg(hfa_dtype dtype, std::vector<int64_t> shape, int64_t last = 1) {
    tensor.data = storage.data();
    tensor.dtype = dtype;
    tensor.rank = static_cast<int32_t>(shape.size());
    int64_t stride = last;
    for (int d = tensor.rank - 1; d >= 0; --d) {
      tensor.shape[d] = shape[d];
      tensor.stride[d] = stride;
      stride *= shape[d];
    }
    tensor.device = HFA_CPU;
  }
};

// The shapes a row accepts in a call of `batch` sequences and `heads` query heads.
std::vector<std::vector<int64_t>> accepted_shapes(const hfa_option_info& row, int64_t batch,
                                                  int64_t heads) {
  std::vector<std::vector<int64_t>> shapes;
  const auto bits = static_cast<uint32_t>(row.high);
  if (bits & HFA_SHAPE_HEADS) shapes.push_back({heads});
  if (bits & HFA_SHAPE_BATCH) shapes.push_back({batch});
  if (bits & HFA_SHAPE_BATCH_HEADS) shapes.push_back({batch, heads});
  return shapes;
}

// What a call must reject, each naming the row: another dtype, an extent off by one, one dim
// more, a last stride of 2, another device.
std::vector<VectorArg> rejected_vectors(const hfa_option_info& row, int64_t batch,
                                        int64_t heads) {
  const auto dtype = static_cast<hfa_dtype>(row.low);
  std::vector<VectorArg> bad;
  bad.emplace_back(dtype == HFA_F32 ? HFA_I32 : HFA_F32, accepted_shapes(row, batch, heads)[0]);
  for (std::vector<int64_t> shape : accepted_shapes(row, batch, heads)) {
    bad.emplace_back(dtype, shape, 2);
    shape.back() += 1;
    bad.emplace_back(dtype, shape);
    shape.back() -= 1;
    shape.push_back(2);
    bad.emplace_back(dtype, shape);
  }
  bad.emplace_back(dtype, accepted_shapes(row, batch, heads)[0]);
  bad.back().tensor.device = HFA_CUDA;
  return bad;
}

void set_vector(void* c, const hfa_option_info& row, const hfa_tensor* t) {
  *reinterpret_cast<const hfa_tensor**>(static_cast<unsigned char*>(c) + row.offset) = t;
}

hfa_status attention_call_with(Attention& a, const hfa_option_info& row, const hfa_tensor* t) {
  return attention_call_edited(a, row, [&](hfa_options& c) { set_vector(&c, row, t); });
}

TEST(OptionTable, AttentionVectorsTakeTheirRowsFormsOnly) {
  Attention a;
  for (const hfa_option_info& row : rows(HFA_OPTIONS_ATTENTION)) {
    if (row.kind != HFA_KIND_VECTOR) continue;
    for (VectorArg& bad : rejected_vectors(row, a.batch, a.heads_q)) {
      SCOPED_TRACE(std::string(row.name) + " of shape " +
                   std::to_string(bad.tensor.shape[0]) + ", rank " +
                   std::to_string(bad.tensor.rank));
      EXPECT_TRUE(RejectedNaming(attention_call_with(a, row, &bad.tensor), row));
      EXPECT_TRUE(a.forward_outputs_untouched() && a.backward_outputs_untouched());
    }
    // Every accepted form is read by the CPU backend; a backend whose kernels read no vector
    // (refuse_unread with nothing read, as sm90's decode) refuses it, naming it: no row is
    // ignored.
    for (const std::vector<int64_t>& shape : accepted_shapes(row, a.batch, a.heads_q)) {
      VectorArg good(static_cast<hfa_dtype>(row.low), shape);
      EXPECT_EQ(attention_call_with(a, row, &good.tensor), HFA_SUCCESS)
          << row.name << ": " << hfa_last_error();
      hfa_options c = to_c(a.options);
      set_vector(&c, row, &good.tensor);
      const Options with_row = detail::from_c(c);
      detail::ForwardProblem problem;
      ASSERT_TRUE(detail::build_forward_problem(
                      {&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, nullptr, &with_row},
                      detail::Purpose::run, &problem)
                      .is_ok());
      const Status refused = detail::refuse_unread(problem.vectors, "sm90 forward", {});
      EXPECT_EQ(refused.code(), Code::not_supported);
      EXPECT_EQ(refused.message().rfind(std::string(row.name) + ": not supported", 0), 0u)
          << refused.message();
    }
  }
}

TEST(OptionTable, KVCacheVectorsTakeTheirRowsFormsOnly) {
  for (const hfa_option_info& row : rows(HFA_OPTIONS_KVCACHE)) {
    if (row.kind != HFA_KIND_VECTOR) continue;
    KVCase c;
    c.cache_seqlens = {5, 0, 40};
    c.build();
    auto call = [&](const hfa_tensor* t) {
      hfa_kvcache_options o = to_c(c.options);
      set_vector(&o, row, t);
      return hfa_forward_kvcache(&c.q.tensor, &c.k.tensor, &c.v.tensor, &c.out.tensor,
                                 &c.lse.tensor, &o);
    };
    const std::vector<unsigned char> out_before = c.out.bytes;
    for (VectorArg& bad : rejected_vectors(row, c.batch(), c.heads_q())) {
      SCOPED_TRACE(std::string(row.name) + " of rank " + std::to_string(bad.tensor.rank));
      EXPECT_TRUE(RejectedNaming(call(&bad.tensor), row));
      EXPECT_TRUE(c.out.bytes == out_before);
    }
    for (const std::vector<int64_t>& shape : accepted_shapes(row, c.batch(), c.heads_q())) {
      VectorArg good(static_cast<hfa_dtype>(row.low), shape);
      EXPECT_EQ(call(&good.tensor), HFA_SUCCESS) << row.name << ": " << hfa_last_error();
    }
  }
}

}  // namespace
}  // namespace hfa::test

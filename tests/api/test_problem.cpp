// What validation hands the backends: resolved defaults, folded causal, element strides.
#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "api/options.hpp"
#include "api/validate.hpp"
#include "fixture.hpp"

namespace hfa::test {
namespace {

using detail::ForwardProblem;

ForwardProblem build(Attention& a) {
  ForwardProblem p;
  const Status status = detail::build_forward_problem(
      {&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor, &a.lse.tensor, &a.options},
      detail::Purpose::run, &p);
  EXPECT_TRUE(status.is_ok()) << status.message();
  return p;
}

TEST(Problem, DefaultsResolved) {
  Attention a;
  const ForwardProblem p = build(a);
  EXPECT_FLOAT_EQ(p.softmax_scale, 1.0f / std::sqrt(64.0f));
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.seqlen_q, 3);
  EXPECT_EQ(p.seqlen_k, 5);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.hdim_qk, 64);
  EXPECT_EQ(p.hdim_v, 64);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, -1);
  EXPECT_FALSE(p.causal);
  EXPECT_FALSE(p.is_varlen());
  EXPECT_EQ(p.q_stride.batch, 3 * 4 * 64);
  EXPECT_EQ(p.q_stride.row, 4 * 64);
  EXPECT_EQ(p.q_stride.head, 64);
  EXPECT_EQ(p.lse_batch_stride, 4 * 3);
  EXPECT_EQ(p.lse_head_stride, 3);
  EXPECT_EQ(p.q, a.q.data.data());
  EXPECT_EQ(p.out, a.out.data.data());
  EXPECT_EQ(p.device.kind, DeviceKind::cpu);
}

TEST(Problem, ExplicitScaleKept) {
  Attention a;
  a.options.softmax_scale = 0.0f;  // uniform attention: unusual but well defined
  EXPECT_EQ(build(a).softmax_scale, 0.0f);
}

TEST(Problem, CausalFoldsIntoWindow) {
  Attention a;
  a.options.causal = true;
  a.options.window_right = 3;  // like FlashAttention, causal wins
  a.options.window_left = 1;
  ForwardProblem p = build(a);
  EXPECT_EQ(p.window_right, 0);
  EXPECT_EQ(p.window_left, 1);
  EXPECT_FALSE(p.causal);  // a window (1, 0) is not plain causal
  a.options.window_left = -1;
  p = build(a);
  EXPECT_TRUE(p.causal);
  EXPECT_EQ(p.window_right, 0);
}

TEST(Problem, WindowSpelledAsCausalIsCausal) {
  Attention a;
  a.options.window_right = 0;
  EXPECT_TRUE(build(a).causal);
}

TEST(Problem, LeftWindowPastEveryKeyIsDropped) {
  Attention a;  // seqlen_k 5: a left window >= 4 reaches key 0 from every row
  a.options.window_left = 4;
  EXPECT_EQ(build(a).window_left, -1);
  a.options.window_left = 3;
  EXPECT_EQ(build(a).window_left, 3);
}

TEST(Problem, WorkspaceChecked) {
  EXPECT_TRUE(detail::check_workspace(0, nullptr, 0).is_ok());
  EXPECT_TRUE(Invalid(detail::check_workspace(256, nullptr, 0), "workspace", "needs 256 bytes, got 0"));
  alignas(HFA_WORKSPACE_ALIGNMENT) char buffer[2 * HFA_WORKSPACE_ALIGNMENT];
  EXPECT_TRUE(Invalid(detail::check_workspace(65, buffer, 64), "workspace", "needs 65 bytes, got 64"));
  EXPECT_TRUE(detail::check_workspace(64, buffer, 64).is_ok());
  EXPECT_TRUE(Invalid(detail::check_workspace(64, nullptr, 64), "workspace", "is null"));
  // The kernels' vector and bulk copies: an address off the alignment is refused before a launch.
  EXPECT_TRUE(Invalid(detail::check_workspace(64, buffer + 16, 64), "workspace",
                      "must be aligned to 256 bytes (cudaMalloc's and torch's allocations are), "
                      "got an address 16 bytes past a multiple"));
  EXPECT_TRUE(detail::check_workspace(64, buffer + HFA_WORKSPACE_ALIGNMENT, 64).is_ok());
}

TEST(Problem, WorkspaceQueryNeedsNoOutputs) {
  Attention a;
  std::size_t bytes = 12345;
  ASSERT_TRUE(forward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, &bytes).is_ok());
  EXPECT_NE(bytes, 12345u);
  a.k.tensor.shape[3] = 128;
  EXPECT_TRUE(Invalid(forward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, &bytes), "k"));
  EXPECT_TRUE(Invalid(forward_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, a.options, nullptr), "bytes"));
}

// problem.hpp's ScaleView for each form: per tensor all strides 0; FlashAttention-3's
// (batch, heads_kv) q_descale maps a query head to its group; per block with the block term.
TEST(Problem, Fp8ScaleViews) {
  Attention a = fp8_attention();
  Scales s;
  Tensor per_tensor = s.view({1}), per_kv_head = s.view({2, 2}, {0, 1});
  Tensor per_query_head = s.view({2, 4}), per_block = s.view({2, 3, 2}, {1, 2, 6});
  a.options.q_descale = &per_kv_head;
  a.options.k_descale = &per_block;
  a.options.descale_block_kv = 2;
  ForwardProblem p = build(a);
  EXPECT_EQ(p.dtype, DType::e4m3);
  EXPECT_EQ(p.out_dtype, DType::bf16);
  EXPECT_EQ(p.q_descale.data, s.values.data());
  EXPECT_EQ(p.q_descale.batch_stride, 0);
  EXPECT_EQ(p.q_descale.head_stride, 1);
  EXPECT_EQ(p.q_descale.block_rows, 0);
  EXPECT_EQ(p.q_descale.head_divisor, 2);  // 4 query heads over 2 kv heads
  EXPECT_EQ(p.k_descale.batch_stride, 1);
  EXPECT_EQ(p.k_descale.block_stride, 2);
  EXPECT_EQ(p.k_descale.head_stride, 6);
  EXPECT_EQ(p.k_descale.block_rows, 2);
  EXPECT_EQ(p.k_descale.head_divisor, 1);
  EXPECT_EQ(p.v_descale.data, nullptr);

  a.options.q_descale = &per_query_head;
  a.options.v_descale = &per_tensor;
  p = build(a);
  EXPECT_EQ(p.q_descale.batch_stride, 4);
  EXPECT_EQ(p.q_descale.head_divisor, 1);
  EXPECT_EQ(p.v_descale.data, s.values.data());
  EXPECT_EQ(p.v_descale.batch_stride, 0);
  EXPECT_EQ(p.v_descale.block_stride, 0);
  EXPECT_EQ(p.v_descale.head_stride, 0);
  EXPECT_EQ(p.v_descale.block_rows, 0);
}

// ---- every value option reaches the backends ----------------------------------------------------
//
// Each option that is a value (all rows of hfa/options.def but the tensors) is set, through the C
// struct as a binding sets it (hfa_describe_options' offsets), to a value of its own; the copy
// into the problem (copy_values) must bring each to the problem's member of the row's name. The
// rows are walked twice, by the description and by the table itself (a row macro naming the
// member), so a row added to the table is tested here with no new test code, and a value row
// whose member or copy were missing would fail to build or to compare.

bool is_value(hfa_option_kind kind) { return kind != HFA_KIND_TENSOR && kind != HFA_KIND_VECTOR; }

// A value of row n's own, as the C field takes it (a flag: on) and as a double.
double value_for(const hfa_option_info& row, int n) {
  switch (row.kind) {
    case HFA_KIND_FLAG: return 1;
    case HFA_KIND_INT32: return 100 + n;
    case HFA_KIND_REAL:
    case HFA_KIND_SCALE: return 0.25 * n;
    case HFA_KIND_HANDLE:
    case HFA_KIND_BYTES: return 4096.0 * (n + 1);
    default: return 0;
  }
}

void set_field(void* c, const hfa_option_info& row, double value) {
  auto* at = static_cast<unsigned char*>(c) + row.offset;
  switch (row.kind) {
    case HFA_KIND_FLAG:
    case HFA_KIND_INT32: *reinterpret_cast<int32_t*>(at) = static_cast<int32_t>(value); break;
    case HFA_KIND_SCALE:
      *reinterpret_cast<int32_t*>(static_cast<unsigned char*>(c) + row.flag_offset) = 1;
      [[fallthrough]];
    case HFA_KIND_REAL: *reinterpret_cast<float*>(at) = static_cast<float>(value); break;
    case HFA_KIND_HANDLE:
      *reinterpret_cast<void**>(at) = reinterpret_cast<void*>(static_cast<uintptr_t>(value));
      break;
    case HFA_KIND_BYTES: *reinterpret_cast<std::size_t*>(at) = static_cast<std::size_t>(value);
      break;
    default: break;
  }
}

// A problem's member as a double, whatever its type.
double number(bool v) { return v ? 1 : 0; }
double number(int32_t v) { return v; }
double number(float v) { return v; }
double number(std::size_t v) { return static_cast<double>(v); }
double number(const void* v) { return static_cast<double>(reinterpret_cast<uintptr_t>(v)); }

// The C struct with every value row set to its own value, and those values by field name.
template <typename C>
C every_value_set(hfa_options_struct which, C c,
                  std::vector<std::pair<std::string_view, double>>* set) {
  int32_t count = 0;
  const hfa_option_info* rows = hfa_describe_options(which, &count, nullptr);
  for (int n = 0; n < count; ++n) {
    if (!is_value(rows[n].kind)) continue;
    set->emplace_back(rows[n].name, value_for(rows[n], n));
    set_field(&c, rows[n], set->back().second);
  }
  return c;
}

// What the table's row `name` was set to (NaN: the description has no such value row).
double given(const std::vector<std::pair<std::string_view, double>>& set, std::string_view name) {
  for (const auto& [field, value] : set)
    if (field == name) return value;
  return std::nan("");
}

#define HFA_EXPECT_MEMBER(name) EXPECT_EQ(number(p.name), given(set, #name)) << #name;
#define HFA_EXPECT_VALUE_FLAG HFA_EXPECT_MEMBER
#define HFA_EXPECT_VALUE_INT32 HFA_EXPECT_MEMBER
#define HFA_EXPECT_VALUE_REAL HFA_EXPECT_MEMBER
#define HFA_EXPECT_VALUE_SCALE HFA_EXPECT_MEMBER
#define HFA_EXPECT_VALUE_HANDLE HFA_EXPECT_MEMBER
#define HFA_EXPECT_VALUE_BYTES HFA_EXPECT_MEMBER
#define HFA_EXPECT_VALUE_TENSOR(name)
#define HFA_EXPECT_VALUE_VECTOR(name)

TEST(Problem, EveryValueOptionReachesItsMember) {
  std::vector<std::pair<std::string_view, double>> set;
  const hfa_options c = every_value_set(HFA_OPTIONS_ATTENTION, hfa_default_options(), &set);
  ForwardProblem p;
  detail::copy_values(detail::from_c(c), &p);
#define HFA_ATTENTION_OPTION(kind, name, ...) HFA_EXPECT_VALUE_##kind(name)
#include "hfa/options.def"
  EXPECT_FALSE(set.empty());
}

TEST(Problem, EveryKVCacheValueOptionReachesItsMember) {
  std::vector<std::pair<std::string_view, double>> set;
  const hfa_kvcache_options c =
      every_value_set(HFA_OPTIONS_KVCACHE, hfa_default_kvcache_options(), &set);
  detail::KVCacheProblem p;
  detail::copy_values(detail::from_c(c), &p);
#define HFA_KVCACHE_OPTION(kind, name, ...) HFA_EXPECT_VALUE_##kind(name)
#include "hfa/options.def"
  EXPECT_FALSE(set.empty());
}

// The resolution after the copy keeps what a caller gave where nothing is to resolve: the
// problem a call builds holds the call's values.
TEST(Problem, ACallsValuesReachItsProblem) {
  Attention a;
  a.options.sm_margin = 3;
  a.options.sparse_block_q = 64;
  a.options.softcap = 2.5f;
  const ForwardProblem p = build(a);
  EXPECT_EQ(p.sm_margin, 3);
  EXPECT_EQ(p.sparse_block_q, 64);
  EXPECT_EQ(p.softcap, 2.5f);
}

}  // namespace
}  // namespace hfa::test

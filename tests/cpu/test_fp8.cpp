// The FP8 forward on the CPU (e4m3 q, k, v with descales, through the public API) against the
// float64 oracle of the inputs it dequantizes to, within the bound of docs/design.md §6 (twice
// the float32 peer's error): each descale form (none, per tensor, FlashAttention-3's per
// kv-head, per query head, per block with odd block sizes over odd lengths, varlen blocks
// counted per sequence) meets causal, windows, softcap, sinks, GQA, seqused and strided views.
// Outputs start as NaN, so unwritten elements fail. The CPU result is the GPU's oracle: it must
// equal, bit for bit, the tiled forward over the dequantized fp32 values.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/backend.hpp"
#include "common/expected.hpp"
#include "common/fp8_case.hpp"
#include "common/forward_checks.hpp"

namespace hfa::test {
namespace {

using Form = DescaleForm;

struct Fp8Case {
  AttentionCase attention;
  Fp8Spec fp8;

  std::string name() const {
    static const char* const forms[] = {"none", "tensor", "kvhead", "qhead", "block"};
    std::string s = attention.name() + "_q" + forms[static_cast<int>(fp8.q_form)];
    if (fp8.q_form == Form::per_block) s += std::to_string(fp8.block_q);
    s += std::string("_kv") + forms[static_cast<int>(fp8.kv_form)];
    if (fp8.kv_form == Form::per_block) s += std::to_string(fp8.block_kv);
    return fp8.strided ? s + "_strided" : s;
  }
};

void PrintTo(const Fp8Case& c, std::ostream* os) { *os << c.name(); }

// The FP8 call over the codes, into the case's (NaN) out and lse.
Status fp8_forward(AttentionData& data, const Fp8Inputs& fp8) {
  const Tensor lse = data.lse.view();
  return forward(fp8.q.view(), fp8.k.view(), fp8.v.view(), data.out.view(), &lse, fp8.options());
}

std::vector<Fp8Case> cases() {
  std::vector<Fp8Case> cases;
  auto add = [&](Fp8Spec fp8, auto&& edit) {
    Fp8Case c{AttentionCase{}, fp8};
    c.attention.out_dtype = DType::bf16;
    c.attention.seed = 900 + cases.size();
    edit(c.attention);
    cases.push_back(c);
  };
  // No descales, then one per tensor.
  add({}, [](AttentionCase& c) {
    c.batch = 2; c.seqlen_q = 70; c.seqlen_k = 90; c.heads_q = 4; c.heads_kv = 2; c.causal = true;
  });
  add({Form::per_tensor, Form::per_tensor}, [](AttentionCase& c) {
    c.out_dtype = DType::f16; c.seqlen_q = 65; c.seqlen_k = 130; c.heads_q = 4; c.heads_kv = 1;
    c.hdim_qk = c.hdim_v = 128; c.window_left = 20; c.window_right = 5;
  });
  add({Form::per_tensor, Form::none}, [](AttentionCase& c) {
    c.padding = 5; c.seqlen_q = 40; c.seqlen_k = 77; c.heads_q = 2; c.softcap = 8.0f;
  });
  // FlashAttention-3's (batch, heads_kv) for all three, plain and broadcast over the batch.
  add({Form::per_kv_head, Form::per_kv_head}, [](AttentionCase& c) {
    c.batch = 3; c.seqlen_q = 33; c.seqlen_k = 200; c.heads_q = 6; c.heads_kv = 2;
    c.softcap = 20.0f;
  });
  add({Form::per_kv_head, Form::per_kv_head, 0, 0, true}, [](AttentionCase& c) {
    c.batch = 3; c.seqlen_q = 50; c.seqlen_k = 50; c.heads_q = 4; c.heads_kv = 2; c.causal = true;
    c.input_scale = 4.0;
  });
  // q per query head (with sinks), k and v per kv head.
  add({Form::per_query_head, Form::per_kv_head}, [](AttentionCase& c) {
    c.batch = 2; c.seqlen_q = 90; c.seqlen_k = 60; c.heads_q = 4; c.heads_kv = 2; c.causal = true;
    c.sinks = true;
  });
  add({Form::per_query_head, Form::per_tensor, 0, 0, true}, [](AttentionCase& c) {
    c.out_dtype = DType::f16; c.batch = 2; c.seqlen_q = 17; c.seqlen_k = 300; c.heads_q = 3;
    c.heads_kv = 1; c.hdim_qk = 192; c.hdim_v = 128;
  });
  // Per block: odd block sizes over odd lengths, blocks straddling tiles.
  add({Form::per_block, Form::per_block, 7, 33}, [](AttentionCase& c) {
    c.batch = 2; c.seqlen_q = 101; c.seqlen_k = 157; c.heads_q = 4; c.heads_kv = 2; c.causal = true;
  });
  add({Form::per_block, Form::per_block, 16, 128, true}, [](AttentionCase& c) {
    c.batch = 2; c.seqlen_q = 129; c.seqlen_k = 257; c.heads_q = 2; c.heads_kv = 2;
    c.hdim_qk = c.hdim_v = 128; c.seqused_q = {100, 129}; c.seqused_k = {257, 3};
  });
  add({Form::per_block, Form::per_kv_head, 1, 0}, [](AttentionCase& c) {
    c.out_dtype = DType::f32; c.seqlen_q = 30; c.seqlen_k = 45; c.heads_q = 4; c.heads_kv = 4;
    c.hdim_qk = c.hdim_v = 96; c.window_left = 10; c.window_right = 0;
  });
  add({Form::none, Form::per_block, 0, 5}, [](AttentionCase& c) {
    c.seqlen_q = 64; c.seqlen_k = 63; c.heads_q = 2; c.heads_kv = 1; c.sinks = true;
    c.softcap = 5.0f; c.input_scale = 6.0;
  });
  // Varlen: blocks counted from each sequence's first row; empty sequences.
  add({Form::per_block, Form::per_block, 13, 50}, [](AttentionCase& c) {
    c.varlen_q = {37, 0, 130, 5}; c.varlen_k = {64, 9, 200, 1}; c.heads_q = 4; c.heads_kv = 1;
    c.window_left = 40; c.window_right = 5;
  });
  add({Form::per_kv_head, Form::per_block, 0, 31, true}, [](AttentionCase& c) {
    c.out_dtype = DType::f16; c.varlen_q = {20, 77, 3}; c.varlen_k = {90, 20, 0}; c.heads_q = 4;
    c.heads_kv = 2; c.causal = true; c.seqused_q = {20, 50, 2}; c.seqused_k = {61, 20, 0};
    c.sinks = true;
  });
  add({Form::per_query_head, Form::per_kv_head}, [](AttentionCase& c) {
    c.padding = 3; c.varlen_q = {10, 50}; c.varlen_k = {60, 20}; c.heads_q = 2; c.heads_kv = 1;
    c.hdim_qk = c.hdim_v = 128; c.softcap = 10.0f;
  });
  return cases;
}

class Fp8Forward : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8Forward, MatchesFloat64OfTheDequantizedInputs) {
  AttentionData data(GetParam().attention);
  const Fp8Inputs fp8(data, GetParam().fp8);
  const ForwardExpectation expected = expected_forward(data);
  const Status status = fp8_forward(data, fp8);
  ASSERT_TRUE(status.is_ok()) << status.message();
  check_forward_results(data, expected);
}

// Dequantizing is exact but for the one fp32 product: the FP8 forward gives the bytes of the
// tiled forward over the fp32 values the codes stand for.
TEST_P(Fp8Forward, EqualsTheTiledForwardOfTheDequantizedInputs) {
  AttentionData fp8_data(GetParam().attention), f32_data(GetParam().attention);
  const Fp8Inputs fp8(fp8_data, GetParam().fp8), same_values(f32_data, GetParam().fp8);
  ASSERT_TRUE(fp8_forward(fp8_data, fp8).is_ok());
  ASSERT_TRUE(detail::cpu_backend().forward(f32_data.forward_problem()).is_ok());
  for (const auto& [fp8_out, f32_out] : {std::pair{&fp8_data.out, &f32_data.out},
                                         std::pair{&fp8_data.lse, &f32_data.lse}}) {
    ASSERT_EQ(fp8_out->storage_bytes(), f32_out->storage_bytes());
    EXPECT_EQ(0, std::memcmp(fp8_out->data(), f32_out->data(), fp8_out->storage_bytes()));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Fp8Forward, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace hfa::test

// FP8 inputs for an AttentionCase: e4m3 codes of its random q, k and v with descales in each
// form hfa.h takes, and the case's own q, k and v overwritten with what those codes dequantize
// to (code · descale in fp32). So the case's expectation (expected_forward: the float64 oracle
// and the float32 peer) is attention of the dequantized inputs, and an FP8 forward over the
// codes (options() carries the case's options and the descales) must match it.
//
// Each descale is written from a dense table of its logical values (one per sequence, block and
// head) into a strided view, and the dequantization reads the table: a backend that indexes the
// view wrongly reads other values.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "attention_case.hpp"

namespace hfa::test {

enum class DescaleForm {
  none,            // no descale: every scale is 1
  per_tensor,      // rank 1 (1)
  per_kv_head,     // rank 2 (batch, heads_kv): FlashAttention-3's; for q, one per GQA group
  per_query_head,  // rank 2 (batch, heads_q): q only
  per_block,       // rank 3 (batch, num_blocks, heads) with the spec's rows per block
};

struct Fp8Spec {
  DescaleForm q_form = DescaleForm::none;
  DescaleForm kv_form = DescaleForm::none;
  int32_t block_q = 0;  // rows per block of per_block forms
  int32_t block_kv = 0;
  // Descales as other frameworks' views: per-head ones broadcast over the batch (stride 0),
  // per-block ones transposed (heads outermost, so the last dim has stride batch · blocks).
  bool strided = false;
};

class Descale {
 public:
  Descale() = default;
  // A descale of `form` over (batch, blocks, heads), its values 2^u with u uniform in [-3, 3].
  Descale(DescaleForm form, int64_t batch, int64_t blocks, int64_t heads, bool strided,
          uint64_t seed)
      : form_(form), batch_(batch), blocks_(form == DescaleForm::per_block ? blocks : 1),
        heads_(heads) {
    if (form == DescaleForm::per_tensor) batch_ = heads_ = 1;
    const bool broadcast = strided && (form == DescaleForm::per_kv_head ||
                                       form == DescaleForm::per_query_head);
    std::mt19937_64 generator(seed);
    std::uniform_real_distribution<double> exponent(-3.0, 3.0);
    table_.resize(static_cast<std::size_t>(batch_ * blocks_ * heads_));
    for (int64_t i = 0; i < static_cast<int64_t>(table_.size()); ++i) {
      const int64_t b = i / (blocks_ * heads_);
      table_[i] = broadcast && b > 0 ? table_[i - b * blocks_ * heads_]
                                     : static_cast<float>(std::exp2(exponent(generator)));
    }
    if (form != DescaleForm::none) make_view(strided, broadcast);
  }

  const Tensor* tensor() const { return form_ == DescaleForm::none ? nullptr : &tensor_; }
  DescaleForm form() const { return form_; }

  // The scale of block `block` of head `head` (one of the descale's own heads) of sequence b.
  float at(int64_t b, int64_t block, int64_t head) const {
    if (form_ == DescaleForm::none) return 1.0f;
    if (form_ == DescaleForm::per_tensor) return table_[0];
    if (form_ != DescaleForm::per_block) block = 0;
    return table_[static_cast<std::size_t>((b * blocks_ + block) * heads_ + head)];
  }

 private:
  void make_view(bool strided, bool broadcast) {
    const bool transposed = strided && form_ == DescaleForm::per_block;
    // Element strides of (batch, block, head) in the storage.
    int64_t s_batch = blocks_ * heads_, s_block = heads_, s_head = 1;
    if (broadcast) s_batch = 0;
    if (transposed) s_batch = blocks_, s_block = 1, s_head = batch_ * blocks_;
    storage_.assign(broadcast ? table_.size() / batch_ : table_.size(), NAN);
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t k = 0; k < blocks_; ++k)
        for (int64_t h = 0; h < heads_; ++h)
          storage_[b * s_batch + k * s_block + h * s_head] = at(b, k, h);
    float* data = storage_.data();
    switch (form_) {
      case DescaleForm::per_tensor: tensor_ = make_tensor(data, DType::f32, {1}); break;
      case DescaleForm::per_block:
        tensor_ = make_tensor(data, DType::f32, {batch_, blocks_, heads_},
                              {s_batch, s_block, s_head});
        break;
      default: tensor_ = make_tensor(data, DType::f32, {batch_, heads_}, {s_batch, s_head}); break;
    }
  }

  DescaleForm form_ = DescaleForm::none;
  int64_t batch_ = 1, blocks_ = 1, heads_ = 1;
  std::vector<float> table_;    // batch × blocks × heads logical values
  std::vector<float> storage_;  // what the view points into
  Tensor tensor_{};
};

class Fp8Inputs {
 public:
  Fp8Inputs(AttentionData& data, const Fp8Spec& spec) : data_(data), spec_(spec) {
    const AttentionCase& c = data.spec();
    const int64_t sequences = c.sequences();
    auto blocks = [&](int32_t rows, int64_t longest) {
      return rows > 0 ? (longest + rows - 1) / rows + 1 : 1;  // one spare block: ">=" holds
    };
    const detail::ForwardProblem p = data.forward_problem();
    const int64_t q_heads = spec.q_form == DescaleForm::per_query_head ? c.heads_q : c.heads_kv;
    q_descale = Descale(spec.q_form, sequences, blocks(spec.block_q, p.seqlen_q), q_heads,
                        spec.strided, c.seed * 8 + 6);
    k_descale = Descale(spec.kv_form, sequences, blocks(spec.block_kv, p.seqlen_k), c.heads_kv,
                        spec.strided, c.seed * 8 + 7);
    v_descale = Descale(spec.kv_form, sequences, blocks(spec.block_kv, p.seqlen_k), c.heads_kv,
                        spec.strided, c.seed * 8 + 8);
    q = quantize(data.q, q_descale, spec.block_q, true, c.heads_q / q_heads);
    k = quantize(data.k, k_descale, spec.block_kv, false, 1);
    v = quantize(data.v, v_descale, spec.block_kv, false, 1);
    if (c.is_varlen()) {
      cu_q_ = vector_view(data.cu_seqlens_q());
      cu_k_ = vector_view(data.cu_seqlens_k());
    }
    used_q_ = vector_view(c.seqused_q);
    used_k_ = vector_view(c.seqused_k);
    sinks_ = make_tensor(data.sinks.data(), DType::f32, {static_cast<int64_t>(data.sinks.size())});
  }

  // hfa::forward's options for the case, with the descales.
  Options options() const {
    const AttentionCase& c = data_.spec();
    const detail::ForwardProblem p = data_.forward_problem();
    Options o;
    o.softmax_scale = c.softmax_scale;
    o.causal = c.causal;
    o.window_left = c.window_left;
    o.window_right = c.window_right;
    o.softcap = c.softcap;
    if (c.is_varlen()) {
      o.cu_seqlens_q = &cu_q_;
      o.cu_seqlens_k = &cu_k_;
      o.max_seqlen_q = p.seqlen_q;
      o.max_seqlen_k = p.seqlen_k;
    }
    if (!c.seqused_q.empty()) o.seqused_q = &used_q_;
    if (!c.seqused_k.empty()) o.seqused_k = &used_k_;
    if (c.sinks) o.sinks = &sinks_;
    o.q_descale = q_descale.tensor();
    o.k_descale = k_descale.tensor();
    o.v_descale = v_descale.tensor();
    o.descale_block_q = spec_.q_form == DescaleForm::per_block ? spec_.block_q : 0;
    o.descale_block_kv = spec_.kv_form == DescaleForm::per_block ? spec_.block_kv : 0;
    return o;
  }

  HostTensor q, k, v;  // e4m3, shaped and padded like the case's
  Descale q_descale, k_descale, v_descale;

 private:
  static Tensor vector_view(const std::vector<int32_t>& values) {
    return make_tensor(const_cast<int32_t*>(values.data()), DType::i32,
                       {static_cast<int64_t>(values.size())});
  }

  // Codes of `values` (rounded to the nearest e4m3 of value / scale), and `values` overwritten
  // with code · scale. Row r of sequence b, head h uses block r / block_rows and the
  // descale's head h / head_divisor.
  HostTensor quantize(HostTensor& values, const Descale& descale, int32_t block_rows,
                      bool queries, int64_t head_divisor) const {
    const AttentionCase& c = data_.spec();
    HostTensor codes(DType::e4m3, values.shape(), c.padding);
    const int64_t heads = values.shape().end()[-2], dim = values.shape().back();
    const std::vector<int32_t>& cu = queries ? data_.cu_seqlens_q() : data_.cu_seqlens_k();
    const int64_t seqlen = queries ? c.seqlen_q : c.seqlen_k;
    for (int64_t b = 0; b < c.sequences(); ++b) {
      const int64_t first = c.is_varlen() ? cu[b] : b * seqlen;
      const int64_t rows = c.is_varlen() ? cu[b + 1] - cu[b] : seqlen;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t block = block_rows > 0 ? r / block_rows : 0;
        for (int64_t h = 0; h < heads; ++h) {
          const float scale = descale.at(b, block, h / head_divisor);
          for (int64_t i = ((first + r) * heads + h) * dim, end = i + dim; i < end; ++i) {
            codes.set(i, values.get(i) / scale);
            values.set(i, static_cast<float>(codes.get(i)) * scale);
          }
        }
      }
    }
    return codes;
  }

  AttentionData& data_;
  Fp8Spec spec_;
  Tensor cu_q_{}, cu_k_{}, used_q_{}, used_k_{}, sinks_{};
};

}  // namespace hfa::test

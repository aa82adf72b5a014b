// FP8 (e4m3) inputs on the CPU: every code of q, k and v is decoded and multiplied by its
// descale (src/quant's FP8 codec: value = e4m3 · scale, one correctly rounded fp32 product) into
// fp32 copies, and the tiled forward attends over those with every option it has.
//
// This is the oracle of the GPU's FP8 kernels, so the dequantization is exact but for that one
// fp32 rounding (a decoded code is exact in fp32): nothing is rounded to a 16-bit type on the
// way, and the result differs from the GPU's only by the GPU's own arithmetic.
#include <cstdint>
#include <vector>

#include "cpu/sequence.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/tiled_attention.hpp"
#include "quant/fp8_kv.hpp"

namespace hfa::cpu {
namespace {

using detail::ForwardProblem;
using detail::Strides;

// One e4m3 input of the problem and where its fp32 copy goes.
struct Fp8Input {
  const void* codes;
  Strides strides;
  detail::ScaleView descale;
  bool queries;  // q (rows of seqlen_q), else k or v (rows of seqlen_k)
  int64_t heads;
  int64_t dim;
};

// An input in fp32, contiguous (tokens, heads, dim) with the e4m3 tensor's token numbering
// (b · seqlen + row for fixed length, the cu_seqlens offsets for varlen).
struct Dequantized {
  std::vector<float> values;
  Strides strides;
};

Dequantized dequantize(const ForwardProblem& p, const Fp8Input& in) {
  const int64_t seqlen = in.queries ? p.seqlen_q : p.seqlen_k;
  const int64_t tokens = p.is_varlen() ? (in.queries ? p.total_q : p.total_k) : p.batch * seqlen;
  const int64_t row_floats = in.heads * in.dim;
  Dequantized result;
  result.values.resize(static_cast<std::size_t>(tokens * row_floats));
  result.strides = {p.is_varlen() ? 0 : seqlen * row_floats, row_floats, in.dim};
  // No tokens (no keys, say): the copy has no data, and the attention computes row addresses it
  // never reads from that null pointer; with zero strides they stay null, not null + offset.
  if (tokens == 0) result.strides = {};
  // Only the rows that take part (seqused): the others are never read, here or on a GPU.
  ThreadPool::shared().parallel_for(int64_t{p.batch} * in.heads, [&](int64_t item, int) {
    const int64_t b = item / in.heads, h = item % in.heads;
    const Sequence seq = sequence_of(p, b);
    const int64_t begin = in.queries ? seq.q_begin : seq.k_begin;
    const int64_t rows = in.queries ? seq.seqlen_q : seq.seqlen_k;
    if (rows == 0) return;  // nothing to copy, and maybe no copy (null data) to point into
    const auto source = rows_of(in.codes, DType::e4m3, in.strides, b, begin, h);
    float* target = result.values.data() + b * result.strides.batch + begin * row_floats +
                    h * in.dim;
    for (int64_t r = 0; r < rows; ++r) {
      const auto* codes = reinterpret_cast<const uint8_t*>(source.row(r));
      const float scale = detail::scale_at(in.descale, int(b), int(r), int(h));
      float* values = target + r * row_floats;
      for (int64_t c = 0; c < in.dim; ++c) values[c] = quant::fp8_kv_decode(codes[c], scale);
    }
  });
  return result;
}

}  // namespace

Status fp8_forward(const ForwardProblem& p) {
  const Dequantized q = dequantize(p, {p.q, p.q_stride, p.q_descale, true, p.heads_q, p.hdim_qk});
  const Dequantized k =
      dequantize(p, {p.k, p.k_stride, p.k_descale, false, p.heads_kv, p.hdim_qk});
  const Dequantized v =
      dequantize(p, {p.v, p.v_stride, p.v_descale, false, p.heads_kv, p.hdim_v});
  ForwardProblem f32 = p;
  f32.dtype = DType::f32;
  f32.q = q.values.data();
  f32.k = k.values.data();
  f32.v = v.values.data();
  f32.q_stride = q.strides;
  f32.k_stride = k.strides;
  f32.v_stride = v.strides;
  f32.q_descale = f32.k_descale = f32.v_descale = {};
  return tiled_forward(f32);
}

}  // namespace hfa::cpu

// hfa_merge_partials on the CPU, the GPU's oracle: each row's weights and LSE as the GPU takes
// them (merge_row, common/merge_partials.hpp), then Σ weight_k · out_k in fp32 over the live
// partials, in partial order. A row reads all its inputs before it writes, so an output that is
// the very view of an input (an in-place merge) reads its old values.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu/kvcache_rows.hpp"
#include "cpu/operations.hpp"
#include "cpu/thread_pool.hpp"

namespace hfa::cpu {
namespace {

using detail::MergePartialsProblem;
using detail::MergeRow;
using detail::RowAt;

// Output values a pool item merges: enough to outweigh handing the item out.
constexpr int64_t kValuesPerItem = int64_t{1} << 14;

// Element `offset` of a tensor of `dtype` at `base` (void or const void).
template <typename Void>
auto element_at(Void* base, DType dtype, int64_t offset) {
  using Byte = std::conditional_t<std::is_const_v<Void>, const std::byte, std::byte>;
  return static_cast<Byte*>(base) + offset * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace

Status merge_partials(const MergePartialsProblem& p) {
  const int64_t d = p.hdim;
  const int64_t rows_per_item = std::max<int64_t>(1, kValuesPerItem / std::max<int64_t>(1, d));
  const int64_t items = (p.rows() + rows_per_item - 1) / rows_per_item;
  const std::size_t row_floats = scratch_floats(static_cast<std::size_t>(d));
  ThreadPool::shared().parallel_for(items, [&](int64_t item, int) {
    float* sum = thread_scratch(2 * row_floats);
    float* values = sum + row_floats;
    const int64_t end = std::min(p.rows(), (item + 1) * rows_per_item);
    for (int64_t r = item * rows_per_item; r < end; ++r) {
      const RowAt at = row_at(p, r);
      const MergeRow row = merge_row(p, at);
      if (p.lse != nullptr) p.lse[offset_of(p.lse_stride, at.b, at.i, at.h)] = row.lse;
      if (d == 0) continue;
      std::fill(sum, sum + d, 0.0f);
      for (int k = 0; k < p.num_partials; ++k) {
        if ((row.live >> k & 1u) == 0) continue;
        const MergePartialsProblem::Partial& part = p.partials[k];
        const int64_t offset = offset_of(part.out_stride, at.b, at.i, at.h);
        load_plain_row(part.dtype, element_at(part.out, part.dtype, offset), d, values);
        for (int64_t c = 0; c < d; ++c) sum[c] += row.weight[k] * values[c];
      }
      const int64_t offset = offset_of(p.out_stride, at.b, at.i, at.h);
      store_plain_row(p.out_dtype, sum, d, element_at(p.out, p.out_dtype, offset));
    }
  });
  return Status::ok();
}

}  // namespace hfa::cpu

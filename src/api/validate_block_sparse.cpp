// One validator for FlexAttention's BlockMask layout (hfa/options.def, kv_num_blocks ...):
// shapes against the problem, dtype, device, and on the CPU the values, each failure naming the
// argument, so that a backend reads nothing out of range.
#include "api/validate_block_sparse.hpp"

#include <cstdint>
#include <vector>

#include "api/validate.hpp"

namespace hfa::detail {
namespace {

int64_t blocks_of(int64_t length, int64_t block) { return (length + block - 1) / block; }

// What the mask covers: each sequence at fixed length; with cu_seqlens the packed tokens as one
// sequence (BlockSparse::packed), a mask batch of 1.
struct MaskExtent {
  int64_t batch, rows, keys;
  const char *rows_name, *keys_name;  // for messages
};

MaskExtent extent_of(const ForwardProblem& p) {
  if (p.is_varlen()) return {1, p.total_q, p.total_k, "total_q", "total_k"};
  return {p.batch, p.seqlen_q, p.seqlen_k, "seqlen_q", "seqlen_k"};
}

// A tensor of rank `rank` whose dims are (batch | 1, heads_q | 1, q_blocks >= need_q, last),
// `last` < 0: any; with cu_seqlens its batch is 1. Its view (stride 0 over an extent-1 dim) goes
// to *view.
Status check_block_tensor(const char* name, const Tensor* t, int rank, const char* layout,
                          const ForwardProblem& p, const MaskExtent& mask, int64_t need_q,
                          int64_t last, const Tensor& q, BlockIndexView* view) {
  HFA_RETURN_IF_ERROR(check_tensor_form(name, t, rank, layout, false));
  if (t->dtype != HFA_I32) return invalid(name, "expected dtype i32, got ", dtype_name(
                                              static_cast<DType>(t->dtype)));
  HFA_RETURN_IF_ERROR(check_same_device(name, *t, q));
  const int64_t batch = t->shape[0], heads = t->shape[1], q_blocks = t->shape[2];
  if (p.is_varlen() && batch != 1)
    return invalid(name, "dim 0 must be 1 with cu_seqlens (one mask over the packed sequences, "
                   "FlexAttention's batch of 1), got ", tensor_shape_string(*t), " ", layout);
  if (batch != 1 && batch != mask.batch)
    return invalid(name, "dim 0 must be the batch (", mask.batch, ") or 1, got ",
                   tensor_shape_string(*t), " ", layout);
  if (heads != 1 && heads != p.heads_q)
    return invalid(name, "dim 1 must be heads_q (", p.heads_q, ") or 1, got ",
                   tensor_shape_string(*t), " ", layout);
  if (q_blocks < need_q)
    return invalid(name, "dim 2 must count at least ceil(", mask.rows_name,
                   " / sparse_block_q) = ", need_q, " query blocks, got ",
                   tensor_shape_string(*t), " ", layout);
  if (last >= 0 && t->shape[3] != last)
    return invalid(name, "dim 3 must be ", last, ", got ", tensor_shape_string(*t), " ", layout);
  view->data = static_cast<const int32_t*>(t->data);
  for (int d = 0; d < rank; ++d) view->stride[d] = t->shape[d] == 1 ? 0 : t->stride[d];
  return Status::ok();
}

// Counts in [0, slots], indices in [0, kv_blocks), and no key block twice in a row of blocks
// (the partial and full lists together): a repeated block would be counted twice.
Status check_values(const ForwardProblem& p, const MaskExtent& mask, const BlockSparse& s,
                    int64_t need_q, int64_t kv_blocks, int64_t slots, int64_t full_slots) {
  std::vector<int64_t> seen(static_cast<std::size_t>(kv_blocks), -1);
  int64_t row = 0;  // a stamp per row of blocks, so that `seen` is never cleared
  struct List {
    const char* count_name;
    const char* index_name;
    BlockIndexView counts, indices;
    int64_t slots;
  };
  const List lists[] = {
      {"kv_num_blocks", "kv_indices", s.kv_num_blocks, s.kv_indices, slots},
      {"full_kv_num_blocks", "full_kv_indices", s.full_kv_num_blocks, s.full_kv_indices,
       full_slots}};
  for (int64_t b = 0; b < mask.batch; ++b) {
    for (int64_t h = 0; h < p.heads_q; ++h) {
      for (int64_t m = 0; m < need_q; ++m, ++row) {
        for (const List& list : lists) {
          if (!list.counts) continue;
          const int32_t count = *list.counts.at(b, h, m);
          if (count < 0 || count > list.slots)
            return invalid(list.count_name, "element (", b, ", ", h, ", ", m, ") = ", count,
                           " is outside [0, ", list.slots, "] (the slots of ", list.index_name,
                           ")");
          for (int32_t k = 0; k < count; ++k) {
            const int32_t index = *list.indices.at(b, h, m, k);
            if (index < 0 || index >= kv_blocks)
              return invalid(list.index_name, "element (", b, ", ", h, ", ", m, ", ", k,
                             ") = ", index, " is outside [0, ", kv_blocks, ") (ceil(",
                             mask.keys_name, " / sparse_block_kv))");
            if (seen[index] == row)
              return invalid(list.index_name, "element (", b, ", ", h, ", ", m, ", ", k,
                             "): key block ", index,
                             " is listed twice for this query block (in kv_indices and "
                             "full_kv_indices together)");
            seen[index] = row;
          }
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status attach_block_sparse(const Options& options, const Tensor& q, ForwardProblem* p) {
  if (options.kv_num_blocks == nullptr) {
    const std::pair<const char*, const Tensor*> others[] = {
        {"kv_indices", options.kv_indices}, {"full_kv_num_blocks", options.full_kv_num_blocks},
        {"full_kv_indices", options.full_kv_indices}, {"kv_mask_bits", options.kv_mask_bits}};
    for (const auto& [name, t] : others)
      if (t != nullptr) return invalid(name, "is given but kv_num_blocks is null");
    return Status::ok();
  }
  if (options.kv_indices == nullptr)
    return invalid("kv_indices", "is null but kv_num_blocks is given");
  if (options.kv_mask_bits == nullptr)
    return invalid("kv_mask_bits", "is null but kv_num_blocks is given (a partial block needs "
                   "its bits; a block without a mask is a full block)");
  if ((options.full_kv_num_blocks == nullptr) != (options.full_kv_indices == nullptr))
    return options.full_kv_indices == nullptr
               ? invalid("full_kv_indices", "is null but full_kv_num_blocks is given")
               : invalid("full_kv_num_blocks", "is null but full_kv_indices is given");

  BlockSparse s;
  s.block_q = options.sparse_block_q;
  s.block_kv = options.sparse_block_kv;
  s.words_per_row = static_cast<int32_t>(blocks_of(s.block_kv, 32));
  s.packed = p->is_varlen();
  const MaskExtent mask = extent_of(*p);
  const int64_t need_q = blocks_of(mask.rows, s.block_q);
  const int64_t kv_blocks = blocks_of(mask.keys, s.block_kv);
  auto check = [&](const char* name, const Tensor* t, int rank, const char* layout,
                   int64_t last, BlockIndexView* view) {
    return check_block_tensor(name, t, rank, layout, *p, mask, need_q, last, q, view);
  };
  const char* counts = "(batch, heads_q, q_blocks)";
  const char* lists = "(batch, heads_q, q_blocks, slots)";
  HFA_RETURN_IF_ERROR(check("kv_num_blocks", options.kv_num_blocks, 3, counts, -1,
                            &s.kv_num_blocks));
  HFA_RETURN_IF_ERROR(check("kv_indices", options.kv_indices, 4, lists, -1, &s.kv_indices));
  const int64_t slots = options.kv_indices->shape[3];
  s.slots = slots;
  // block_q·words_per_row < 2^57; times the slots it could pass int64's range.
  const int64_t block_words = int64_t{s.block_q} * s.words_per_row;
  if (slots > 0 && block_words > INT64_MAX / slots)
    return invalid("kv_mask_bits", "would hold ", slots, " x ", block_words,
                   " words a query block: more than any tensor can");
  HFA_RETURN_IF_ERROR(check(
      "kv_mask_bits", options.kv_mask_bits, 4,
      "(batch, heads_q, q_blocks, slots * sparse_block_q * ceil(sparse_block_kv / 32))",
      slots * block_words, &s.kv_mask_bits));
  int64_t full_slots = 0;
  if (options.full_kv_num_blocks != nullptr) {
    HFA_RETURN_IF_ERROR(check("full_kv_num_blocks", options.full_kv_num_blocks, 3, counts, -1,
                              &s.full_kv_num_blocks));
    HFA_RETURN_IF_ERROR(check("full_kv_indices", options.full_kv_indices, 4, lists, -1,
                              &s.full_kv_indices));
    full_slots = options.full_kv_indices->shape[3];
  }
  // The values are read where they can be without a copy; a GPU would trust them.
  if (q.device == HFA_CPU)
    HFA_RETURN_IF_ERROR(check_values(*p, mask, s, need_q, kv_blocks, slots, full_slots));
  p->block_sparse = s;
  return Status::ok();
}

}  // namespace hfa::detail

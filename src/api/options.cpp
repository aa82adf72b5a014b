#include "api/options.hpp"

namespace hfa {
namespace {

// The fields every options struct has (forward, backward, kvcache), under the same names in C
// and C++ (whatever their place in the C struct).
template <typename CppOptions, typename COptions>
void common_to_c(const CppOptions& options, COptions& c) {
  c.has_softmax_scale = options.softmax_scale.has_value() ? 1 : 0;
  c.softmax_scale = options.softmax_scale.value_or(0.0f);
  c.causal = options.causal ? 1 : 0;
  c.window_left = options.window_left;
  c.window_right = options.window_right;
  c.softcap = options.softcap;
  c.stream = options.stream;
  c.workspace = options.workspace;
  c.workspace_bytes = options.workspace_bytes;
  c.sm_margin = options.sm_margin;
}

template <typename COptions, typename CppOptions>
void common_from_c(const COptions& c, CppOptions& options) {
  if (c.has_softmax_scale) options.softmax_scale = c.softmax_scale;
  options.causal = c.causal != 0;
  options.window_left = c.window_left;
  options.window_right = c.window_right;
  options.softcap = c.softcap;
  options.stream = c.stream;
  options.workspace = c.workspace;
  options.workspace_bytes = c.workspace_bytes;
  options.sm_margin = c.sm_margin;
}

}  // namespace

hfa_options to_c(const Options& options) {
  hfa_options c = detail::default_c_options();
  common_to_c(options, c);
  c.cu_seqlens_q = options.cu_seqlens_q;
  c.cu_seqlens_k = options.cu_seqlens_k;
  c.max_seqlen_q = options.max_seqlen_q;
  c.max_seqlen_k = options.max_seqlen_k;
  c.deterministic = options.deterministic ? 1 : 0;
  c.sinks = options.sinks;
  c.seqused_q = options.seqused_q;
  c.seqused_k = options.seqused_k;
  c.dsinks = options.dsinks;
  c.q_descale = options.q_descale;
  c.k_descale = options.k_descale;
  c.v_descale = options.v_descale;
  c.descale_block_q = options.descale_block_q;
  c.descale_block_kv = options.descale_block_kv;
  c.accumulate = options.accumulate ? 1 : 0;
  c.softmax_d = options.softmax_d;
  return c;
}

hfa_kvcache_options to_c(const KVCacheOptions& options) {
  hfa_kvcache_options c = detail::default_c_kvcache_options();
  c.cache_seqlens = options.cache_seqlens;
  c.block_table = options.block_table;
  c.k_scale = options.k_scale;
  c.v_scale = options.v_scale;
  c.k_global_scale = options.k_global_scale;
  c.v_global_scale = options.v_global_scale;
  common_to_c(options, c);
  c.num_splits = options.num_splits;
  c.validate = options.validate ? 1 : 0;
  c.k_new = options.k_new;
  c.v_new = options.v_new;
  c.rotary_cos = options.rotary_cos;
  c.rotary_sin = options.rotary_sin;
  c.rotary_interleaved = options.rotary_interleaved ? 1 : 0;
  c.split_size = options.split_size;
  c.cu_seqlens_q = options.cu_seqlens_q;
  c.max_seqlen_q = options.max_seqlen_q;
  c.cu_seqlens_k_new = options.cu_seqlens_k_new;
  return c;
}

namespace detail {

hfa_kvcache_options default_c_kvcache_options() {
  hfa_kvcache_options c{};  // zero: no tensors, no scale override, not causal, auto splits
  c.window_left = -1;
  c.window_right = -1;
  return c;
}

KVCacheOptions from_c(const hfa_kvcache_options& c) {
  KVCacheOptions options;
  options.cache_seqlens = c.cache_seqlens;
  options.block_table = c.block_table;
  options.k_scale = c.k_scale;
  options.v_scale = c.v_scale;
  options.k_global_scale = c.k_global_scale;
  options.v_global_scale = c.v_global_scale;
  common_from_c(c, options);
  options.num_splits = c.num_splits;
  options.validate = c.validate != 0;
  options.k_new = c.k_new;
  options.v_new = c.v_new;
  options.rotary_cos = c.rotary_cos;
  options.rotary_sin = c.rotary_sin;
  options.rotary_interleaved = c.rotary_interleaved != 0;
  options.split_size = c.split_size;
  options.cu_seqlens_q = c.cu_seqlens_q;
  options.max_seqlen_q = c.max_seqlen_q;
  options.cu_seqlens_k_new = c.cu_seqlens_k_new;
  return options;
}

hfa_options default_c_options() {
  hfa_options c{};  // zero: no scale override, not causal, no softcap, fixed length
  c.window_left = -1;
  c.window_right = -1;
  return c;
}

Options from_c(const hfa_options& c) {
  Options options;
  common_from_c(c, options);
  options.cu_seqlens_q = c.cu_seqlens_q;
  options.cu_seqlens_k = c.cu_seqlens_k;
  options.max_seqlen_q = c.max_seqlen_q;
  options.max_seqlen_k = c.max_seqlen_k;
  options.deterministic = c.deterministic != 0;
  options.sinks = c.sinks;
  options.seqused_q = c.seqused_q;
  options.seqused_k = c.seqused_k;
  options.dsinks = c.dsinks;
  options.q_descale = c.q_descale;
  options.k_descale = c.k_descale;
  options.v_descale = c.v_descale;
  options.descale_block_q = c.descale_block_q;
  options.descale_block_kv = c.descale_block_kv;
  options.accumulate = c.accumulate != 0;
  options.softmax_d = c.softmax_d;
  return options;
}

}  // namespace detail
}  // namespace hfa

#include "api/options.hpp"

namespace hfa {

hfa_options to_c(const Options& options) {
  hfa_options c = detail::default_c_options();
  c.has_softmax_scale = options.softmax_scale.has_value() ? 1 : 0;
  c.softmax_scale = options.softmax_scale.value_or(0.0f);
  c.causal = options.causal ? 1 : 0;
  c.window_left = options.window_left;
  c.window_right = options.window_right;
  c.softcap = options.softcap;
  c.cu_seqlens_q = options.cu_seqlens_q;
  c.cu_seqlens_k = options.cu_seqlens_k;
  c.max_seqlen_q = options.max_seqlen_q;
  c.max_seqlen_k = options.max_seqlen_k;
  c.deterministic = options.deterministic ? 1 : 0;
  c.stream = options.stream;
  c.workspace = options.workspace;
  c.workspace_bytes = options.workspace_bytes;
  c.sinks = options.sinks;
  c.seqused_q = options.seqused_q;
  c.seqused_k = options.seqused_k;
  c.dsinks = options.dsinks;
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
  c.has_softmax_scale = options.softmax_scale.has_value() ? 1 : 0;
  c.softmax_scale = options.softmax_scale.value_or(0.0f);
  c.causal = options.causal ? 1 : 0;
  c.window_left = options.window_left;
  c.window_right = options.window_right;
  c.softcap = options.softcap;
  c.num_splits = options.num_splits;
  c.validate = options.validate ? 1 : 0;
  c.stream = options.stream;
  c.workspace = options.workspace;
  c.workspace_bytes = options.workspace_bytes;
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
  if (c.has_softmax_scale) options.softmax_scale = c.softmax_scale;
  options.causal = c.causal != 0;
  options.window_left = c.window_left;
  options.window_right = c.window_right;
  options.softcap = c.softcap;
  options.num_splits = c.num_splits;
  options.validate = c.validate != 0;
  options.stream = c.stream;
  options.workspace = c.workspace;
  options.workspace_bytes = c.workspace_bytes;
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
  if (c.has_softmax_scale) options.softmax_scale = c.softmax_scale;
  options.causal = c.causal != 0;
  options.window_left = c.window_left;
  options.window_right = c.window_right;
  options.softcap = c.softcap;
  options.cu_seqlens_q = c.cu_seqlens_q;
  options.cu_seqlens_k = c.cu_seqlens_k;
  options.max_seqlen_q = c.max_seqlen_q;
  options.max_seqlen_k = c.max_seqlen_k;
  options.deterministic = c.deterministic != 0;
  options.stream = c.stream;
  options.workspace = c.workspace;
  options.workspace_bytes = c.workspace_bytes;
  options.sinks = c.sinks;
  options.seqused_q = c.seqused_q;
  options.seqused_k = c.seqused_k;
  options.dsinks = c.dsinks;
  return options;
}

}  // namespace detail
}  // namespace hfa

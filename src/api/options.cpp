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

namespace detail {

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

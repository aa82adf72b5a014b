#include "spec.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace hfa::tool {

float Spec::softmax_scale() const { return 1.0f / std::sqrt(static_cast<float>(hdim)); }

Options Spec::options() const {
  Options options;
  options.causal = causal;
  options.window_left = window_left;
  options.window_right = window_right;
  options.softcap = softcap;
  return options;
}

std::string Spec::describe() const {
  std::ostringstream s;
  s << dtype_name(dtype) << ", batch " << batch << ", heads " << heads;
  if (kv_heads != heads) s << "/" << kv_heads;
  s << ", seqlen " << seqlen_q;
  if (seqlen_k != seqlen_q) s << "/" << seqlen_k;
  s << ", hdim " << hdim;
  if (hdim_v != hdim) s << "/" << hdim_v;
  if (causal) s << ", causal";
  if (window_left >= 0 || window_right >= 0) s << ", window (" << window_left << ", " << window_right << ")";
  if (softcap > 0) s << ", softcap " << softcap;
  if (sinks) s << ", sinks";
  return s.str();
}

DType parse_dtype(const std::string& text) {
  if (text == "bf16") return DType::bf16;
  if (text == "f16") return DType::f16;
  return DType::f32;  // Args::choice let only f16, bf16 and f32 through
}

Device parse_device(Args& args) {
  const std::string kind = args.choice("device", "auto", {"auto", "cpu", "cuda"});
  if (kind == "cpu") return Device::cpu();
  const int32_t count = cuda_device_count();
  if (kind == "auto") return count > 0 ? Device::cuda(0) : Device::cpu();
  if (count == 0)
    throw UsageError("--device cuda: no CUDA device is available to this build");
  return Device::cuda(0);
}

void parse_spec(Args& args, Spec* spec) {
  constexpr int64_t kMaxExtent = int64_t{1} << 30;
  spec->batch = args.integer("batch", spec->batch, 0, kMaxExtent);
  spec->heads = args.integer("heads", spec->heads, 1, 4096);
  spec->kv_heads = args.integer("kv-heads", spec->heads, 1, 4096);
  if (spec->heads % spec->kv_heads != 0)
    throw UsageError("--kv-heads: " + std::to_string(spec->kv_heads) + " must divide --heads " +
                     std::to_string(spec->heads));
  const int64_t seqlen = args.integer("seqlen", spec->seqlen_q, 0, kMaxExtent);
  spec->seqlen_q = args.integer("seqlen-q", seqlen, 0, kMaxExtent);
  spec->seqlen_k = args.integer("seqlen-k", seqlen, 0, kMaxExtent);
  spec->hdim = args.integer("hdim", spec->hdim, 1, 1024);
  spec->hdim_v = args.integer("hdim-v", spec->hdim, 1, 1024);
  spec->dtype = parse_dtype(args.choice("dtype", dtype_name(spec->dtype), {"bf16", "f16", "f32"}));
  spec->causal = args.flag("causal");
  if (const auto window = args.value("window")) {
    const std::size_t comma = window->find(',');
    if (comma == std::string::npos)
      throw UsageError("--window: expected L,R (-1 = unbounded), got '" + *window + "'");
    spec->window_left = static_cast<int32_t>(parse_integer("--window", window->substr(0, comma), -1, kMaxExtent));
    spec->window_right = static_cast<int32_t>(parse_integer("--window", window->substr(comma + 1), -1, kMaxExtent));
  }
  spec->softcap = static_cast<float>(args.number("softcap", 0.0, 0.0, 1e6));
  spec->sinks = args.flag("sinks");
}

int64_t visible_pairs(int64_t seqlen_q, int64_t seqlen_k, bool causal, int32_t window_left,
                      int32_t window_right) {
  const int64_t right = causal ? 0 : window_right;
  int64_t pairs = 0;
  for (int64_t i = 0; i < seqlen_q; ++i) {
    const int64_t diagonal = i + seqlen_k - seqlen_q;  // bottom-right aligned
    const int64_t first = window_left < 0 ? 0 : std::max<int64_t>(0, diagonal - window_left);
    const int64_t last = right < 0 ? seqlen_k - 1 : std::min(seqlen_k - 1, diagonal + right);
    pairs += std::max<int64_t>(0, last - first + 1);
  }
  return pairs;
}

double forward_flops(const Spec& s) {
  const double pairs = static_cast<double>(
      visible_pairs(s.seqlen_q, s.seqlen_k, s.causal, s.window_left, s.window_right));
  return 2.0 * static_cast<double>(s.batch) * s.heads * pairs * (s.hdim + s.hdim_v);
}

}  // namespace hfa::tool

#include "spec.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

namespace hfa::tool {

namespace {
int64_t start(const std::vector<int64_t>& lengths, int64_t fixed, int64_t b) {
  if (lengths.empty()) return b * fixed;
  int64_t sum = 0;
  for (int64_t i = 0; i < b; ++i) sum += lengths[i];
  return sum;
}
}  // namespace

int64_t Spec::start_q(int64_t b) const { return start(varlen_q, seqlen_q, b); }
int64_t Spec::start_k(int64_t b) const { return start(varlen_k, seqlen_k, b); }

KeyRange Spec::mask_keys(int64_t b, int64_t i) const {
  if (!block_mask) return {0, seqlen_k_of(b) - 1};
  const KeyRange keys = block_mask.keys(mask_row(b) + i);
  return {keys.first - mask_key(b), keys.last - mask_key(b)};
}

float Spec::softmax_scale() const {
  return rows.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(hdim)));
}

Options Spec::options() const {
  Options options = rows;
  options.causal = causal;
  options.window_left = window_left;
  options.window_right = window_right;
  options.softcap = softcap;
  options.sm_margin = sm_margin;
  return options;
}

std::string Spec::describe() const {
  std::ostringstream s;
  const auto list = [&](const std::vector<int64_t>& lengths) {  // one length when all are equal
    const bool same = std::adjacent_find(lengths.begin(), lengths.end(), std::not_equal_to<>()) == lengths.end();
    for (std::size_t i = 0; i < (same ? 1 : lengths.size()); ++i) s << (i ? "," : "") << lengths[i];
  };
  s << dtype_name(dtype) << ", batch " << batch << ", heads " << heads;
  if (kv_heads != heads) s << "/" << kv_heads;
  if (varlen_q.empty()) {
    s << ", seqlen " << seqlen_q;
  } else {
    s << ", varlen ";
    list(varlen_q);
  }
  if (!varlen_k.empty() && varlen_k != varlen_q) {
    s << (varlen_q.empty() ? ", cache " : " / ");
    list(varlen_k);
  } else if (varlen_k.empty() && seqlen_k != seqlen_q) {
    s << "/" << seqlen_k;
  }
  s << ", hdim " << hdim;
  if (hdim_v != hdim) s << "/" << hdim_v;
  if (causal) s << ", causal";
  if (window_left >= 0 || window_right >= 0) s << ", window (" << window_left << ", " << window_right << ")";
  if (softcap > 0) s << ", softcap " << softcap;
  if (sinks) s << ", sinks";
  if (sm_margin > 0) s << ", sm_margin " << sm_margin;
  if (block_mask)
    s << ", block mask " << block_mask.describe() << " (" << rows.sparse_block_q << " x "
      << rows.sparse_block_kv << ")";
  return s.str();
}

DType parse_dtype(const std::string& text) {
  if (text == "bf16") return DType::bf16;
  if (text == "f16") return DType::f16;
  if (text == "e4m3") return DType::e4m3;  // FP8 inputs (scales 1), out bf16
  return DType::f32;  // Args::choice let only f16, bf16, e4m3 and f32 through
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
  spec->varlen_q = args.integers("varlen", {}, 0, kMaxExtent);
  spec->varlen_k = args.integers("varlen-k", spec->varlen_q, 0, kMaxExtent);
  if (!spec->varlen_k.empty() && spec->varlen_q.empty())
    throw UsageError("--varlen-k: needs --varlen (the query lengths)");
  if (spec->varlen_k.size() != spec->varlen_q.size())
    throw UsageError("--varlen-k: " + std::to_string(spec->varlen_k.size()) + " lengths for the " +
                     std::to_string(spec->varlen_q.size()) + " sequences of --varlen");
  if (!spec->varlen_q.empty()) {
    for (const char* fixed : {"batch", "seqlen", "seqlen-q", "seqlen-k"})
      if (args.value(fixed))
        throw UsageError(std::string("--varlen: gives the batch and the lengths; drop --") + fixed);
    for (const auto* lengths : {&spec->varlen_q, &spec->varlen_k}) {
      int64_t total = 0;
      for (int64_t n : *lengths) total += n;
      if (total > INT32_MAX)  // cu_seqlens are int32
        throw UsageError(std::string(lengths == &spec->varlen_q ? "--varlen" : "--varlen-k") +
                         ": " + std::to_string(total) + " tokens in all, more than int32 cu_seqlens hold");
    }
    spec->batch = static_cast<int64_t>(spec->varlen_q.size());
  }
  spec->batch = args.integer("batch", spec->batch, 0, kMaxExtent);
  spec->heads = args.integer("heads", spec->heads, 1, 4096);
  spec->kv_heads = args.integer("kv-heads", spec->heads, 1, 4096);
  if (spec->heads % spec->kv_heads != 0)
    throw UsageError("--kv-heads: " + std::to_string(spec->kv_heads) + " must divide --heads " +
                     std::to_string(spec->heads));
  const int64_t seqlen = args.integer("seqlen", spec->seqlen_q, 0, kMaxExtent);
  spec->seqlen_q = args.integer("seqlen-q", seqlen, 0, kMaxExtent);
  spec->seqlen_k = args.integer("seqlen-k", seqlen, 0, kMaxExtent);
  if (!spec->varlen_q.empty()) {  // the longest sequences
    spec->seqlen_q = *std::max_element(spec->varlen_q.begin(), spec->varlen_q.end());
    spec->seqlen_k = *std::max_element(spec->varlen_k.begin(), spec->varlen_k.end());
  }
  spec->hdim = args.integer("hdim", spec->hdim, 1, 1024);
  spec->hdim_v = args.integer("hdim-v", spec->hdim, 1, 1024);
  spec->dtype = parse_dtype(args.choice("dtype", dtype_name(spec->dtype), {"bf16", "f16", "f32", "e4m3"}));
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
  // The upper bound is the GPU's SM count, which the library checks (naming sm_margin).
  spec->sm_margin = static_cast<int32_t>(args.integer("sm-margin", 0, 0, 1 << 20));
  if (const auto mask = args.value("block-mask")) spec->block_mask = parse_block_mask(*mask);
}

int64_t visible_pairs(int64_t seqlen_q, int64_t seqlen_k, bool causal, int32_t window_left,
                      int32_t window_right, const RowKeys& row_keys) {
  const int64_t right = causal ? 0 : window_right;
  int64_t pairs = 0;
  for (int64_t i = 0; i < seqlen_q; ++i) {
    const int64_t diagonal = i + seqlen_k - seqlen_q;  // bottom-right aligned
    int64_t first = window_left < 0 ? 0 : std::max<int64_t>(0, diagonal - window_left);
    int64_t last = right < 0 ? seqlen_k - 1 : std::min(seqlen_k - 1, diagonal + right);
    if (row_keys) {
      const KeyRange mask = row_keys(i);
      first = std::max(first, mask.first), last = std::min(last, mask.last);
    }
    pairs += std::max<int64_t>(0, last - first + 1);
  }
  return pairs;
}

double forward_flops(const Spec& s) {
  auto pairs_of = [&](int64_t b) {  // sequence b's
    RowKeys mask;
    if (s.block_mask) mask = [&s, b](int64_t i) { return s.mask_keys(b, i); };
    return static_cast<double>(visible_pairs(s.seqlen_q_of(b), s.seqlen_k_of(b), s.causal,
                                             s.window_left, s.window_right, mask));
  };
  double pairs = 0;  // over the whole batch; fixed-length sequences share one mask
  if (s.varlen_q.empty() && s.varlen_k.empty())
    pairs = static_cast<double>(s.batch) * pairs_of(0);
  else
    for (int64_t b = 0; b < s.batch; ++b) pairs += pairs_of(b);
  return 2.0 * s.heads * pairs * (s.hdim + s.hdim_v);
}

}  // namespace hfa::tool

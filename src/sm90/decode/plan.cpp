// A call's plan: whether the decode kernels take it, how its keys split (the uniform plan's split
// count, or the parts of MLA's balanced schedule), how much workspace. Host-only decisions made
// from the problem's shapes and the device (never from values on the device, so a call stays
// free of host syncs: the balanced schedule itself is made on the device, schedule_kernel.cuh).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>

#include "common/environment.hpp"
#include "common/errors.hpp"
#include "common/mla.hpp"
#include "sm90/decode/append.hpp"
#include "sm90/decode/config.hpp"
#include "sm90/decode/launch.hpp"
#include "sm90/decode/mla_shape.hpp"
#include "sm90/decode/split_schedule.hpp"
#include "sm90/decode/stream_shape.hpp"
#include "sm90/device.hpp"

namespace hfa::sm90::decode {
namespace {

using detail::CacheFormat;
using detail::KVCacheProblem;

constexpr int kMaxAutoSplits = 128;
// Auto splits keep at least this many stages of keys each: shorter splits cost more in partials
// and combine than they win in parallelism.
constexpr int kMinTilesPerSplit = 4;
// FlashAttention-2's rule: the fewest splits whose wave efficiency is within 85% of the best.
constexpr double kWaveEfficiencyTolerance = 0.85;
constexpr uintptr_t kCopyAlignment = 16;  // cp.async of cache rows
constexpr uintptr_t kScaleAlignment = kScaleWordBytes;  // cp.async of scale rows
constexpr int kMaxGridYZ = 65535;

Status unsupported(const std::string& what) {
  return {Code::not_supported, "sm90 KV-cache forward: " + what + " is not supported on the GPU yet"};
}

Status unaligned(const char* name, const std::string& what, uintptr_t alignment) {
  return {Code::not_supported, std::string(name) + ": " + what + " must be a multiple of " +
                                   std::to_string(alignment) +
                                   " bytes for the GPU KV-cache forward"};
}

int code_bytes(const KVCacheProblem& p) {
  return p.format == CacheFormat::plain ? 2 : 1;  // fp16/bf16 values; FP8 and FP4 strides are in bytes
}

Status check_side(const char* name, const char* scale_name, const detail::CacheSide& side,
                  const KVCacheProblem& p) {
  const int64_t bytes = code_bytes(p);
  if (reinterpret_cast<uintptr_t>(side.data) % kCopyAlignment != 0)
    return unaligned(name, "the data address", kCopyAlignment);
  const int64_t strides[3] = {side.stride.page, side.stride.slot, side.stride.head};
  for (int64_t s : strides)
    if ((s * bytes) % int64_t(kCopyAlignment) != 0)
      return unaligned(name, "every stride (" + std::to_string(s * bytes) + " bytes)", kCopyAlignment);
  const bool row_scales = p.format == CacheFormat::fp8_per_token || p.format == CacheFormat::nvfp4 ||
                          p.format == CacheFormat::mxfp4;
  if (!row_scales) return Status::ok();
  const int64_t scale_bytes = p.format == CacheFormat::fp8_per_token ? 4 : 1;
  if (reinterpret_cast<uintptr_t>(side.scale) % kScaleAlignment != 0)
    return unaligned(scale_name, "the data address", kScaleAlignment);
  // Scale rows are copied in whole words: a row shorter than one (MXFP4 at hdim 64: 2 bytes) is
  // read from its own bytes only, but must start a word, so unpadded 2-byte rows are refused.
  const int64_t scale_strides[3] = {side.scale_stride.page, side.scale_stride.slot,
                                    side.scale_stride.head};
  for (int64_t s : scale_strides)
    if ((s * scale_bytes) % int64_t(kScaleAlignment) != 0)
      return unaligned(scale_name,
                       "every stride (" + std::to_string(s * scale_bytes) +
                           " bytes; pad shorter scale rows to a word)",
                       kScaleAlignment);
  return Status::ok();
}

int64_t row_tiles(const KVCacheProblem& p) {
  const int64_t rows = int64_t(p.heads_q / p.heads_kv) * longest_query_rows(p);
  return (rows + kQueryRowsPerTile - 1) / kQueryRowsPerTile;
}

bool supported_head_dim(int hdim) {
  return std::find(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims), hdim) !=
         std::end(kSupportedHeadDims);
}

std::string supported_head_dims() {
  std::string list;
  for (int hdim : kSupportedHeadDims) list += (list.empty() ? "" : ", ") + std::to_string(hdim);
  return list;
}

}  // namespace

bool stream::takes(const KVCacheProblem& p, int rows) {
  const bool enabled = detail::environment().sm90_decode_stream;
  const bool whole_tiles = p.block_table == nullptr || p.page_size % kKeysPerWarp == 0;
  return enabled && rows <= kRowsPerTile && whole_tiles && p.hdim_qk == kHeadDim;
}

int32_t longest_query_rows(const KVCacheProblem& p) {
  return p.is_varlen() ? int32_t(std::min<int64_t>(p.seqlen_q, p.total_q)) : p.seqlen_q;
}

namespace {

// MLA (headdim 576 / 512) on the MLA kernels (mla_kernel.cuh): what they read, refused by the
// argument that asks for more. The forms no GPU kernel takes (sparse indices, the fp8_mla
// records with q other than bf16) were refused before the plan (common/mla.hpp's
// refuse_mla_on_gpu).
Status mla_refused(const char* argument, const std::string& what) {
  return {Code::not_supported, std::string(argument) + ": " + what + " is not supported by the " +
                                   kFamily + "'s MLA decode yet (the CPU backend computes it)"};
}

Status check_mla_support(const KVCacheProblem& p) {
  if (p.format != CacheFormat::plain && p.format != CacheFormat::mla_fp8)
    return mla_refused("k_cache", "a quantized MLA cache other than FlashMLA's FP8 records (bf16 "
                                  "and fp16 caches and fp8_mla are)");
  if (p.block_table == nullptr)
    return mla_refused("block_table", "a contiguous MLA cache (pages of 64 tokens through a block "
                                      "table are)");
  if (p.page_size != mla::kPageSize)
    return mla_refused("k_cache", "page size " + std::to_string(p.page_size) +
                                      " (64, FlashMLA's, is: one page is one K tile)");
  // V is read as the first 512 columns of K's tile: it must be those bytes.
  if (p.v.data != p.k.data || p.v.stride.page != p.k.stride.page ||
      p.v.stride.slot != p.k.stride.slot || p.v.stride.head != p.k.stride.head)
    return mla_refused("v_cache", "a V cache of its own (v_cache must be the view of k_cache's "
                                  "first 512 columns: same data and strides)");
  if (p.softcap > 0.0f) return mla_refused("softcap", "softcap");
  if (p.vectors.alibi_slopes) return mla_refused("alibi_slopes", "ALiBi");
  if (p.k_new != nullptr) return mla_refused("k_new", "appending to an MLA cache");
  // Q rows are read in 16-byte chunks.
  const int64_t element_bytes = 2;
  const int64_t q_strides[3] = {p.q_stride.batch, p.q_stride.row, p.q_stride.head};
  if (reinterpret_cast<uintptr_t>(p.q) % kCopyAlignment != 0)
    return unaligned("q", "the data address", kCopyAlignment);
  for (int64_t s : q_strides)
    if ((s * element_bytes) % int64_t(kCopyAlignment) != 0)
      return unaligned("q", "every stride (" + std::to_string(s * element_bytes) + " bytes)",
                       kCopyAlignment);
  const int64_t rows = int64_t(p.heads_q / p.heads_kv) * longest_query_rows(p);
  if (int64_t(p.heads_kv) * mla::row_tiles(rows) > kMaxGridYZ)
    return unsupported("heads_kv · ceil(group · seqlen_q / 64) above 65535 (MLA decode)");
  if (p.batch > kMaxGridYZ) return unsupported("batch above 65535");
  // The TMA copies of the cache, or the 16-byte loads of the records: its address and strides
  // 16-byte aligned.
  return check_side("k_cache", "k_scale", p.k, p);
}

// ok, or not_supported naming what this GPU path lacks.
Status check_support(const KVCacheProblem& p) {
  if (p.dtype != DType::bf16 && p.dtype != DType::f16)
    return unsupported(std::string("q dtype ") + dtype_name(p.dtype) + " (bf16 and fp16 are)");
  if (detail::is_mla_shape(p.hdim_qk, p.hdim_v)) return check_mla_support(p);
  if (p.hdim_qk != p.hdim_v || !supported_head_dim(p.hdim_qk))
    return unsupported("headdim " + std::to_string(p.hdim_qk) + "/" + std::to_string(p.hdim_v) +
                       " (" + supported_head_dims() + " are, the same for K and V)");
  if (int64_t(p.heads_kv) * row_tiles(p) > kMaxGridYZ)
    return unsupported("heads_kv · ceil(group · seqlen_q / 16) above 65535 (seqlen_q: max_seqlen_q "
                       "for varlen queries)");
  if (p.batch > kMaxGridYZ) return unsupported("batch above 65535");
  if (Status s = check_append_support(p); !s) return s;
  if (Status s = check_side("k_cache", "k_scale", p.k, p); !s) return s;
  return check_side("v_cache", "v_scale", p.v, p);
}

// MLA's kernels take the balanced schedule (split_schedule.hpp) unless the call fixes the splits
// (num_splits, split_size: the uniform plan keeps its promise of them) or has varlen queries (a
// slot holds heads_q · max_seqlen_q rows, which a long query among short ones would make far more
// than the uniform plan's partials of the rows that exist).
bool balanced_schedule(const KVCacheProblem& p) {
  return detail::is_mla_shape(p.hdim_qk, p.hdim_v) && p.num_splits == 0 && p.split_size == 0 &&
         !p.is_varlen();
}

// The balanced schedule's persistent CTAs per (kv-head, row tile): one wave of CTAs over the SMs
// the call may use (kBlocksPerSm each), at least one part.
int schedule_parts(const KVCacheProblem& p, int sm_count) {
  const int64_t rows = int64_t(p.heads_q / p.heads_kv) * longest_query_rows(p);
  const int64_t columns = int64_t(p.heads_kv) * mla::row_tiles(rows);
  return int(std::max<int64_t>(1, int64_t(sm_count) * mla::kBlocksPerSm / columns));
}

// The uniform plan's splits per (sequence, kv-head, row tile): the chunks of split_size keys the
// cache's capacity holds, the caller's count, or from the SMs the call may use and the capacity
// (the lengths live on the device and are not read).
int choose_splits(const KVCacheProblem& p, int sm_count) {
  const int64_t capacity = int64_t(p.max_pages) * p.page_size;
  // Enough CTAs for the longest sequence the cache holds; the API keeps them at most 256.
  if (p.split_size > 0) return int(std::max<int64_t>(1, (capacity + p.split_size - 1) / p.split_size));
  if (p.num_splits > 0) return p.num_splits;
  // The waves of the kernel that will run: the stream kernel's (8-row tiles, the CTAs per SM
  // its format wants filled), the tile kernel's, or MLA's (varlen queries: balanced_schedule).
  const int rows = (p.heads_q / p.heads_kv) * longest_query_rows(p);
  const bool mla = detail::is_mla_shape(p.hdim_qk, p.hdim_v);  // 64-row tiles, one CTA an SM
  const bool streamed = !mla && stream::takes(p, rows);
  const int64_t ctas = int64_t(p.batch) * p.heads_kv *
                       (mla        ? mla::row_tiles(rows)
                        : streamed ? (rows + stream::kRowsPerTile - 1) / stream::kRowsPerTile
                                   : row_tiles(p));
  const int64_t tiles = (capacity + kKeysPerStage - 1) / kKeysPerStage;
  const int64_t slots = int64_t(std::max(sm_count, 1)) *
                        (mla        ? mla::kBlocksPerSm
                         : streamed ? stream::planned_blocks_per_sm(storage_of(p.format))
                                    : min_blocks_per_sm(p.hdim_qk));
  const int most = int(std::clamp<int64_t>(tiles / kMinTilesPerSplit, 1, kMaxAutoSplits));
  auto efficiency = [&](int splits) {
    const double waves = double(ctas * splits) / double(slots);
    return waves / std::ceil(waves);
  };
  double best = 0.0;
  for (int s = 1; s <= most; ++s) best = std::max(best, efficiency(s));
  for (int s = 1; s <= most; ++s)
    if (efficiency(s) >= kWaveEfficiencyTolerance * best) return s;
  return 1;
}

// Bytes of the caller's workspace a call needs: the rotated queries of an append with rotary
// (append.hpp), then the uniform plan's split partials (none for one split), or the balanced
// schedule and the partials of its slots.
std::size_t workspace_bytes(const KVCacheProblem& p, const Plan& plan) {
  const std::size_t rotated_q = rotated_q_bytes(p);  // the workspace's front
  if (plan.parts > 0) {
    const int64_t slot_rows = int64_t(p.heads_q) * longest_query_rows(p);
    return rotated_q +
           std::size_t(schedule::workspace_layout(p.batch, plan.parts, slot_rows, p.hdim_v).bytes);
  }
  const int splits = plan.splits;
  if (splits <= 1) return rotated_q;
  const std::size_t rows = std::size_t(p.heads_q) * std::size_t(p.total_query_rows());
  // partial_out (splits, rows, hdim) then partial_lse (rows, splits), all fp32.
  return rotated_q + rows * std::size_t(splits) * (std::size_t(p.hdim_v) + 1) * sizeof(float);
}

}  // namespace

Status make_plan(const KVCacheProblem& p, Plan* plan) {
  HFA_RETURN_IF_ERROR(check_support(p));
  // The splits are planned for the SMs left once sm_margin are kept free: the uniform plan's grid
  // is not persistent, so the margin shrinks the automatic split count rather than the grid; the
  // balanced schedule's persistent CTAs are one wave over those SMs.
  const DeviceFacts& facts = device_facts(p.device.index);
  if (!facts.status) return facts.status;
  int sms = 0;
  HFA_RETURN_IF_ERROR(usable_sms(facts, p.sm_margin, p.device.index, kFamily, &sms));
  if (balanced_schedule(p))
    plan->parts = schedule_parts(p, sms);
  else
    plan->splits = choose_splits(p, sms);
  plan->workspace_bytes = workspace_bytes(p, *plan);
  return Status::ok();
}

}  // namespace hfa::sm90::decode

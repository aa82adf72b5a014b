#include "workload.hpp"

#include <algorithm>
#include <chrono>
#include <random>

#include "check.hpp"
#include "timer.hpp"

namespace hfa::tool {

namespace {
constexpr unsigned char kPoison = 0xff;  // NaN in f32, f16 and bf16: unwritten outputs show

// cu_seqlens of `lengths` (batch + 1 int32 offsets), on the run's device.
DeviceTensor make_offsets(Device device, const std::vector<int64_t>& lengths);
}  // namespace

DeviceTensor to_device(Device device, const HostArray& host, std::initializer_list<int64_t> shape,
                       bool upload) {
  DeviceTensor slot;
  slot.memory = std::make_unique<DeviceMemory>(device, host.bytes());
  if (upload)
    slot.memory->upload(host);
  else
    slot.memory->fill_byte(kPoison);
  slot.tensor = make_tensor(slot.memory->data(), host.dtype(), shape, {}, device);
  return slot;
}

namespace {
DeviceTensor make_offsets(Device device, const std::vector<int64_t>& lengths) {
  HostArray offsets(DType::i32, static_cast<int64_t>(lengths.size()) + 1);
  auto* at = static_cast<int32_t*>(offsets.data());
  at[0] = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b) at[b + 1] = at[b] + static_cast<int32_t>(lengths[b]);
  return to_device(device, offsets, {offsets.size()}, true);
}
}  // namespace

Workload::Slot Workload::make_slot(const HostArray& host, std::initializer_list<int64_t> shape,
                                   bool upload) {
  Slot slot = to_device(spec_.device, host, shape, upload);
  if (!spec_.varlen_q.empty()) {  // packed: drop the leading extent of 1 (see the constructor)
    Tensor& t = slot.tensor;
    --t.rank;
    std::copy(t.shape + 1, t.shape + 1 + t.rank, t.shape);
    std::copy(t.stride + 1, t.stride + 1 + t.rank, t.stride);
  }
  return slot;
}

Workload::Workload(const Spec& spec, uint64_t seed, bool backward)
    : HostProblem(spec), with_backward_(backward), options_(spec.options()) {
  const Spec& s = spec_;
  if (s.varlen_q.empty() != s.varlen_k.empty())
    throw std::logic_error("Workload: varlen needs both the query and the key lengths");
  // Varlen: one sequence of all the tokens, (1, total, heads, dim), made (total, heads, dim) by
  // make_slot; lse (1, heads, total_q) becomes (heads, total_q).
  const bool packed = !s.varlen_q.empty();
  const int64_t batch = packed ? 1 : s.batch;
  const int64_t seqlen_q = packed ? s.total_q() : s.seqlen_q;
  const int64_t seqlen_k = packed ? s.total_k() : s.seqlen_k;
  std::mt19937_64 rng(seed);
  q = HostArray(s.dtype, batch * seqlen_q * s.heads * s.hdim);
  k = HostArray(s.dtype, batch * seqlen_k * s.kv_heads * s.hdim);
  v = HostArray(s.dtype, batch * seqlen_k * s.kv_heads * s.hdim_v);
  out = HostArray(s.out_dtype(), batch * seqlen_q * s.heads * s.hdim_v);
  lse = HostArray(DType::f32, batch * s.heads * seqlen_q);
  for (HostArray* input : {&q, &k, &v}) input->fill_normal(rng);

  q_ = make_slot(q, {batch, seqlen_q, s.heads, s.hdim}, true);
  k_ = make_slot(k, {batch, seqlen_k, s.kv_heads, s.hdim}, true);
  v_ = make_slot(v, {batch, seqlen_k, s.kv_heads, s.hdim_v}, true);
  out_ = make_slot(out, {batch, seqlen_q, s.heads, s.hdim_v}, false);
  lse_ = make_slot(lse, {batch, s.heads, seqlen_q}, false);
  if (packed) {
    cu_seqlens_q_ = make_offsets(s.device, s.varlen_q);
    cu_seqlens_k_ = make_offsets(s.device, s.varlen_k);
    options_.cu_seqlens_q = &cu_seqlens_q_.tensor;
    options_.cu_seqlens_k = &cu_seqlens_k_.tensor;
    // The longest sequences (parse_spec), at least 1 as the library asks.
    options_.max_seqlen_q = static_cast<int32_t>(std::max<int64_t>(1, s.seqlen_q));
    options_.max_seqlen_k = static_cast<int32_t>(std::max<int64_t>(1, s.seqlen_k));
  }
  if (s.sinks) {
    // Logits around the size of a score, so that some rows lean on their sink and some not.
    sinks = HostArray(DType::f32, s.heads);
    sinks.fill_normal(rng);
    sinks_ = to_device(s.device, sinks, {s.heads}, true);  // not packed
    options_.sinks = &sinks_.tensor;
  }
  if (s.block_mask) attach_block_mask();
  allocate_workspace();
  if (!backward) return;

  dout = HostArray(s.dtype, out.size());
  dout.fill_normal(rng);
  dq = HostArray(s.dtype, q.size());
  dk = HostArray(s.dtype, k.size());
  dv = HostArray(s.dtype, v.size());
  dout_ = make_slot(dout, {batch, seqlen_q, s.heads, s.hdim_v}, true);
  dq_ = make_slot(dq, {batch, seqlen_q, s.heads, s.hdim}, false);
  dk_ = make_slot(dk, {batch, seqlen_k, s.kv_heads, s.hdim}, false);
  dv_ = make_slot(dv, {batch, seqlen_k, s.kv_heads, s.hdim_v}, false);
  allocate_workspace();
}

// The block mask over each sequence (fixed length: one mask broadcast over the batch and the
// heads) or over the packed tokens (varlen), on the run's device.
void Workload::attach_block_mask() {
  const Spec& s = spec_;
  const bool packed = !s.varlen_q.empty();
  HostBlockMask mask;
  build_block_mask([&s](int64_t i) { return s.block_mask.keys(i); },
                   packed ? s.total_q() : s.seqlen_q, packed ? s.total_k() : s.seqlen_k,
                   s.rows.sparse_block_q, s.rows.sparse_block_kv, &mask);
  const int64_t m = mask.q_blocks;
  mask_counts_ = to_device(s.device, mask.counts, {1, 1, m}, true);
  mask_indices_ = to_device(s.device, mask.indices, {1, 1, m, mask.slots}, true);
  mask_full_counts_ = to_device(s.device, mask.full_counts, {1, 1, m}, true);
  mask_full_indices_ = to_device(s.device, mask.full_indices, {1, 1, m, mask.full_slots}, true);
  mask_bits_ = to_device(s.device, mask.bits, {1, 1, m, mask.bits.size() / m}, true);
  options_.kv_num_blocks = &mask_counts_.tensor;
  options_.kv_indices = &mask_indices_.tensor;
  options_.full_kv_num_blocks = &mask_full_counts_.tensor;
  options_.full_kv_indices = &mask_full_indices_.tensor;
  options_.kv_mask_bits = &mask_bits_.tensor;
}

void Workload::allocate_workspace() {
  std::size_t bytes = 0;
  Status status = forward_workspace_size(q_.tensor, k_.tensor, v_.tensor, options_, &bytes);
  std::size_t backward_bytes = 0;
  if (status && with_backward_)
    status = backward_workspace_size(q_.tensor, k_.tensor, v_.tensor, options_, &backward_bytes);
  if (!status) throw WorkloadError(status);
  bytes = std::max(bytes, backward_bytes);
  if (bytes == 0 || (workspace_ && options_.workspace_bytes >= bytes)) return;
  workspace_ = std::make_unique<DeviceMemory>(spec_.device, bytes);
  options_.workspace = workspace_->data();
  options_.workspace_bytes = bytes;
}

Status Workload::forward() {
  return hfa::forward(q_.tensor, k_.tensor, v_.tensor, out_.tensor, &lse_.tensor, options_);
}

Status Workload::backward() {
  return hfa::backward(dout_.tensor, q_.tensor, k_.tensor, v_.tensor, out_.tensor, lse_.tensor,
                       dq_.tensor, dk_.tensor, dv_.tensor, options_);
}

void Workload::download() {
  synchronize(spec_.device);
  out_.memory->download(&out);
  lse_.memory->download(&lse);
  if (!with_backward_) return;
  dq_.memory->download(&dq);
  dk_.memory->download(&dk);
  dv_.memory->download(&dv);
}

Footprint workload_footprint(const Spec& s, bool backward) {
  const double rows_q = static_cast<double>(s.total_q()) * s.heads;
  const double rows_k = static_cast<double>(s.total_k()) * s.kv_heads;
  const double input = static_cast<double>(dtype_size(s.dtype));
  double tensors = rows_q * s.hdim * input + rows_k * (s.hdim + s.hdim_v) * input +  // q, k, v
                   rows_q * s.hdim_v * static_cast<double>(dtype_size(s.out_dtype())) +  // out
                   rows_q * sizeof(float);                                               // lse
  if (backward)  // dout, dq, dk, dv
    tensors += rows_q * (s.hdim_v + s.hdim) * input + rows_k * (s.hdim + s.hdim_v) * input;
  Footprint footprint;
  footprint.host_bytes = tensors + reference_check_bytes(s, backward, s.dtype);
  if (s.device.kind == DeviceKind::cpu)
    footprint.host_bytes += tensors;  // the "device" copies
  else
    footprint.device_bytes = tensors;  // plus a workspace, which cudaMalloc checks
  return footprint;
}

SampleTiming time_workload(const Spec& sample, bool backward) {
  SampleTiming timing;
  const auto start = std::chrono::steady_clock::now();
  Workload workload(sample, 0, backward);
  synchronize(sample.device);
  timing.setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto time = [&](const std::function<Status()>& call) {
    Status status;
    const Timing t = time_calls(sample.device, 1, 1, call, &status);
    if (!status) throw WorkloadError(status);
    timing.call_seconds.push_back(t.median_ms * 1e-3);
  };
  time([&] { return workload.forward(); });
  if (backward) time([&] { return workload.backward(); });
  return timing;
}

}  // namespace hfa::tool

#include "workload.hpp"

#include <algorithm>
#include <random>

namespace hfa::tool {

namespace {
constexpr unsigned char kPoison = 0xff;  // NaN in f32, f16 and bf16: unwritten outputs show
}  // namespace

Workload::Slot Workload::make_slot(const HostArray& host, std::initializer_list<int64_t> shape,
                                   bool upload) {
  Slot slot;
  slot.memory = std::make_unique<DeviceMemory>(spec_.device, host.bytes());
  if (upload)
    slot.memory->upload(host);
  else
    slot.memory->fill_byte(kPoison);
  slot.tensor = make_tensor(slot.memory->data(), host.dtype(), shape, {}, spec_.device);
  return slot;
}

Workload::Workload(const Spec& spec, uint64_t seed, bool backward)
    : spec_(spec), with_backward_(backward), options_(spec.options()) {
  const Spec& s = spec_;
  std::mt19937_64 rng(seed);
  q = HostArray(s.dtype, s.batch * s.seqlen_q * s.heads * s.hdim);
  k = HostArray(s.dtype, s.batch * s.seqlen_k * s.kv_heads * s.hdim);
  v = HostArray(s.dtype, s.batch * s.seqlen_k * s.kv_heads * s.hdim_v);
  out = HostArray(s.dtype, s.batch * s.seqlen_q * s.heads * s.hdim_v);
  lse = HostArray(DType::f32, s.batch * s.heads * s.seqlen_q);
  for (HostArray* input : {&q, &k, &v}) input->fill_normal(rng);

  q_ = make_slot(q, {s.batch, s.seqlen_q, s.heads, s.hdim}, true);
  k_ = make_slot(k, {s.batch, s.seqlen_k, s.kv_heads, s.hdim}, true);
  v_ = make_slot(v, {s.batch, s.seqlen_k, s.kv_heads, s.hdim_v}, true);
  out_ = make_slot(out, {s.batch, s.seqlen_q, s.heads, s.hdim_v}, false);
  lse_ = make_slot(lse, {s.batch, s.heads, s.seqlen_q}, false);
  if (s.sinks) {
    // Logits around the size of a score, so that some rows lean on their sink and some not.
    sinks = HostArray(DType::f32, s.heads);
    sinks.fill_normal(rng);
    sinks_ = make_slot(sinks, {s.heads}, true);
    options_.sinks = &sinks_.tensor;
  }
  allocate_workspace();
  if (!backward) return;

  dout = HostArray(s.dtype, out.size());
  dout.fill_normal(rng);
  dq = HostArray(s.dtype, q.size());
  dk = HostArray(s.dtype, k.size());
  dv = HostArray(s.dtype, v.size());
  dout_ = make_slot(dout, {s.batch, s.seqlen_q, s.heads, s.hdim_v}, true);
  dq_ = make_slot(dq, {s.batch, s.seqlen_q, s.heads, s.hdim}, false);
  dk_ = make_slot(dk, {s.batch, s.seqlen_k, s.kv_heads, s.hdim}, false);
  dv_ = make_slot(dv, {s.batch, s.seqlen_k, s.kv_heads, s.hdim_v}, false);
  allocate_workspace();
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

}  // namespace hfa::tool

// The tensors of one attention problem on the run's device: random inputs uploaded once,
// outputs poisoned before the first call, and the hfa calls themselves.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "budget.hpp"
#include "memory.hpp"
#include "spec.hpp"

namespace hfa::tool {

// The library refused the workload (its status says why).
class WorkloadError : public std::runtime_error {
 public:
  explicit WorkloadError(Status status)
      : std::runtime_error(status.message()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// Memory on the run's device and a contiguous view of it with `shape`: `host` uploaded, or
// (upload false) poisoned with NaN bytes so that unwritten outputs show.
struct DeviceTensor {
  std::unique_ptr<DeviceMemory> memory;
  Tensor tensor{};
};
DeviceTensor to_device(Device device, const HostArray& host, std::initializer_list<int64_t> shape,
                       bool upload);

// A problem's host arrays, what the reference check reads: inputs as uploaded, outputs after
// a download. Shapes as in the library: (batch, seqlen, heads, dim) and lse (batch, heads,
// seqlen); packed (total, heads, dim) for varlen lengths (spec.varlen_q / varlen_k), and
// lse (heads, total_q) for varlen queries. sinks: f32 (heads), with spec.sinks only.
class HostProblem {
 public:
  explicit HostProblem(const Spec& spec) : spec_(spec) {}
  const Spec& spec() const { return spec_; }

  HostArray q, k, v, dout, out, lse, dq, dk, dv, sinks;

 protected:
  Spec spec_;
};

class Workload : public HostProblem {
 public:
  Workload(const Workload&) = delete;  // options_ points at slots of this object
  // Inputs q, k, v (and dout with `backward`) are random normals from `seed`; varlen specs
  // (varlen_q and varlen_k both set) run packed, with cu_seqlens.
  // Throws WorkloadError when the library rejects the problem already at the workspace query.
  Workload(const Spec& spec, uint64_t seed, bool backward);

  Status forward();
  Status backward();  // needs a forward first (it reads out and lse)

  // Copies out and lse (and dq, dk, dv after a backward) back to the host arrays.
  void download();

 private:
  using Slot = DeviceTensor;
  void allocate_workspace();
  Slot make_slot(const HostArray& host, std::initializer_list<int64_t> shape, bool upload);
  void attach_block_mask();

  bool with_backward_ = false;
  Options options_;
  Slot q_, k_, v_, dout_, out_, lse_, dq_, dk_, dv_, sinks_;
  Slot cu_seqlens_q_, cu_seqlens_k_;  // varlen only
  Slot mask_counts_, mask_indices_, mask_full_counts_, mask_full_indices_, mask_bits_;
  std::unique_ptr<DeviceMemory> workspace_;  // what the backend asks for, if anything
};

// The bytes a Workload of `spec` and the check of its result hold at their peak.
Footprint workload_footprint(const Spec& spec, bool backward);

// Builds a Workload of `sample` and times one call of the forward (and of the backward), each
// after a warm-up call. Throws WorkloadError when the library rejects it.
SampleTiming time_workload(const Spec& sample, bool backward);

}  // namespace hfa::tool

// The tensors of one attention problem on the run's device: random inputs uploaded once,
// outputs poisoned before the first call, and the hfa calls themselves.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>

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

class Workload {
 public:
  Workload(const Workload&) = delete;  // options_ points at the sinks slot of this object
  // Inputs q, k, v (and dout with `backward`) are random normals from `seed`.
  // Throws WorkloadError when the library rejects the problem already at the workspace query.
  Workload(const Spec& spec, uint64_t seed, bool backward);

  Status forward();
  Status backward();  // needs a forward first (it reads out and lse)

  // Copies out and lse (and dq, dk, dv after a backward) back to the host arrays below.
  void download();

  const Spec& spec() const { return spec_; }

  // Host copies: inputs as uploaded, outputs after download(). sinks: f32 (heads), with
  // spec.sinks only.
  HostArray q, k, v, dout, out, lse, dq, dk, dv, sinks;

 private:
  struct Slot {
    std::unique_ptr<DeviceMemory> memory;
    Tensor tensor{};
  };
  void allocate_workspace();
  Slot make_slot(const HostArray& host, std::initializer_list<int64_t> shape, bool upload);

  Spec spec_;
  bool with_backward_ = false;
  Options options_;
  Slot q_, k_, v_, dout_, out_, lse_, dq_, dk_, dv_, sinks_;
  std::unique_ptr<DeviceMemory> workspace_;  // what the backend asks for, if anything
};

}  // namespace hfa::tool

// Programmatic dependent launch (sm_90): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it in the
// stream still runs, once every CTA of that kernel has allowed it (or exited). It must wait for
// that kernel before it touches what that kernel writes; what neither writes (its inputs) it may
// read at once. Without the attribute both are no-ops.
#pragma once

namespace hfa::sm90::ptx {

// Lets the next kernel in the stream launch (its CTAs take SM room as this grid's leave).
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Blocks until the kernel before this one in the stream has completed and its writes are visible.
__device__ __forceinline__ void wait_for_prior_grid() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

}  // namespace hfa::sm90::ptx

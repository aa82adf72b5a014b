// Run-time choice of the kernel table. Compiled for the baseline x86-64, like everything but
// kernels_avx512.cpp, so that the CPU check itself runs anywhere.
#include "common/environment.hpp"
#include "cpu/kernels.hpp"

namespace hfa::cpu {

const Kernels& avx512_kernels_unchecked();  // kernels_avx512.cpp

const Kernels* avx512_kernels() {
  static const bool supported = __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512dq") &&
                                __builtin_cpu_supports("avx512vl");
  return supported ? &avx512_kernels_unchecked() : nullptr;
}

const Kernels& active_kernels() {
  static const Kernels& chosen = [] () -> const Kernels& {
    const bool force_generic = detail::environment().cpu_isa == detail::CpuIsa::generic;
    const Kernels* avx512 = avx512_kernels();
    return (avx512 != nullptr && !force_generic) ? *avx512 : generic_kernels();
  }();
  return chosen;
}

}  // namespace hfa::cpu

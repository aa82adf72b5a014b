// Reductions into global memory from registers (sm_90): fire and forget, no value comes back.
#pragma once

namespace hfa::sm90::ptx {

// dst[0..3] += v, each element atomically against other adds (relaxed, GPU scope); dst is
// 16-byte aligned. One instruction for four floats: L2 takes a warp's 512 contiguous bytes as
// whole lines.
__device__ __forceinline__ void reduce_add_v4(float* dst, float4 v) {
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(v.x),
               "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

}  // namespace hfa::sm90::ptx

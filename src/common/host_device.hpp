// HFA_HD marks a function for both the host and the device when nvcc compiles it, and for the
// host alone otherwise: the codecs and the split-KV merge are one piece of code on both sides.
#pragma once

#if defined(__CUDACC__)
#define HFA_HD __host__ __device__
#else
#define HFA_HD
#endif

// Unrolls the loop that follows in device code (so that arrays it indexes stay in registers);
// nothing on the host, whose compiler would warn about a pragma it does not know.
#if defined(__CUDA_ARCH__)
#define HFA_UNROLL _Pragma("unroll")
#else
#define HFA_UNROLL
#endif

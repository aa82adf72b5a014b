// HFA_HD marks a function for both the host and the device when nvcc compiles it, and for the
// host alone otherwise: the codecs and the split-KV merge are one piece of code on both sides.
#pragma once

#if defined(__CUDACC__)
#define HFA_HD __host__ __device__
#else
#define HFA_HD
#endif

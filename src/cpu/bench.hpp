// The yardstick for the CPU backend's speed: this machine's fp32 GEMM rate on the same work as
// an attention forward, so that `hfa bench --device cpu` can report the tiled kernel as a
// fraction of what the cores can do. Two GEMMs are timed and the faster one counts:
// OpenBLAS's cblas_sgemm when libopenblas.so.0 can be loaded (dlopen; every core; on an
// AVX-512 CPU its AVX-512 "SkylakeX" kernels unless OPENBLAS_CORETYPE says otherwise), and hfa's
// own cache-blocked GEMM on the same micro-kernel and thread pool as the attention.
#pragma once

#include <cstdint>
#include <string>

namespace hfa::cpu {

// GFLOP/s (2·m·n·k per product) of C[m×n] = A[m×k]·B[k×n] in fp32 on every core: the best of
// repeated runs (at least min_seconds of them), of the faster GEMM. `which`, if not null, names
// it and lists the rate of each GEMM timed.
double measure_fp32_gemm_gflops(int m, int n, int k, std::string* which = nullptr,
                                double min_seconds = 0.3);

// The GEMMs of one attention head's forward, S = Q·Kᵀ (seqlen_q × seqlen_k × hdim) and
// O = P·V (seqlen_q × hdim × seqlen_k), timed together: GFLOP/s over 4·seqlen_q·seqlen_k·hdim.
double measure_attention_gemm_gflops(int seqlen_q, int seqlen_k, int hdim,
                                     std::string* which = nullptr, double min_seconds = 0.3);

}  // namespace hfa::cpu

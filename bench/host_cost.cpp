// libhfa's own host time per call, without Python or torch: a loop of calls on tiny problems (the
// GPU keeps up), then one synchronize; the median of 15 loops, in microseconds. What
// bench_overhead.py's rows cost before any Python glue, and, for scale, the CUDA calls a launch
// is made of (a TMA map's encoding, an empty kernel's launch with the forward's shared memory
// and parameter size). Build (nvcc: the empty kernel) and run on the GPU machine:
//   nvcc -O2 -std=c++20 -x cu -arch=sm_90a -Iinclude bench/host_cost.cpp \
//       -Lbuild/release/src -lhfa -o host_cost && ./host_cost
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include "hfa/hfa.hpp"

struct LargeParams { unsigned char bytes[640]; };  // about the forward's Params
__global__ void empty_kernel(LargeParams) {}
__global__ void empty_small_kernel(int) {}

template <class F> double us_per_call(F f, int calls = 200, int reps = 15) {
  for (int i = 0; i < 5; ++i) f();
  cudaDeviceSynchronize();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  using namespace hfa;
  const int64_t b = 1, s = 128, h = 8, d = 128;
  void *q, *k, *v, *o, *l, *ws, *dq, *dk, *dv, *dout;
  size_t n = b * s * h * d * 2;
  for (void** p : {&q, &k, &v, &o, &dq, &dk, &dv, &dout}) { cudaMalloc(p, n); cudaMemset(*p, 0, n); }
  cudaMalloc(&l, b * h * s * 4);
  cudaMalloc(&ws, 64 << 20);
  cudaStream_t st; cudaStreamCreate(&st);
  auto T = [&](void* p) { return make_tensor(p, DType::bf16, {b, s, h, d}, {}, Device::cuda()); };
  Tensor qt = T(q), kt = T(k), vt = T(v), ot = T(o), dqt = T(dq), dkt = T(dk), dvt = T(dv), dot = T(dout);
  Tensor lt = make_tensor(l, DType::f32, {b, h, s}, {}, Device::cuda());
  Options opt; opt.causal = true; opt.stream = st; opt.workspace = ws; opt.workspace_bytes = 64 << 20;
  size_t bytes = 0;
  printf("forward_workspace_size %.2f us\n", us_per_call([&] { forward_workspace_size(qt, kt, vt, opt, &bytes); }));
  printf("forward %.2f us\n", us_per_call([&] { Status s = forward(qt, kt, vt, ot, &lt, opt); if (!s) { printf("%s\n", s.message().c_str()); exit(1);} }));
  Options nc = opt; nc.causal = false;
  printf("forward non-causal %.2f us\n", us_per_call([&] { forward(qt, kt, vt, ot, &lt, nc); }));
  printf("backward_workspace_size %.2f us\n", us_per_call([&] { backward_workspace_size(qt, kt, vt, opt, &bytes); }));
  printf("backward %.2f us\n", us_per_call([&] { Status s = backward(dot, qt, kt, vt, ot, lt, dqt, dkt, dvt, opt); if (!s) { printf("%s\n", s.message().c_str()); exit(1);} }));
  printf("for scale: cudaGetDevice %.2f us\n", us_per_call([&] { int dev; cudaGetDevice(&dev); }));
  printf("cudaSetDevice %.2f us\n", us_per_call([&] { cudaSetDevice(0); }));
  printf("cudaMemsetAsync %.2f us\n", us_per_call([&] { cudaMemsetAsync(ws, 0, 16, st); }));
  constexpr int kSmem = 200 << 10;
  cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  printf("cudaFuncSetAttribute %.2f us\n", us_per_call([&] { cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem); }));
  printf("empty kernel launch (132 x 384 threads, 200 KB, 640 B params) %.2f us\n", us_per_call([&] { empty_kernel<<<132, 384, kSmem, st>>>(LargeParams{}); }));
  printf("empty kernel launch (132 x 384 threads, no shared memory, 640 B params) %.2f us\n", us_per_call([&] { empty_kernel<<<132, 384, 0, st>>>(LargeParams{}); }));
  printf("empty kernel launch (132 x 384 threads, no shared memory, 4 B params) %.2f us\n", us_per_call([&] { empty_small_kernel<<<132, 384, 0, st>>>(0); }));
  printf("cudaGetLastError %.2f us\n", us_per_call([&] { (void)cudaGetLastError(); }));
  void* entry = nullptr; cudaDriverEntryPointQueryResult found{};
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found);
  auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  CUtensorMap map;
  cuuint64_t dims[4] = {d, s, h, b}; cuuint64_t strides[3] = {h * d * 2, d * 2, s * h * d * 2};
  cuuint32_t box[4] = {64, 128, 1, 1}, estr[4] = {1, 1, 1, 1};
  printf("cuTensorMapEncodeTiled %.2f us\n", us_per_call([&] { encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, q, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE); }));
  // decode: batch 8, 4k paged cache, 32/8 heads
  const int64_t B = 8, P = 64, page = 64, hq = 32, hk = 8;
  void *qd, *od, *kc, *vc, *tab, *lens, *ld;
  cudaMalloc(&qd, B * hq * d * 2); cudaMalloc(&od, B * hq * d * 2); cudaMalloc(&ld, B * hq * 4);
  cudaMalloc(&kc, B * P * page * hk * d * 2); cudaMalloc(&vc, B * P * page * hk * d * 2);
  std::vector<int> table(B * P); for (int i = 0; i < B * P; ++i) table[i] = i;
  std::vector<int> ln(B, 4000);
  cudaMalloc(&tab, B * P * 4); cudaMemcpy(tab, table.data(), B * P * 4, cudaMemcpyHostToDevice);
  cudaMalloc(&lens, B * 4); cudaMemcpy(lens, ln.data(), B * 4, cudaMemcpyHostToDevice);
  Tensor qdt = make_tensor(qd, DType::bf16, {B, 1, hq, d}, {}, Device::cuda());
  Tensor odt = make_tensor(od, DType::bf16, {B, 1, hq, d}, {}, Device::cuda());
  Tensor ldt = make_tensor(ld, DType::f32, {B, hq, 1}, {}, Device::cuda());
  Tensor kct = make_tensor(kc, DType::bf16, {B * P, page, hk, d}, {}, Device::cuda());
  Tensor vct = make_tensor(vc, DType::bf16, {B * P, page, hk, d}, {}, Device::cuda());
  Tensor tabt = make_tensor(tab, DType::i32, {B, P}, {}, Device::cuda());
  Tensor lent = make_tensor(lens, DType::i32, {B}, {}, Device::cuda());
  KVCacheOptions ko; ko.cache_seqlens = &lent; ko.block_table = &tabt; ko.stream = st; ko.workspace = ws; ko.workspace_bytes = 64 << 20;
  printf("forward_kvcache_workspace_size %.2f us\n", us_per_call([&] { forward_kvcache_workspace_size(qdt, kct, vct, ko, &bytes); }));
  printf("forward_kvcache %.2f us\n", us_per_call([&] { Status s = forward_kvcache(qdt, kct, vct, odt, &ldt, ko); if (!s) { printf("%s\n", s.message().c_str()); exit(1);} }));
  return 0;
}

// The Hopper backend's entry in the dispatch table: which problems the sm90 attention kernels
// take and the launch of the one that fits, the reads back to the host, and the other operations
// (operations.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cfloat>
#include <cstdint>
#include <span>
#include <string>

#include "common/backend.hpp"
#include "common/errors.hpp"
#include "common/mla.hpp"
#include "sm90/bwd/launch.hpp"
#include "sm90/common/sparse_block.hpp"
#include "sm90/decode/launch.hpp"
#include "sm90/device.hpp"
#include "sm90/fwd/launch.hpp"
#include "sm90/kernel_list.hpp"
#include "sm90/operations.hpp"

namespace hfa::sm90 {
namespace {

using detail::BackwardProblem;
using detail::ForwardProblem;

Status not_supported(const char* family, const std::string& what) {
  return {Code::not_supported,
          std::string(family) + ": " + what + " is not supported on this device"};
}

// Whether the compiled FP8 forward holds the problem (kernel_list.def's FP8 lists). Its head dims
// and key blocks (descale_block_kv, whole tiles of kFp8KeyBlock keys) are the API's checks
// (validate.cpp, validate_descales.cpp), which every caller passes: every supported pair of head
// dims is compiled (common/head_dims.hpp).
Status check_fp8_support(const ForwardProblem& p) {
  if (!detail::is_compiled_fp8_out(p.out_dtype)) {
    return not_supported(fwd::kFamily, std::string("out dtype ") + dtype_name(p.out_dtype) +
                                           " after e4m3 inputs (bf16, f16 are)");
  }
  return Status::ok();
}

// An f32 out after 16-bit inputs (a partial result): compiled (HFA_KERNEL_PARTIAL_OUT) without
// softcap, and stored as float2, so its rows must be 8-byte aligned.
Status check_partial_out_support(const ForwardProblem& p) {
  if (!detail::is_compiled_partial_out(p.out_dtype)) {
    return not_supported(fwd::kFamily, std::string("out dtype ") + dtype_name(p.out_dtype) +
                                           " after " + dtype_name(p.dtype) + " inputs");
  }
  if (p.softcap > 0.0f) return not_supported(fwd::kFamily, "softcap with an f32 out");
  const bool aligned = reinterpret_cast<uintptr_t>(p.out) % 8 == 0 &&
                       p.out_stride.batch % 2 == 0 && p.out_stride.row % 2 == 0 &&
                       p.out_stride.head % 2 == 0;
  if (!aligned) {
    return {Code::invalid_argument,
            "out: an f32 out on a GPU needs 8-byte aligned rows (even strides and offset)"};
  }
  return Status::ok();
}

// What no kernel of the forward and backward reads yet, refused by name rather than ignored: the
// VECTOR rows (hfa/options.def) other than alibi_slopes.
Status check_unread_options(const ForwardProblem& p, const char* family) {
  return detail::refuse_unread(p.vectors, family, {"alibi_slopes"});
}

// Block-sparse masks run on the forward's and the backward's own kernels (fwd/ and
// bwd/tile_config.hpp's BlockSparseTileConfig): 16-bit in and out, no softcap or ALiBi, tiles of
// one 128 × 128 mask block, the head dims of kernel_list.def's block-sparse list, and
// fixed-length sequences (a packed mask's blocks need not start at a sequence's first token, and
// the tail of a seqused_k sequence would need its V rows zeroed wherever the list puts its
// block); the backward not in the deterministic mode (its turns follow the window's block
// ranges, not a mask's lists). The rest is refused by name; the CPU backend runs it.
Status check_block_sparse_support(const ForwardProblem& p, const char* family) {
  if (!p.block_sparse) return Status::ok();
  auto refused = [&](const std::string& with) {
    return Status{Code::not_supported, std::string("kv_num_blocks: a block-sparse mask with ") +
                                           with + " is not supported by the " + family +
                                           " kernels (the CPU backend runs it)"};
  };
  const detail::BlockSparse& mask = p.block_sparse;
  if (mask.block_q != kSparseBlock || mask.block_kv != kSparseBlock)
    return refused("sparse_block_q x sparse_block_kv = " + std::to_string(mask.block_q) + " x " +
                   std::to_string(mask.block_kv) + " (" + std::to_string(kSparseBlock) +
                   " x " + std::to_string(kSparseBlock) + " is compiled)");
  if (p.is_varlen()) return refused("cu_seqlens (a packed mask)");
  if (p.seqused_k != nullptr) return refused("seqused_k");
  if (p.softcap > 0.0f) return refused("softcap");
  if (p.vectors.alibi_slopes) return refused("alibi_slopes");
  if (p.dtype == DType::e4m3) return refused("e4m3 inputs");
  if (p.out_dtype != p.dtype) return refused(std::string("an ") + dtype_name(p.out_dtype) + " out");
  if (family == bwd::kFamily && p.deterministic) return refused("deterministic=true");
  const detail::HeadDims* dims = detail::compiled_head_dims_for(p.hdim_qk, p.hdim_v);
  if (dims != nullptr && !has_block_sparse_kernel(dims->qk, dims->v))
    return refused("head dims " + std::to_string(p.hdim_qk) + "/" + std::to_string(p.hdim_v) +
                   " (" + block_sparse_head_dims_list() + " are compiled)");
  return Status::ok();
}

// ALiBi runs on the 16-bit kernels without softcap (score_policy.hpp's ListedMods says why); the
// rest is refused by name, the CPU backend runs it.
Status check_alibi_support(const ForwardProblem& p, const char* family) {
  if (!p.vectors.alibi_slopes) return Status::ok();
  auto refused = [&](const std::string& with) {
    return Status{Code::not_supported, std::string("alibi_slopes with ") + with +
                                           ": not supported by the " + family +
                                           " kernels (the CPU backend runs it)"};
  };
  if (p.softcap > 0.0f) return refused("softcap");
  if (p.dtype == DType::e4m3) return refused("e4m3 inputs");
  if (p.out_dtype != p.dtype) return refused(std::string("an ") + dtype_name(p.out_dtype) + " out");
  // The kernels subtract slope / softmax_scale from the unscaled scores (policy::Alibi).
  if (p.softmax_scale < FLT_MIN) return refused("softmax_scale below FLT_MIN (0 included)");
  return Status::ok();
}

// Whether the compiled kernels hold the problem (kernel_list.def); `family` names the caller. The
// head dims are the API's check, as for FP8.
Status check_support(const ForwardProblem& p, const char* family) {
  auto not_supported = [&](const std::string& what) { return sm90::not_supported(family, what); };
  HFA_RETURN_IF_ERROR(check_unread_options(p, family));
  HFA_RETURN_IF_ERROR(check_block_sparse_support(p, family));
  HFA_RETURN_IF_ERROR(check_alibi_support(p, family));
  if (p.dtype == DType::e4m3 && family == fwd::kFamily) return check_fp8_support(p);
  if (p.dtype == DType::e4m3) return not_supported("FP8 backward");
  if (!is_compiled_dtype(p.dtype)) {
    return not_supported(std::string("dtype ") + dtype_name(p.dtype) + " (" + compiled_dtype_list() +
                         " are)");
  }
  if (p.out_dtype != p.dtype) return check_partial_out_support(p);  // forward only (validated)
  return Status::ok();
}

// The device's facts for a launch on it, made current for the guard's lifetime.
struct OnDevice {
  DeviceGuard guard;
  const DeviceFacts& facts;
  explicit OnDevice(int device) : guard(device), facts(device_facts(device)) {}
};

Status forward(const ForwardProblem& p) {
  if (Status status = check_support(p, fwd::kFamily); !status) return status;
  const OnDevice on(p.device.index);
  if (!on.facts.status) return on.facts.status;
  int sms = 0;
  HFA_RETURN_IF_ERROR(usable_sms(on.facts, p.sm_margin, p.device.index, fwd::kFamily, &sms));
  // The persistent grid is min(tiles, sm_count) CTAs: counting fewer SMs leaves the margin free.
  const fwd::LaunchContext context{sms, on.facts.l2_bytes};
  if (fwd::is_fp8(p)) {
    auto run = [&]<int kQK, int kV, typename Out>() {
      return fwd::run_forward_fp8<kQK, kV, Out>(p, context, fwd::fp8_v_transpose(p));
    };
    return with_compiled_fp8_kernel(p.out_dtype, p.hdim_qk, p.hdim_v, run);
  }
  return with_compiled_kernel(p.dtype, p.hdim_qk, p.hdim_v, [&]<int kQK, int kV, typename Element>() {
    if (p.block_sparse) {  // checked: a compiled block-sparse pair
      if constexpr (has_block_sparse_kernel(kQK, kV)) {
        return fwd::run_forward_block_sparse<kQK, kV, Element>(p, context);
      } else {
        return Status{Code::internal, "sm90 forward: no block-sparse kernel for these head dims"};
      }
    }
    if (p.vectors.alibi_slopes) return fwd::run_forward_alibi<kQK, kV, Element>(p, context);
    if (p.out_dtype == p.dtype) return fwd::run_forward<kQK, kV, Element>(p, context);
    return with_partial_out_type(p.out_dtype, [&]<typename Out>() {
      return fwd::run_forward_partial<kQK, kV, Element, Out>(p, context);
    });
  });
}

Status forward_workspace_size(const ForwardProblem& p, std::size_t* bytes) {
  *bytes = 0;
  HFA_RETURN_IF_ERROR(check_unread_options(p, fwd::kFamily));  // refused at prepare, not run
  HFA_RETURN_IF_ERROR(check_block_sparse_support(p, fwd::kFamily));
  HFA_RETURN_IF_ERROR(check_alibi_support(p, fwd::kFamily));
  *bytes = fwd::workspace_bytes(p);
  return Status::ok();
}

// The decode entries (decode/entry.cpp) behind what no decode kernel here does yet, each
// refused by name before a plan is made: the MLA forms without a kernel (the decode kernels
// would ignore sparse indices, and widen FP8 MLA records to bf16 only; dense MLA on bf16/fp16
// caches and on FP8 records with bf16 q has its kernels, whose plan checks the rest), an f32
// out of 16-bit queries (the epilogue stores q's dtype) and the VECTOR options.
template <auto entry, class... Rest>
Status kvcache_checked(const detail::KVCacheProblem& p, Rest... rest) {
  HFA_RETURN_IF_ERROR(detail::refuse_mla_on_gpu(p, decode::kFamily));
  if (p.out_dtype != p.dtype)
    return {Code::not_supported, std::string("out: dtype ") + dtype_name(p.out_dtype) +
                                     " with " + dtype_name(p.dtype) +
                                     " queries is not supported by the " + decode::kFamily +
                                     " yet (the CPU backend writes it)"};
  HFA_RETURN_IF_ERROR(detail::refuse_unread(p.vectors, decode::kFamily, {"alibi_slopes"}));
  return entry(p, rest...);
}

Status backward(const BackwardProblem& p) {
  if (Status status = check_support(p.fwd, bwd::kFamily); !status) return status;
  const OnDevice on(p.fwd.device.index);
  if (!on.facts.status) return on.facts.status;
  int sms = 0;
  HFA_RETURN_IF_ERROR(usable_sms(on.facts, p.fwd.sm_margin, p.fwd.device.index, bwd::kFamily, &sms));
  // Checked like the forward's; the backward's grid (one CTA per key block) is not persistent,
  // so the margin limits no launch: the SM count only decides whether a GQA group is split.
  const bwd::LaunchContext context{sms, on.facts.l2_bytes};
  const detail::HeadDims dims = bwd::head_dims_to_run(p.fwd);
  return with_compiled_kernel(p.fwd.dtype, dims.qk, dims.v, [&]<int kQK, int kV, typename Element>() {
    if (p.fwd.block_sparse) {  // checked: a compiled block-sparse pair
      if constexpr (has_block_sparse_kernel(kQK, kV)) {
        return bwd::run_backward_block_sparse<kQK, kV, Element>(p, context);
      } else {
        return Status{Code::internal, "sm90 backward: no block-sparse kernel for these head dims"};
      }
    }
    if (p.fwd.vectors.alibi_slopes) return bwd::run_backward_alibi<kQK, kV, Element>(p, context);
    return bwd::run_backward<kQK, kV, Element>(p, context);
  });
}

Status backward_workspace_size(const BackwardProblem& p, std::size_t* bytes) {
  *bytes = 0;
  if (Status status = check_support(p.fwd, bwd::kFamily); !status) return status;
  const detail::HeadDims dims = bwd::head_dims_to_run(p.fwd);
  return with_compiled_kernel(p.fwd.dtype, dims.qk, dims.v, [&]<int kQK, int kV, typename Element>() {
    if (p.fwd.block_sparse) {  // checked: a compiled block-sparse pair
      if constexpr (has_block_sparse_kernel(kQK, kV)) {
        *bytes = bwd::block_sparse_workspace_bytes<kQK, kV>(p);
        return Status::ok();
      } else {
        return Status{Code::internal, "sm90 backward: no block-sparse kernel for these head dims"};
      }
    }
    *bytes = bwd::workspace_bytes<kQK, kV>(p);
    return Status::ok();
  });
}

// Every read queued on the call's stream, then one synchronization: the one a validation-mode
// call makes.
Status read_to_host(std::span<const detail::HostRead> reads, Device device, void* stream) {
  const DeviceGuard guard(device.index);
  const auto queue = static_cast<cudaStream_t>(stream);
  auto failed = [](const std::string& what, cudaError_t error) {
    (void)cudaGetLastError();  // reported here: the caller's next CUDA call must not see it
    return Status{Code::cuda, "sm90: " + what + ": " + cudaGetErrorString(error)};
  };
  for (const detail::HostRead& read : reads) {
    if (read.row_bytes == 0 || read.rows == 0) continue;
    const cudaError_t error =
        read.rows == 1 ? cudaMemcpyAsync(read.host, read.device, read.row_bytes,
                                         cudaMemcpyDeviceToHost, queue)
                       : cudaMemcpy2DAsync(read.host, read.row_bytes, read.device,
                                           read.device_pitch, read.row_bytes, read.rows,
                                           cudaMemcpyDeviceToHost, queue);
    if (error != cudaSuccess)
      return failed(std::string("reading ") + read.name + " to the host", error);
  }
  if (const cudaError_t error = cudaStreamSynchronize(queue); error != cudaSuccess)
    return failed("waiting for the reads to the host", error);
  return Status::ok();
}

// No KV quantizer here writes or reads an FP8 MLA record: refused by name before the kernels.
Status quantize_kv_checked(const detail::QuantizeProblem& p) {
  HFA_RETURN_IF_ERROR(detail::refuse_mla_quantize_on_gpu(p, "sm90 KV quantizer"));
  return quantize_kv(p);
}

const detail::Backend kBackend{
    .name = "sm90",
    .forward = forward,
    .forward_workspace_size = forward_workspace_size,
    .backward = backward,
    .backward_workspace_size = backward_workspace_size,
    .forward_kvcache = kvcache_checked<forward_kvcache>,
    .forward_kvcache_workspace_size =
        kvcache_checked<forward_kvcache_workspace_size, std::size_t*>,
    .quantize_kv = quantize_kv_checked,
    .quantize_fp8 = quantize_fp8,
    .hadamard_signs = hadamard_signs,
    .merge_partials = merge_partials,
    .read_to_host = read_to_host,
};

}  // namespace
}  // namespace hfa::sm90

namespace hfa::detail {
const Backend* sm90_backend() { return &sm90::kBackend; }
}  // namespace hfa::detail

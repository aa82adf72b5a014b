// Host side of the decode path: a call's plan (whether the kernels take it, its split count, the
// workspace it needs) and the launch. One launch per q dtype, each in its own .cu file.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/kvcache_problem.hpp"

namespace hfa::sm90::decode {

inline constexpr const char* kFamily = "sm90 KV-cache forward";

// What one call runs, decided from the problem's shapes and the device, never from values on the
// device (so that a call stays free of host syncs): made once by each entry (entry.cpp) and
// carried to the launch.
struct Plan {
  int splits = 1;  // the uniform plan's, per (sequence, kv-head, row tile)
  // > 0: the balanced schedule instead (MLA's kernels, split_schedule.hpp), over this many
  // persistent CTAs per (kv-head, row tile); splits is then 1.
  int parts = 0;
  std::size_t workspace_bytes = 0;  // of the caller's workspace (plan.cpp says what it holds)
};

// The plan, or why there is none: not_supported naming what this GPU path lacks, no usable Hopper
// GPU at the problem's device, or an sm_margin that leaves it no SM.
Status make_plan(const detail::KVCacheProblem& problem, Plan* plan);

// The most query rows one sequence has, which sizes the grid's row tiles: seqlen_q, or for
// varlen queries max_seqlen_q (at most total_q: a loose bound costs no more than every row).
int32_t longest_query_rows(const detail::KVCacheProblem& problem);

// Launches the attention (and the combine of its splits) on the problem's stream.
template <typename Element>
Status run(const detail::KVCacheProblem& problem, const Plan& plan);

// Launches an MLA decode kernel (headdim 576 / 512, v_cache the view of k_cache: mla_launch.cuh)
// on the plan's work (the balanced schedule, written by its kernel just before, or the uniform
// plan's splits) and the combine of what it split: run_mla on a cache of q's dtype, run_mla_fp8
// on FlashMLA's FP8 records (bf16 q). make_plan has admitted the problem.
template <typename Element>
Status run_mla(const detail::KVCacheProblem& problem, const Plan& plan);
Status run_mla_fp8(const detail::KVCacheProblem& problem, const Plan& plan);

}  // namespace hfa::sm90::decode

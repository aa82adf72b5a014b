/* hfa: exact attention, softmax(Q·Kᵀ·scale)·V, for Hopper GPUs and CPUs.
 *
 * The C ABI. Every function validates every argument and returns a status; on failure
 * hfa_last_error() names the argument at fault, and no output has been written.
 * Tensors are views over caller memory: hfa never copies inputs and never allocates
 * on the hot path (scratch memory, where a call needs it, is the caller's workspace). */
#ifndef HFA_H
#define HFA_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define HFA_API __declspec(dllexport)
#else
#define HFA_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The enums' fields take any int32 from a C caller, and hfa rejects the unknown values by name. In
 * C++ they get int32_t as their fixed type, so that such a value is one the enum may hold (C++
 * leaves loading a value outside an enum's range undefined); the ABI is C's either way. */
#ifdef __cplusplus
#define HFA_ENUM(name) enum name : int32_t
#else
#define HFA_ENUM(name) enum name
#endif

typedef HFA_ENUM(hfa_status) {
  HFA_SUCCESS = 0,
  HFA_ERROR_INVALID_ARGUMENT = 1, /* the call is malformed; the message names the argument */
  HFA_ERROR_NOT_SUPPORTED = 2,    /* well-formed, but this build or device cannot run it */
  HFA_ERROR_CUDA = 3,             /* the CUDA runtime reported an error */
  HFA_ERROR_INTERNAL = 4
} hfa_status;

typedef HFA_ENUM(hfa_dtype) {
  HFA_F32 = 0,
  HFA_F16 = 1,
  HFA_BF16 = 2,
  HFA_E4M3 = 3,
  HFA_E5M2 = 4,
  HFA_I32 = 5, /* cu_seqlens */
  /* KV-cache storage (hfa_forward_kvcache only). */
  HFA_FP4_E2M1X2 = 6, /* two FP4 E2M1 values per byte, element 2i in the low nibble; a tensor's
                         last extent counts bytes (headdim / 2) */
  HFA_UE8M0 = 7       /* a power-of-two scale 2^(e - 127), one byte (MXFP4 block scales) */
} hfa_dtype;

typedef HFA_ENUM(hfa_device_kind) { HFA_CPU = 0, HFA_CUDA = 1 } hfa_device_kind;

#define HFA_MAX_RANK 4

/* A strided view over memory the caller owns. Strides count elements, not bytes; data is aligned
 * to the dtype's size (as any framework's tensor is), or null for a tensor with no elements. */
typedef struct hfa_tensor {
  void* data;
  hfa_dtype dtype;
  int32_t rank;
  int64_t shape[HFA_MAX_RANK];
  int64_t stride[HFA_MAX_RANK];
  hfa_device_kind device;
  int32_t device_index;
} hfa_tensor;

/* Memory shared between tensors. Inputs may overlap one another freely (they are only read):
 * q, k and v as views of one packed QKV buffer, one tensor as both k_cache and v_cache. A tensor
 * a call writes (its outputs; for hfa_forward_kvcache with k_new, also k_cache, v_cache and
 * scales with one per row, which the append writes) shares no byte with any other tensor of the
 * call, input or output, and no two of its own elements share a byte. Outputs may still be
 * interleaved views of one buffer that share no byte (dq, dk and dv of one packed dqkv; k_cache
 * and v_cache of one KV pool). The one exception is an update in place where the operation is
 * one: hfa_merge_partials' out may be the very view (same data, dtype, shape and strides) of an
 * outs[i], and its lse of an lses[i]. A call that breaks the rule fails with
 * HFA_ERROR_INVALID_ARGUMENT before anything is written, by a message naming both tensors
 * ("out: overlaps k (...)", "lse: overlaps out (...)") or the elements that meet
 * ("out: elements (0, 0, 1, 0) and (0, 0, 0, 32) share memory (...)"). The check is pointer
 * arithmetic on the views (no device access, no synchronization) and exact: views that share no
 * byte pass whatever their strides; only strides that interleave irregularly (no framework's
 * layout), where the search for a shared byte is cut short, may leave an overlap unseen. The
 * workspace (hfa_options.workspace) is not a tensor and is not checked: keep it apart. */

/* Options shared by forward and backward. Start from hfa_default_options(). */
typedef struct hfa_options {
  int32_t has_softmax_scale; /* 0: scale = 1/sqrt(headdim_qk) */
  float softmax_scale;
  int32_t causal;            /* bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q */
  int32_t window_left;       /* sliding window, bottom-right aligned; -1 = unbounded */
  int32_t window_right;
  float softcap;             /* > 0: scores become softcap·tanh(scores/softcap); 0 = off */

  /* Variable-length batches: q, k, v, out are (total_tokens, heads, headdim) and
   * cu_seqlens_* (int32, batch + 1, on the tensors' device) delimit the sequences.
   * max_seqlen_* bound the lengths (they size the launch). NULL = fixed length. */
  const hfa_tensor* cu_seqlens_q;
  const hfa_tensor* cu_seqlens_k;
  int32_t max_seqlen_q;
  int32_t max_seqlen_k;

  int32_t deterministic;     /* backward: reproducible accumulation order */

  void* stream;              /* cudaStream_t for CUDA tensors; ignored on the CPU */
  void* workspace;           /* scratch from the caller, sized by hfa_*_workspace_size */
  size_t workspace_bytes;

  /* Added after the fields above, which keep their offsets. All optional (NULL = off), all on
   * the tensors' device. */

  /* Learnable attention sinks (gpt-oss): fp32, contiguous (heads_q). Each query row's softmax
   * denominator gains exp(sinks[h]), a logit in the units of the scaled (and softcapped)
   * scores that contributes no value. LSE includes it: a row that sees no key gets O = 0 and
   * LSE = sinks[h]. */
  const hfa_tensor* sinks;
  /* Used lengths of a padded allocation: int32, contiguous (batch). Only the first
   * seqused_q[b] query rows and seqused_k[b] keys of sequence b take part (fixed length or
   * varlen); causal and window alignment use these lengths. The forward leaves the out and lse
   * rows beyond seqused_q[b] untouched; the backward writes zeros to the dq rows beyond
   * seqused_q[b] and the dk/dv rows beyond seqused_k[b] (their true gradient) and never reads
   * the out, lse or dout rows beyond them. On the CPU each value is checked to lie in
   * [0, the sequence's allocated length]; on a GPU the values are trusted. */
  const hfa_tensor* seqused_q;
  const hfa_tensor* seqused_k;
  /* Backward only (the forward ignores it): the gradient of sinks, fp32, contiguous
   * (heads_q), overwritten: dsinks[h] = -sum over batch and rows of P_sink * rowsum(dO*O),
   * P_sink = exp(sinks[h] - LSE). Needs sinks; NULL: not wanted. */
  const hfa_tensor* dsinks;

  /* Added after the fields above, which keep their offsets. FP8 inputs (forward only): q, k
   * and v all HFA_E4M3, out HFA_BF16 or HFA_F16 (HFA_F32 too on the CPU), lse fp32 as usual.
   * The value of a code is code · descale. Each descale is optional (NULL: every scale is 1),
   * fp32, on the tensors' device, any strides (0 strides broadcast), and one of:
   *   - rank 1 of extent 1: one scale for the whole tensor;
   *   - rank 2 (batch, heads_kv): FlashAttention-3's q_descale / k_descale / v_descale, one
   *     scale per sequence and kv-head (for q, per sequence and GQA group); q_descale may also
   *     be (batch, heads_q);
   *   - rank 3 (batch, num_blocks, heads): one scale per block of descale_block_q (for q) or
   *     descale_block_kv (for k and v) rows counted from each sequence's first row: row r of
   *     sequence b has the scale of block r / block. heads is heads_q or heads_kv for q,
   *     heads_kv for k and v; num_blocks >= ceil(seqlen / block), seqlen being seqlen_q or
   *     seqlen_k (varlen: max_seqlen_q / max_seqlen_k).
   * batch counts sequences (varlen: cu_seqlens' length - 1). A rank-3 descale needs its block
   * option > 0, and a block option > 0 needs a rank-3 descale (for descale_block_kv: k's or
   * v's). On a GPU descale_block_kv must be a multiple of 128, the FP8 kernels' keys per tile
   * (one scale per tile of keys); otherwise HFA_ERROR_NOT_SUPPORTED. Descales with inputs of
   * another dtype are an invalid argument. The backward takes no FP8 inputs
   * (HFA_ERROR_NOT_SUPPORTED). Every scale must be positive and finite (hfa_quantize_fp8's
   * are): a GPU does not read them back to check, and a zero v scale of a block divides by 0.
   * A GPU's FP8 forward transposes v into the workspace first (hfa_forward_workspace_size
   * counts it), with the keys past seqused_k zeroed there. */
  const hfa_tensor* q_descale;
  const hfa_tensor* k_descale;
  const hfa_tensor* v_descale;
  int32_t descale_block_q;  /* rows per block of a rank-3 q_descale; 0 = none */
  int32_t descale_block_kv; /* rows (keys) per block of a rank-3 k_descale / v_descale */

  /* Added after the fields above, which keep their offsets. SMs to leave free for kernels that
   * run beside this call, e.g. NCCL's in a context-parallel ring (FlashAttention-3's
   * sm_margin); 0 = use every SM. Must be >= 0, and on a GPU below its SM count
   * (HFA_ERROR_INVALID_ARGUMENT otherwise; the workspace queries, whose answers do not depend
   * on it, check only the sign). The forward's persistent grid then has at most
   * SM count - sm_margin CTAs (FlashAttention-3's rule), so sm_margin SMs stay free for other
   * kernels while it runs.
   * The backward's grid is not persistent (one CTA per key block, handed out by the hardware
   * as SMs free up): it accepts and checks sm_margin but is not limited by it.
   * The CPU ignores it. */
  int32_t sm_margin;

  /* Added after the fields above, which keep their offsets. Attention split over keys (the
   * steps of a context-parallel ring, a KV cache split across GPUs): partial results merged by
   * their LSEs, in fp32.
   * Forward: out may be HFA_F32 for f16/bf16 inputs too, the result before any rounding; on a
   * GPU such a call takes no softcap (HFA_ERROR_NOT_SUPPORTED).
   * accumulate (forward only; the backward ignores it): nonzero merges this call's result into
   * out and lse instead of overwriting them. They hold the result of the same queries over
   * other keys (earlier calls) and become the result over all of those keys and this call's:
   *   lse = log(exp(lse_before) + exp(lse_call)),
   *   out = exp(lse_before − lse) · out_before + exp(lse_call − lse) · out_call,
   * hfa_merge_partials' formula (outs[0] the running result, outs[1] this call's). Needs out
   * HFA_F32 and lse. A row whose lse is −inf has no result yet: its out is not read (it may
   * hold anything), so a series starts from lse = −inf everywhere, or with a first call that
   * does not accumulate. A row this call's keys do not reach keeps its values. Rows beyond
   * seqused_q are not touched, as ever. Sinks join this call's denominator: pass them to one
   * call of a series. */
  int32_t accumulate;
  /* Backward only (the forward ignores it): D = rowsum(dout ∘ out) in fp32, shaped and laid
   * out like lse ((batch, heads_q, seqlen_q), varlen (heads_q, total_q); unit last stride).
   * Given, the backward reads D instead of computing it from dout and out, and reads no out
   * (a ring's steps share the final out's D: compute it once). NULL: computed. */
  const hfa_tensor* softmax_d;
} hfa_options;

HFA_API hfa_options hfa_default_options(void);

/* out = softmax(q·kᵀ·scale)·v. Fixed length: q (batch, seqlen_q, heads_q, d_qk),
 * k (batch, seqlen_k, heads_kv, d_qk), v (batch, seqlen_k, heads_kv, d_v),
 * out (batch, seqlen_q, heads_q, d_v), of q's dtype (or HFA_F32: hfa_options.accumulate).
 * lse (optional, may be NULL): fp32, natural log, (batch, heads_q, seqlen_q), or
 * (heads_q, total_q) for varlen, with a unit last stride (a slice of a longer one works).
 * On a GPU, q, k, v (and the backward's dout) are read by TMA: 16-byte aligned data, row, head
 * and batch strides multiples of 16 bytes (a dim of one element excepted), and no zero stride
 * over several rows or heads (a broadcast view: HFA_ERROR_NOT_SUPPORTED; pass a copy). */
HFA_API hfa_status hfa_forward(const hfa_tensor* q, const hfa_tensor* k, const hfa_tensor* v,
                               const hfa_tensor* out, const hfa_tensor* lse,
                               const hfa_options* options);
HFA_API hfa_status hfa_forward_workspace_size(const hfa_tensor* q, const hfa_tensor* k,
                                              const hfa_tensor* v, const hfa_options* options,
                                              size_t* bytes);

/* Gradients of the forward above. lse is the one forward returned. With GQA, dk and dv
 * hold the sum over the query heads of each group. */
HFA_API hfa_status hfa_backward(const hfa_tensor* dout, const hfa_tensor* q, const hfa_tensor* k,
                                const hfa_tensor* v, const hfa_tensor* out, const hfa_tensor* lse,
                                const hfa_tensor* dq, const hfa_tensor* dk, const hfa_tensor* dv,
                                const hfa_options* options);
HFA_API hfa_status hfa_backward_workspace_size(const hfa_tensor* q, const hfa_tensor* k,
                                               const hfa_tensor* v, const hfa_options* options,
                                               size_t* bytes);

/* Attention of a few new query tokens over a KV cache (decode, speculative verification,
 * chunked prefill).
 *
 * q: (batch, seqlen_q, heads_q, d) f16/bf16 (f32 on the CPU). out: as q, headdim d_v.
 * lse (optional): fp32, contiguous (batch, heads_q, seqlen_q), natural log. With
 * options->cu_seqlens_q (varlen queries) q and out are (total_q, heads_q, d) and lse is
 * (heads_q, total_q), as in hfa_forward's varlen.
 * k_cache / v_cache, paged (block_table given): (num_pages, page_size, heads_kv, d), any
 * strides with a unit last stride; token j of sequence b lives in page
 * block_table[b][j / page_size], slot j % page_size. Contiguous (block_table NULL):
 * (batch, max_seqlen_cache, heads_kv, d). Sequence b attends to its first cache_seqlens[b]
 * tokens, plus its new tokens when options->k_new / v_new append some first (see there).
 * Cache formats, told apart by the caches' dtype and k_scale's dtype:
 *   - q's dtype: plain; no scales.
 *   - HFA_E4M3 with fp32 k_scale / v_scale: per kv-head (heads_kv), or per (token, kv-head),
 *     shaped like the cache without d ((num_pages, page_size, heads_kv) or
 *     (batch, max_seqlen_cache, heads_kv)); value = e4m3 · scale (src/quant/fp8_kv.hpp).
 *   - NVFP4: HFA_FP4_E2M1X2 caches (last extent d / 2), HFA_E4M3 k_scale / v_scale shaped like
 *     the cache with last extent d / 16, and fp32 k_global_scale / v_global_scale of shape (1);
 *     value = e2m1 · (e4m3 · global) (src/quant/nvfp4.hpp).
 *   - MXFP4: HFA_FP4_E2M1X2 caches, HFA_UE8M0 k_scale / v_scale with last extent d / 32, no
 *     global scale; value = e2m1 · 2^(scale − 127) (src/quant/mxfp4.hpp).
 * Causal and windows are bottom-right aligned within each sequence: query i sees cache key j
 * iff j <= cache_seqlens[b] - seqlen_q + i (+ window_right), as in hfa_forward with
 * seqlen_k = cache_seqlens[b] (seqlen_q: sequence b's own query count when varlen). A row that
 * sees no key gets O = 0 and LSE = -inf. */
typedef struct hfa_kvcache_options {
  const hfa_tensor* cache_seqlens; /* int32, contiguous (batch); required */
  const hfa_tensor* block_table;   /* int32 (batch, max_pages), unit last stride; NULL = contiguous */
  const hfa_tensor* k_scale;       /* quantized caches only, see above */
  const hfa_tensor* v_scale;
  const hfa_tensor* k_global_scale; /* NVFP4 only: fp32 (1) */
  const hfa_tensor* v_global_scale;

  int32_t has_softmax_scale; /* 0: scale = 1/sqrt(headdim_qk) */
  float softmax_scale;
  int32_t causal;
  int32_t window_left; /* -1 = unbounded */
  int32_t window_right;
  float softcap; /* 0 = off */

  int32_t num_splits; /* split-KV: chunks per sequence merged by LSE; 0 = chosen by hfa */
  /* Nonzero: read block_table and cache_seqlens before the attention and reject the first
   * entry out of range (also turned on by the environment variable HFA_VALIDATE_KVCACHE=1).
   * CPU tensors are always checked; CUDA tensors only in this mode (it costs a copy and a
   * sync). */
  int32_t validate;

  void* stream; /* cudaStream_t for CUDA tensors; ignored on the CPU */
  void* workspace;
  size_t workspace_bytes;

  /* Added after the fields above, which keep their offsets. All optional (NULL = off). */

  /* New tokens appended to the cache in place before the attention (FlashAttention's k / v):
   * k_new (batch, seqlen_new, heads_kv, headdim), v_new (batch, seqlen_new, heads_kv, headdim_v),
   * q's dtype, unit last stride. Token i of sequence b is written at position
   * cache_seqlens[b] + i (the cache must have room), encoded in the cache's format: FP8 per
   * kv-head with the given scale, FP8 per token with a new scale, NVFP4 with the given global
   * scale, MXFP4 (the same encoders as src/quant). The attention then covers
   * cache_seqlens[b] + seqlen_new keys; cache_seqlens itself is not updated. A GPU writes the
   * bytes the CPU writes, on options->stream before the attention; a token whose position falls
   * outside the cache (lengths out of contract, unchecked outside validation mode) is dropped.
   * With cu_seqlens_k_new (below) each sequence appends its own number of tokens. */
  const hfa_tensor* k_new;
  const hfa_tensor* v_new;
  /* Rotary embedding of k_new and q (needs k_new): cos and sin (seqlen_ro, rotary_dim / 2),
   * fp32 or q's dtype, unit last stride; the first rotary_dim dims of each row rotate. New token
   * i of sequence b sits at position cache_seqlens[b] + i; q row i at the same position when
   * causal or windowed, else at cache_seqlens[b] (FlashAttention's rule; with cu_seqlens_q, i
   * counts sequence b's own rows, as FlashAttention-3 does, whatever its number of new tokens).
   * Every position a new token or a query row takes must be below seqlen_ro. The CPU keeps the
   * rotated q in fp32; a GPU rounds it to q's dtype into the front of options->workspace
   * (counted by hfa_forward_kvcache_workspace_size). */
  const hfa_tensor* rotary_cos;
  const hfa_tensor* rotary_sin;
  int32_t rotary_interleaved; /* nonzero: pairs (2j, 2j+1) (GPT-J); 0: (j, j + rotary_dim/2) */

  /* Added after the fields above. Keys per split-KV chunk, 0 = off: sequence b's keys split at
   * fixed boundaries j·split_size, so its result does not depend on the other sequences of the
   * batch (batch-invariant serving). Excludes num_splits > 0; the chunks of one sequence are at
   * most 256 (split_size >= ceil(cache capacity / 256)). Any value from there up: on a GPU a
   * chunk need not start at a multiple of the kernel's 64-key stage. */
  int32_t split_size;

  /* Added after the fields above, which keep their offsets. Varlen queries (FlashAttention-3's
   * cu_seqlens_q, for chunked prefill and speculative decoding mixed with plain decode): int32,
   * contiguous (batch + 1), on q's device, starting at 0, never decreasing, ending at total_q;
   * sequence b's query rows are q[cu_seqlens_q[b] .. cu_seqlens_q[b + 1]) (0 rows is fine).
   * batch is cache_seqlens' length. max_seqlen_q (>= 1, >= every sequence's rows) sizes the GPU
   * launch; 0 without cu_seqlens_q. The values are checked on the CPU, and on a GPU in validation
   * mode only. */
  const hfa_tensor* cu_seqlens_q;
  int32_t max_seqlen_q;

  /* Added after the fields above, which keep their offsets. Varlen new tokens (FlashAttention-3's
   * cu_seqlens_k_new, for appends of different lengths in one call: chunked prefill, speculative
   * and plain decode): int32, contiguous (batch + 1), on q's device, starting at 0, never
   * decreasing, ending at total_k_new. k_new and v_new are then packed (total_k_new, heads_kv,
   * headdim): sequence b appends rows k_new[cu_seqlens_k_new[b] .. cu_seqlens_k_new[b + 1])
   * (new_b of them, 0 is fine) at positions cache_seqlens[b] + i and attends to
   * cache_seqlens[b] + new_b keys. Needs k_new; works with fixed-length and varlen queries alike
   * (the query rows and the new tokens of a sequence are counted apart). The values are checked
   * like cu_seqlens_q's. NULL: seqlen_new tokens each. */
  const hfa_tensor* cu_seqlens_k_new;

  /* Added after the fields above, which keep their offsets. SMs to leave free for kernels that
   * run beside this call (hfa_options.sm_margin): >= 0, and on a GPU below its SM count. The
   * decode grid is not persistent, so this reserves no SM outright: the automatic split count
   * (num_splits = 0) is planned for SM count - sm_margin SMs, so that the call's CTAs leave
   * that many SMs' worth of room. A given num_splits or split_size is used as it is. Being part
   * of the plan, it changes hfa_forward_kvcache_workspace_size's answer like num_splits does.
   * The CPU ignores it. */
  int32_t sm_margin;
} hfa_kvcache_options;

HFA_API hfa_kvcache_options hfa_default_kvcache_options(void);

/* options may be NULL only to get an error: cache_seqlens is required. On a Hopper GPU:
 * bf16/fp16 q, headdim 64, 128 or 256 (the same for K and V), cache rows (and FP4/per-token
 * scale rows) at 16-byte (4-byte) aligned addresses and strides (MXFP4 at headdim 64: its
 * 2-byte scale rows padded to 4); other CUDA calls answer HFA_ERROR_NOT_SUPPORTED (the CPU
 * backend implements everything above). The fast path: headdim 128, at most 8 query rows per
 * kv-head (heads_q / heads_kv · seqlen_q), a contiguous cache or a page size that is a multiple
 * of 16. A CUDA call makes no allocation and no host synchronization (validation mode aside):
 * split partials and rotated queries go to options->workspace, sized by the query below. */
HFA_API hfa_status hfa_forward_kvcache(const hfa_tensor* q, const hfa_tensor* k_cache,
                                       const hfa_tensor* v_cache, const hfa_tensor* out,
                                       const hfa_tensor* lse, const hfa_kvcache_options* options);
/* Bytes of workspace hfa_forward_kvcache needs with these tensors and options: 0 on the CPU; on a
 * GPU the rotated queries of an append with rotary (rounded up to 256 bytes), then the split
 * partials (none for one split). Depends on shapes, num_splits and the device, never on the
 * lengths' values. */
HFA_API hfa_status hfa_forward_kvcache_workspace_size(const hfa_tensor* q,
                                                      const hfa_tensor* k_cache,
                                                      const hfa_tensor* v_cache,
                                                      const hfa_kvcache_options* options,
                                                      size_t* bytes);

/* Quantizing KV rows into the cache formats hfa_forward_kvcache reads, and back: the bytes the
 * append (hfa_kvcache_options.k_new / v_new) writes for the same values, on the CPU and on a GPU
 * alike (one encoder, src/quant). For filling a cache ahead of decode (a prefill's keys and
 * values), calibrating, or inspecting a cache.
 *
 * values (x to quantize, out of a dequantization): f32, f16 or bf16, rank 2 to 4 with the kv-head
 * and headdim last: (heads_kv, d), (tokens, heads_kv, d) or (pages or batch, page_size or
 * seqlen, heads_kv, d); unit last stride, any other strides (a slice of a cache works).
 * codes: values' shape with last extent d (HFA_E4M3) or d / 2 (HFA_FP4_E2M1X2, two a byte).
 * scale, by format:
 *   - HFA_KV_FP8_PER_HEAD: fp32 (heads_kv), an input in both directions: the calibrated scale
 *     the cache uses (the append takes it as given too); value = e4m3 · scale.
 *   - HFA_KV_FP8_PER_TOKEN: fp32, values' shape without d; quantize writes amax / 448 per row.
 *   - HFA_KV_NVFP4: HFA_E4M3, values' shape with last extent d / 16 (written by quantize), and
 *     options->global_scale, fp32 (1), an input (the cache's k_global_scale / v_global_scale).
 *   - HFA_KV_MXFP4: HFA_UE8M0, values' shape with last extent d / 32 (written by quantize).
 * All tensors on one device. On a GPU: d of 64, 128 or 256 and code rows at 16-byte aligned
 * addresses and strides (as the cache the decode reads); the call is queued on options->stream
 * with no allocation and no synchronization. options is required (it names the format). */
typedef HFA_ENUM(hfa_kv_format) {
  HFA_KV_FP8_PER_HEAD = 1,
  HFA_KV_FP8_PER_TOKEN = 2,
  HFA_KV_NVFP4 = 3,
  HFA_KV_MXFP4 = 4
} hfa_kv_format;

typedef struct hfa_quantize_options {
  hfa_kv_format format;
  const hfa_tensor* global_scale; /* NVFP4 only: fp32 (1), on the tensors' device */
  void* stream;                   /* cudaStream_t for CUDA tensors; ignored on the CPU */
} hfa_quantize_options;

/* codes (and, but for FP8 per kv-head, scale) are written. */
HFA_API hfa_status hfa_quantize_kv(const hfa_tensor* x, const hfa_tensor* codes,
                                   const hfa_tensor* scale, const hfa_quantize_options* options);
/* out = the values the decode reads from codes and scale. */
HFA_API hfa_status hfa_dequantize_kv(const hfa_tensor* codes, const hfa_tensor* scale,
                                     const hfa_tensor* out, const hfa_quantize_options* options);

/* Quantizing attention inputs (q, k, v) to FP8 E4M3 for the FP8 forward, whose descales they
 * are: value = code · scale. Optionally rotated first (incoherent processing, FlashAttention-3
 * §3.3): y = H_d · diag(signs) · x_row / sqrt(d) over the head dim, H_d the Walsh–Hadamard
 * matrix, so outliers spread across the row. Rotate q and k with the same signs: Q·Kᵀ is
 * unchanged in exact arithmetic (the rotation is orthogonal). Never rotate v (the output would
 * come out rotated).
 *
 * x: (batch, seqlen, heads, d), or with options->cu_seqlens (varlen) (total, heads, d); f32, f16
 * or bf16, unit last stride. codes: HFA_E4M3, x's shape, unit last stride. scale: fp32,
 * contiguous, one per group, in the FP8 forward's descale shapes:
 *   - HFA_FP8_PER_TENSOR: (1).
 *   - HFA_FP8_PER_HEAD: (batch, heads), batch = the number of sequences when varlen.
 *   - HFA_FP8_PER_BLOCK: (batch, num_blocks, heads), blocks of block_rows rows counted from each
 *     sequence's first row; num_blocks = ceil(seqlen / block_rows), or, varlen, at least every
 *     sequence's blocks (blocks beyond a sequence's rows get scale 1).
 * scale = amax(|y| over the group) / 448, at least 2^-126; a group of zeros gets 1 (never 0: a
 * zero descale would turn every value into 0 and hide the error), one holding inf or NaN NaN.
 * code = e4m3(y / scale), rounded to nearest even, saturating at ±448 (src/quant). The CPU and a
 * GPU write the same bytes (the butterfly order is fixed: src/quant/hadamard.hpp).
 * On a GPU: d of 64, 128 or 256, x and code rows at 16-byte aligned addresses and strides; the
 * call is queued on options->stream (no allocation, no synchronization). cu_seqlens values are
 * checked on the CPU only (as everywhere); signs must be ±1 (checked on the CPU; a GPU reads
 * only their sign bits). */
typedef HFA_ENUM(hfa_fp8_granularity) {
  HFA_FP8_PER_TENSOR = 1,
  HFA_FP8_PER_HEAD = 2,
  HFA_FP8_PER_BLOCK = 3
} hfa_fp8_granularity;

typedef struct hfa_quantize_fp8_options {
  hfa_fp8_granularity granularity;
  int32_t block_rows;           /* HFA_FP8_PER_BLOCK only: rows per block, >= 1; else 0 */
  const hfa_tensor* cu_seqlens; /* varlen: int32, contiguous (batch + 1), on x's device; NULL */
  const hfa_tensor* signs;      /* rotation: fp32, contiguous (d) of ±1; NULL = no rotation.
                                   d must then be 64, 128 or 256 */
  void* stream;                 /* cudaStream_t for CUDA tensors; ignored on the CPU */
} hfa_quantize_fp8_options;

/* codes and scale are written. options is required (it names the granularity). */
HFA_API hfa_status hfa_quantize_fp8(const hfa_tensor* x, const hfa_tensor* codes,
                                    const hfa_tensor* scale,
                                    const hfa_quantize_fp8_options* options);
/* Fills signs (fp32, contiguous (d), CPU or CUDA) with ±1: element i is the sign of the i-th
 * splitmix64 output after `seed`, the same on every device. A CUDA call is queued on stream. */
HFA_API hfa_status hfa_hadamard_signs(uint64_t seed, const hfa_tensor* signs, void* stream);

/* Merging partial attention results of the same queries over disjoint sets of keys (ring
 * attention's steps, a KV cache split over GPUs, split-KV) into one, by their LSEs:
 *   lse = log Σ_i exp(lse_i), computed from the largest lse_i (nothing overflows),
 *   out = Σ_i exp(lse_i − lse) · out_i, accumulated in fp32.
 * A partial whose lse_i is −inf for a row (it saw none of the row's keys) is skipped: that row
 * of outs[i] is never read, so it may hold anything, NaN included. A row whose every lse_i is
 * −inf (masked everywhere) gets out = 0 and lse = −inf, never NaN; an lse_i of NaN or +inf
 * makes the row NaN.
 *
 * outs[i], lses[i] for i < num_partials, 1 <= num_partials <= HFA_MAX_MERGE_PARTIALS:
 *   - outs[i]: f32, bf16 or f16 (each its own), (batch, seqlen_q, heads, hdim_v), or varlen
 *     (total_q, heads, hdim_v); unit last stride, any other strides.
 *   - lses[i]: f32, natural log, (batch, heads, seqlen_q), or varlen (heads, total_q): the
 *     layout hfa_forward writes; any strides.
 * out: f32, bf16 or f16, outs' shape, unit last stride. lse: f32, lses' shape, or NULL (not
 * wanted). The layout (varlen or not) is out's rank; no cu_seqlens is needed (rows merge one
 * by one).
 * In place: out may be the very view outs[i] is (the same data, dtype and strides) and lse the
 * very view lses[i] is, e.g. a ring's running fp32 accumulator as outs[0] / lses[0]; any other
 * shared byte of an output with an input or with the other output is rejected ("Memory shared
 * between tensors", at hfa_tensor).
 * All tensors on one device. A CUDA call is queued on stream (a cudaStream_t; ignored on the
 * CPU) with no allocation and no synchronization; it reads each input once (vector loads of 4
 * values, 16 bytes of f32 or 8 of bf16/f16, where every tensor's rows are aligned to that and
 * hdim_v is a multiple of 4). */
#define HFA_MAX_MERGE_PARTIALS 16

HFA_API hfa_status hfa_merge_partials(const hfa_tensor* const* outs, const hfa_tensor* const* lses,
                                      int32_t num_partials, const hfa_tensor* out,
                                      const hfa_tensor* lse, void* stream);

/* The message of the last failed call on this thread ("" if none). */
HFA_API const char* hfa_last_error(void);
HFA_API const char* hfa_status_name(hfa_status status);
HFA_API const char* hfa_version(void);
/* Number of CUDA devices this build can use (0 without CUDA or without a GPU). */
HFA_API int32_t hfa_cuda_device_count(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HFA_H */

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
  HFA_UE8M0 = 7,      /* a power-of-two scale 2^(e - 127), one byte (MXFP4 block scales) */
  HFA_FP8_MLA = 8     /* FlashMLA's FP8 MLA token (DeepSeek-V3.2), a 656-byte record: 512 e4m3
                         latent codes, 4 fp32 scales (one per 128 of them), 64 bf16 rotary values;
                         a tensor's last extent counts bytes (src/quant/mla_fp8.hpp) */
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
 * and v_cache of one KV pool). The exceptions are updates in place where the operation is
 * one: hfa_merge_partials' out may be the very view (same data, dtype, shape and strides) of an
 * outs[i], and its lse of an lses[i]; an MLA append writes k_cache, of which v_cache is the view
 * of the first 512 columns (at hfa_forward_kvcache). A call that breaks the rule fails with
 * HFA_ERROR_INVALID_ARGUMENT before anything is written, by a message naming both tensors
 * ("out: overlaps k (...)", "lse: overlaps out (...)") or the elements that meet
 * ("out: elements (0, 0, 1, 0) and (0, 0, 0, 32) share memory (...)"). The check is pointer
 * arithmetic on the views (no device access, no synchronization) and exact: views that share no
 * byte pass whatever their strides; only strides that interleave irregularly (no framework's
 * layout), where the search for a shared byte is cut short, may leave an overlap unseen. The
 * workspace (hfa_options.workspace) is not a tensor and is not checked: keep it apart. */

/* The options structs' fields, one a row of hfa/options.def, where each is described; a row's
 * kind gives its C type: */
#define HFA_C_FIELD_FLAG(name) int32_t name; /* nonzero: on */
#define HFA_C_FIELD_INT32(name) int32_t name;
#define HFA_C_FIELD_REAL(name) float name;
#define HFA_C_FIELD_SCALE(name) int32_t has_##name; float name; /* has_<name> 0: the default */
#define HFA_C_FIELD_TENSOR(name) const hfa_tensor* name;    /* NULL: not given */
#define HFA_C_FIELD_VECTOR HFA_C_FIELD_TENSOR
#define HFA_C_FIELD_HANDLE(name) void* name;
#define HFA_C_FIELD_BYTES(name) size_t name;

/* The calls that read an option (hfa_option_info.calls); the others ignore it. */
typedef HFA_ENUM(hfa_option_calls) {
  HFA_CALL_FORWARD = 1,  /* hfa_forward, hfa_forward_workspace_size, hfa_prepare_forward */
  HFA_CALL_BACKWARD = 2, /* hfa_backward, hfa_backward_workspace_size, hfa_prepare_backward */
  HFA_CALL_KVCACHE = 4   /* hfa_forward_kvcache, hfa_forward_kvcache_workspace_size,
                            hfa_prepare_forward_kvcache */
} hfa_option_calls;

/* The shapes a VECTOR option may take (its row's `high`, a set of these bits), in the call's
 * dims: batch is the number of sequences, heads_q the query heads. */
typedef HFA_ENUM(hfa_option_shape) {
  HFA_SHAPE_HEADS = 1,       /* (heads_q) */
  HFA_SHAPE_BATCH = 2,       /* (batch) */
  HFA_SHAPE_BATCH_HEADS = 4  /* (batch, heads_q) */
} hfa_option_shape;

#define HFA_MAX_KVCACHE_SPLITS 256 /* the most split-KV chunks of one sequence */
/* A workspace's address is a multiple of this (cudaMalloc's and torch's allocations are): the
 * kernels read and write it with 16-byte vector and bulk copies. */
#define HFA_WORKSPACE_ALIGNMENT 256

/* The size of an options struct, its first field in every version: sizeof the struct as the
 * caller was compiled, set by the default initializers below (and the C++ structs' constructors).
 * A struct grows by rows appended to hfa/options.def, so a caller built against another hfa.h
 * than the library's passes another size, and every call that takes the struct refuses it
 * (HFA_ERROR_INVALID_ARGUMENT) before reading any other field:
 *   smaller ("options: struct of N bytes, this library needs M: rebuild against its hfa.h"): the
 *     caller's struct ends before rows this library reads, which would be read past its end;
 *   larger ("options: struct of N bytes, this library's has M: ..."; built against a newer
 *     hfa.h): refused too rather than read up to the library's size, since its rows past that
 *     are options this library would silently ignore, and their defaults need not be zero bytes
 *     (no content of theirs tells a call that uses none);
 *   0: a struct not started from the default initializer. */
/* Options of hfa_forward and hfa_backward (HFA_ATTENTION_OPTION rows). Start from
 * hfa_default_options(). */
typedef struct hfa_options {
  size_t struct_size; /* sizeof(hfa_options) as the caller was compiled (above) */
#define HFA_ATTENTION_OPTION(kind, name, ...) HFA_C_FIELD_##kind(name)
#include "hfa/options.def"
} hfa_options;

/* The defaults into *options, a struct of struct_size bytes, and struct_size into its first
 * field; nothing is written past struct_size bytes, and nothing at all into a struct too small
 * to hold its size. A struct of another size than the library's gets its fields up to the
 * shorter of the two, zeros past them, and is refused by the calls. Bindings that mirror the
 * struct from hfa_describe_options call it with their mirror's size; C and C++ callers use
 * hfa_default_options(), which passes the sizeof they were compiled with. */
HFA_API void hfa_init_options(hfa_options* options, size_t struct_size);

/* hfa_options with every field at its default (hfa/options.def). Defined here, not in the
 * library, so that the struct it fills and returns is the caller's own size, whatever
 * library it runs against. */
static inline hfa_options hfa_default_options(void) {
  hfa_options options;
  hfa_init_options(&options, sizeof options);
  return options;
}

/* out = softmax(q·kᵀ·scale)·v. Fixed length: q (batch, seqlen_q, heads_q, d_qk),
 * k (batch, seqlen_k, heads_kv, d_qk), v (batch, seqlen_k, heads_kv, d_v),
 * out (batch, seqlen_q, heads_q, d_v), of q's dtype (or HFA_F32: hfa_options.accumulate).
 * lse (optional, may be NULL): fp32, natural log, (batch, heads_q, seqlen_q), or
 * (heads_q, total_q) for varlen, with a unit last stride (a slice of a longer one works).
 * On a GPU, q, k, v (and the backward's dout) are read by TMA: 16-byte aligned data, row, head
 * and batch strides multiples of 16 bytes (a dim of one element excepted), and no zero stride
 * over several rows or heads (a broadcast view: HFA_ERROR_NOT_SUPPORTED; pass a copy).
 * Block-sparse attention (options->kv_num_blocks ...) takes FlexAttention's BlockMask: one per
 * sequence at fixed length; with cu_seqlens one mask over the packed tokens (batch 1, blocks
 * counted from token 0), as FlexAttention users pack documents into one sequence, ANDed with
 * the sequences' bounds (hfa/options.def says it in full, and what a GPU runs of it). */
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
 * q: (batch, seqlen_q, heads_q, d) f16/bf16 (f32 on the CPU). out: q's shape with headdim d_v,
 * of q's dtype or f32 (the result before its rounding, for a caller that scales or merges it
 * first; on the CPU only for now).
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
 * MLA (DeepSeek's Multi-head Latent Attention absorbed for decode, FlashMLA's calls) is this
 * call with its shape: q of headdim 576 ([latent 512 ; rotary 64]), one latent cache as k_cache
 * (usually heads_kv 1, page_size 64) and the view of its first 512 columns as v_cache
 * (k_cache[..., :512]: the same data and strides; inputs may share memory, below), out of
 * headdim 512. Headdim 576 takes only a V of 512, and 512 only a K of 576. Its caches: plain,
 * or HFA_FP8_MLA, FlashMLA's FP8 cache: k_cache (..., 656) of records (the latent as e4m3 with
 * a scale per 128 values, the rotary part as bf16; src/quant/mla_fp8.hpp), v_cache the view of
 * their first 512 bytes (required: V's scales are read from the record), no k_scale / v_scale.
 * An append to such a cache (options->k_new) writes each new token once, its 576-wide k_new row
 * (as bf16, or as the HFA_FP8_MLA record hfa_quantize_kv writes), through k_cache: v_new is NULL
 * or the view k_new[..., :512] (same data and strides), and no rotary tables are taken (they
 * would rotate the first columns, V's; MLA's rotary part is the last 64, the model's to rotate).
 * Sparse MLA (DeepSeek-V3.2's top-k): options->indices lists each query row's tokens.
 * Causal and windows are bottom-right aligned within each sequence: query i sees cache key j
 * iff j <= cache_seqlens[b] - seqlen_q + i (+ window_right), as in hfa_forward with
 * seqlen_k = cache_seqlens[b] (seqlen_q: sequence b's own query count when varlen). A row that
 * sees no key gets O = 0 and LSE = -inf.
 *
 * Its options: the HFA_KVCACHE_OPTION rows of hfa/options.def. Start from
 * hfa_default_kvcache_options(). */
typedef struct hfa_kvcache_options {
  size_t struct_size; /* sizeof(hfa_kvcache_options) as the caller was compiled */
#define HFA_KVCACHE_OPTION(kind, name, ...) HFA_C_FIELD_##kind(name)
#include "hfa/options.def"
} hfa_kvcache_options;

/* As hfa_init_options and hfa_default_options, for hfa_kvcache_options. */
HFA_API void hfa_init_kvcache_options(hfa_kvcache_options* options, size_t struct_size);

static inline hfa_kvcache_options hfa_default_kvcache_options(void) {
  hfa_kvcache_options options;
  hfa_init_kvcache_options(&options, sizeof options);
  return options;
}

/* options may be NULL only to get an error: cache_seqlens (or indices) is required. On a Hopper
 * GPU: bf16/fp16 q, headdim 64, 128 or 256 (the same for K and V), cache rows (and
 * FP4/per-token scale rows) at 16-byte (4-byte) aligned addresses and strides (MXFP4 at headdim
 * 64: its 2-byte scale rows padded to 4); MLA (headdim 576 / 512) with pages of 64 through a
 * block table, a cache of q's dtype or HFA_FP8_MLA records with bf16 q. Other CUDA calls answer
 * HFA_ERROR_NOT_SUPPORTED (the CPU backend implements everything above) by the argument that
 * asks for more (MLA: indices, other page sizes, softcap, ALiBi, appends). The fast path:
 * headdim 128, at most 8 query rows per kv-head (heads_q / heads_kv · seqlen_q), a contiguous
 * cache or a page size that is a multiple of 16. A CUDA call makes no allocation and no host synchronization (validation mode aside):
 * split partials and rotated queries go to options->workspace, sized by the query below. */
HFA_API hfa_status hfa_forward_kvcache(const hfa_tensor* q, const hfa_tensor* k_cache,
                                       const hfa_tensor* v_cache, const hfa_tensor* out,
                                       const hfa_tensor* lse, const hfa_kvcache_options* options);
/* Bytes of workspace hfa_forward_kvcache needs with these tensors and options: 0 on the CPU; on a
 * GPU the rotated queries of an append with rotary (rounded up to 256 bytes), then the split
 * partials (none for one split), or for MLA's balanced schedule (num_splits and split_size 0,
 * fixed-length queries) the partials of the most sequences it can split and the schedule itself,
 * which a call computes on the device into this workspace (unless options->reuse_schedule finds it
 * there). Depends on shapes, num_splits and the device, never on the lengths' values. */
HFA_API hfa_status hfa_forward_kvcache_workspace_size(const hfa_tensor* q,
                                                      const hfa_tensor* k_cache,
                                                      const hfa_tensor* v_cache,
                                                      const hfa_kvcache_options* options,
                                                      size_t* bytes);

/* A prepared call: hfa_forward, hfa_backward or hfa_forward_kvcache validated once into a plan
 * (the problem as the backends take it, and the workspace it needs), then run by hfa_run, which
 * validates nothing again. The three calls are a prepare and a run; a caller that allocates the
 * workspace per call prepares, allocates *workspace_bytes, runs: one validation, where the
 * *_workspace_size query and the call make two.
 *
 * hfa_prepare_* take the arguments of the call they name and check them as it does, all but the
 * workspace: options->workspace and workspace_bytes are not read. They write the call into *call,
 * storage the caller owns (no allocation), and the bytes of workspace it needs into
 * *workspace_bytes (0: none; workspace_bytes may be NULL). On failure *call holds no call and
 * *workspace_bytes is left as it was.
 *
 * A prepared call holds what the tensors and options say (addresses, shapes, strides, values),
 * not the structs: those may go once it is prepared, and a copy of the call runs as well. The
 * memory they view must stay valid until it has run, and what was read of it while preparing
 * (cu_seqlens, seqused, cache_seqlens and block_table of CPU tensors) unchanged: hfa_run checks
 * none of it again. hfa_run leaves the call as it was; it may run again. */
#define HFA_CALL_BYTES 2048

typedef struct hfa_call {
  uint64_t opaque[HFA_CALL_BYTES / 8];
} hfa_call;

HFA_API hfa_status hfa_prepare_forward(const hfa_tensor* q, const hfa_tensor* k,
                                       const hfa_tensor* v, const hfa_tensor* out,
                                       const hfa_tensor* lse, const hfa_options* options,
                                       hfa_call* call, size_t* workspace_bytes);
HFA_API hfa_status hfa_prepare_backward(const hfa_tensor* dout, const hfa_tensor* q,
                                        const hfa_tensor* k, const hfa_tensor* v,
                                        const hfa_tensor* out, const hfa_tensor* lse,
                                        const hfa_tensor* dq, const hfa_tensor* dk,
                                        const hfa_tensor* dv, const hfa_options* options,
                                        hfa_call* call, size_t* workspace_bytes);
HFA_API hfa_status hfa_prepare_forward_kvcache(const hfa_tensor* q, const hfa_tensor* k_cache,
                                               const hfa_tensor* v_cache, const hfa_tensor* out,
                                               const hfa_tensor* lse,
                                               const hfa_kvcache_options* options,
                                               hfa_call* call, size_t* workspace_bytes);
/* Runs a prepared call with workspace_bytes of workspace at workspace (NULL and 0 when it needs
 * none), on the stream its options named. Fails before running when *call holds no call, or when
 * the workspace it needs is smaller than what hfa_prepare_* said or not
 * HFA_WORKSPACE_ALIGNMENT-aligned. */
HFA_API hfa_status hfa_run(const hfa_call* call, void* workspace, size_t workspace_bytes);

/* The options structs described, field by field (hfa/options.def): what a binding builds its
 * mirror of the structs and its keyword arguments from, and checks its layout against. */
typedef HFA_ENUM(hfa_options_struct) {
  HFA_OPTIONS_ATTENTION = 0, /* hfa_options */
  HFA_OPTIONS_KVCACHE = 1    /* hfa_kvcache_options */
} hfa_options_struct;

typedef HFA_ENUM(hfa_option_kind) {
  HFA_KIND_FLAG = 0,
  HFA_KIND_INT32 = 1,
  HFA_KIND_REAL = 2,
  HFA_KIND_SCALE = 3, /* a float with its has_<name> flag before it */
  HFA_KIND_TENSOR = 4,
  HFA_KIND_HANDLE = 5,
  HFA_KIND_BYTES = 6,
  HFA_KIND_VECTOR = 7 /* a tensor checked from its row: dtype low, shapes high */
} hfa_option_kind;

typedef struct hfa_option_info {
  const char* name;   /* the field's (a SCALE's value; its flag is has_<name>) */
  const char* caller; /* the front ends' name for it (FlashAttention's) */
  const char* note;   /* what a value means ("-1 = unbounded"), or "" */
  hfa_option_kind kind;
  uint32_t calls;        /* hfa_option_calls that read it */
  size_t offset;         /* of the field in its struct (a SCALE: of its value) */
  size_t flag_offset;    /* a SCALE: of has_<name>; the others: offset */
  double default_value;  /* as hfa_default_options() sets it (0: NULL, off) */
  double low, high;      /* the accepted values of an INT32, REAL or SCALE (finite for the
                            last two); a VECTOR's hfa_dtype and hfa_option_shape bits; others:
                            unchecked */
} hfa_option_info;

/* The fields of `which` in their order, *count of them, and the struct's size in *size; NULL for
 * an unknown `which` (count and size 0). count and size may be NULL. struct_size, the first field
 * of every options struct, is not a row: the rows start after it. */
HFA_API const hfa_option_info* hfa_describe_options(hfa_options_struct which, int32_t* count,
                                                    size_t* size);

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
 *   - HFA_KV_FP8_MLA: none (scale NULL): FlashMLA's FP8 MLA records carry their own scales.
 *     values' d is 576 (MLA's [latent 512 ; rotary 64] row) and codes are HFA_FP8_MLA with last
 *     extent 656, one record per row; each 128 latent values get the smallest power of two
 *     >= max(amax / 448, 1e-4) as their scale, the rotary values are rounded to bf16
 *     (src/quant/mla_fp8.hpp). The CPU only for now (a GPU call: HFA_ERROR_NOT_SUPPORTED).
 * All tensors on one device. On a GPU: d of 64, 128 or 256 and code rows at 16-byte aligned
 * addresses and strides (as the cache the decode reads); the call is queued on options->stream
 * with no allocation and no synchronization. options is required (it names the format). */
typedef HFA_ENUM(hfa_kv_format) {
  HFA_KV_FP8_PER_HEAD = 1,
  HFA_KV_FP8_PER_TOKEN = 2,
  HFA_KV_NVFP4 = 3,
  HFA_KV_MXFP4 = 4,
  HFA_KV_FP8_MLA = 5
} hfa_kv_format;

typedef struct hfa_quantize_options {
  hfa_kv_format format;
  const hfa_tensor* global_scale; /* NVFP4 only: fp32 (1), on the tensors' device */
  void* stream;                   /* cudaStream_t for CUDA tensors; ignored on the CPU */
} hfa_quantize_options;

/* codes (and, but for FP8 per kv-head and FP8 MLA, scale) are written. scale is NULL for
 * HFA_KV_FP8_MLA (in both directions) and required by the other formats. */
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

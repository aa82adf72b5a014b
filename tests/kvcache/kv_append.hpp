// An append call (k_new / v_new, rotary) on a KVCase, shared by the CPU tests and the GPU ones:
// seqlen_new tokens a sequence, or a count of its own (cu_seqlens_k_new, packed rows), with
// fixed-length or varlen queries. The cache has room for the new tokens, the new rows are
// normal(0, 1), and the rotary tables
// hold either values with few significant bits (0, ±1/4, ±1/2, ±3/4, ±1: the fp32 rotation is
// exact however it is computed, so the CPU test can check its bytes against the codecs) or the
// cosines and sines of real angles (every product rounds: the GPU test checks its bytes against
// the CPU's).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvcache/kv_case.hpp"

namespace hfa::test {

enum class Rotary { none, interleaved, halves };

struct AppendCase {
  CacheKind kind = CacheKind::bf16;
  bool paged = true;
  int64_t page_size = 16;
  int64_t hdim = 64;
  int64_t scale_pad = 2;  // KVCase's
  int64_t seqlen_new = 1;  // new tokens a sequence, and query rows a sequence when not varlen
  // Varlen new tokens (cu_seqlens_k_new): sequence b appends new_tokens[b]; empty: seqlen_new.
  std::vector<int32_t> new_tokens;
  // Varlen queries (KVCase::query_lengths): sequence b's rows; empty: seqlen_new rows each.
  std::vector<int32_t> query_lengths;
  Rotary rotary = Rotary::none;
  int64_t rotary_dim = 32;
  bool angle_tables = false;        // cos / sin of real angles; else few-bit values
  DType table_dtype = DType::f32;   // or q's dtype
  bool causal = false;
  std::vector<int32_t> lengths = {0, 1, 20, 37};  // before the append

  bool varlen_new() const { return !new_tokens.empty(); }
  int64_t new_of(int64_t b) const { return varlen_new() ? new_tokens[std::size_t(b)] : seqlen_new; }
  // Sequence b's first row of the packed k_new / v_new (varlen new tokens only).
  int64_t new_begin(int64_t b) const {
    return std::accumulate(new_tokens.begin(), new_tokens.begin() + b, int64_t{0});
  }
  int64_t query_rows(int64_t b) const {
    return query_lengths.empty() ? seqlen_new : query_lengths[std::size_t(b)];
  }
};

inline std::string describe(const AppendCase& a) {
  std::string s = kind_name(a.kind);
  s += a.paged ? " paged page_size " + std::to_string(a.page_size) : std::string(" contiguous");
  auto list = [&s](const std::vector<int32_t>& counts) {  // appends only: GCC 12's -Wrestrict
    for (int32_t n : counts) {
      s += ' ';
      s += std::to_string(n);
    }
  };
  if (a.varlen_new()) {
    s += " new tokens";
    list(a.new_tokens);
  } else {
    s += " new " + std::to_string(a.seqlen_new);
  }
  if (!a.query_lengths.empty()) {
    s += " q rows";
    list(a.query_lengths);
  }
  if (a.rotary != Rotary::none) {
    s += a.rotary == Rotary::interleaved ? " rotary interleaved" : " rotary halves";
    s += " dim " + std::to_string(a.rotary_dim);
    s += a.table_dtype == DType::f32 ? " f32 tables" : " 16-bit tables";
  }
  if (a.causal) s += " causal";
  return s;
}

// A case whose cache has room for the new tokens: built with the lengths after the append (so
// the block table maps their pages), then told the lengths before it.
inline void make_cache(KVCase& c, const AppendCase& a) {
  c.kind = a.kind;
  c.paged = a.paged;
  c.page_size = a.page_size;
  c.hdim = a.hdim;
  c.scale_pad = a.scale_pad;
  c.group = 2;
  c.seqlen_q = a.seqlen_new;
  c.query_lengths = a.query_lengths;
  c.cache_seqlens = a.lengths;
  for (std::size_t b = 0; b < a.lengths.size(); ++b) c.cache_seqlens[b] += static_cast<int32_t>(a.new_of(int64_t(b)));
  c.options.causal = a.causal;
  c.seed = 7;
  c.build();
  for (std::size_t b = 0; b < a.lengths.size(); ++b) *c.seqlens.at<int32_t>({int64_t(b)}) = a.lengths[b];
}

struct Rows {
  Storage k_new, v_new, cos, sin;
  Storage cu_new;  // cu_seqlens_k_new, for varlen new tokens
};

// Element (b, i, h, d) of k_new or v_new: (b, i, h, d), or (packed token, h, d) when varlen.
inline unsigned char* new_at(const AppendCase& a, Storage& s, int64_t b, int64_t i, int64_t h, int64_t d) {
  return a.varlen_new() ? s.at<unsigned char>({a.new_begin(b) + i, h, d}) : s.at<unsigned char>({b, i, h, d});
}

inline Rows make_rows(const KVCase& c, const AppendCase& a) {
  Rows r;
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t total_new = a.varlen_new() ? a.new_begin(c.batch()) : 0;
  for (Storage* s : {&r.k_new, &r.v_new}) {
    if (a.varlen_new())
      s->make(c.q_dtype(), {total_new, c.heads_kv, c.hdim}, 4);
    else
      s->make(c.q_dtype(), {c.batch(), a.seqlen_new, c.heads_kv, c.hdim}, 4);
    for (int64_t b = 0; b < c.batch(); ++b)
      for (int64_t i = 0; i < a.new_of(b); ++i)
        for (int64_t h = 0; h < c.heads_kv; ++h)
          for (int64_t d = 0; d < c.hdim; ++d) store_float(c.q_dtype(), normal(rng), new_at(a, *s, b, i, h, d));
  }
  if (a.varlen_new()) {
    r.cu_new.make(DType::i32, {c.batch() + 1});
    for (int64_t b = 0; b <= c.batch(); ++b) *r.cu_new.at<int32_t>({b}) = static_cast<int32_t>(a.new_begin(b));
  }
  const float few_bits[] = {0.0f, 0.25f, -0.25f, 0.5f, -0.5f, 0.75f, -0.75f, 1.0f, -1.0f};
  constexpr double kRopeBase = 10000.0;  // the frequencies of the RoPE paper
  constexpr int64_t kSparePositions = 2;  // table rows no token or query reaches
  // Every position a new token or a query row rotates by (at most length + its count - 1).
  int64_t seqlen_ro = 0;
  for (int64_t b = 0; b < c.batch(); ++b)
    seqlen_ro = std::max(seqlen_ro, a.lengths[std::size_t(b)] + std::max(a.new_of(b), a.query_rows(b)));
  seqlen_ro += kSparePositions;
  const int64_t half = a.rotary_dim / 2;
  r.cos.make(a.table_dtype, {seqlen_ro, half}, 1);
  r.sin.make(a.table_dtype, {seqlen_ro, half}, 1);
  for (int64_t t = 0; t < seqlen_ro; ++t)
    for (int64_t j = 0; j < half; ++j) {
      const double angle = double(t) * std::pow(kRopeBase, -double(j) / double(half));
      const float c = a.angle_tables ? float(std::cos(angle)) : few_bits[rng() % 9];
      const float s = a.angle_tables ? float(std::sin(angle)) : few_bits[rng() % 9];
      store_float(a.table_dtype, c, r.cos.at<unsigned char>({t, j}));
      store_float(a.table_dtype, s, r.sin.at<unsigned char>({t, j}));
    }
  return r;
}

// Points c's options at the new rows (and the tables when the case rotates).
inline void attach(KVCase& c, const AppendCase& a, Rows& rows) {
  c.options.k_new = &rows.k_new.tensor;
  c.options.v_new = &rows.v_new.tensor;
  c.options.cu_seqlens_k_new = a.varlen_new() ? &rows.cu_new.tensor : nullptr;
  if (a.rotary == Rotary::none) return;
  c.options.rotary_cos = &rows.cos.tensor;
  c.options.rotary_sin = &rows.sin.tensor;
  c.options.rotary_interleaved = a.rotary == Rotary::interleaved;
}

// Two cases of the same inputs (make_cache's seed: the same tensors) with the same new rows
// attached to both, for comparing two runs of one append (CPU and GPU, varlen and a loop).
inline Rows make_twins(KVCase& first, KVCase& second, const AppendCase& a) {
  make_cache(first, a);
  make_cache(second, a);
  Rows rows = make_rows(first, a);
  attach(first, a, rows);
  attach(second, a, rows);
  return rows;
}

}  // namespace hfa::test

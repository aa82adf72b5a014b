#include "check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <set>
#include <utility>
#include <vector>

#include "common/problem.hpp"
#include "cpu/reference.hpp"

namespace hfa::tool {
namespace {

using detail::BackwardProblem;
using detail::ForwardProblem;
using detail::Strides;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kBlockRows = 16;
// Above this many score elements (group heads × seqlen_q × seqlen_k), checking dk and dv with
// a full float64 reference over one kv-head group takes too long; dq is still checked.
constexpr double kMaxFullReferenceScores = 1 << 21;

// Errors are measured against max(1, max |ref|): outputs are O(1) but gradients can be larger.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 2e-2;  // a few bf16 roundings (2^-8 each) of P and the output
    case DType::f16: return 4e-3;
    default: return 2e-4;
  }
}
constexpr double kLseTolerance = 2e-3;  // LSE is fp32 whatever the inputs
// FP8 inputs: the forward rounds P to e4m3 (3 mantissa bits: up to 2^-4 relative) before P·V.
constexpr double kFp8Tolerance = 6.25e-2;

Strides contiguous(int64_t rows, int64_t heads, int64_t dim) {
  return {rows * heads * dim, heads * dim, dim};
}

// Rows [row_begin, row_begin + rows) (counted over the whole batch, as Spec::start_q / start_k
// do) and heads [head_begin, head_begin + heads) of a (rows_total, heads_total, dim) array, as a
// contiguous (rows, heads, dim) array.
HostArray slice(const HostArray& src, int64_t heads_total, int64_t dim, int64_t row_begin,
                int64_t rows, int64_t head_begin, int64_t heads) {
  HostArray dst(src.dtype(), rows * heads * dim);
  const std::size_t element = dtype_size(src.dtype());
  const auto* from = static_cast<const std::byte*>(src.data());
  auto* to = static_cast<std::byte*>(dst.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t source = ((row_begin + r) * heads_total + head_begin + h) * dim;
      std::memcpy(to + (r * heads + h) * dim * element, from + source * element, dim * element);
    }
  return dst;
}

// Running max |got - ref| and max |ref|; a NaN or a wrong infinity counts as an infinite error.
struct ErrorStat {
  double error = 0;
  double magnitude = 0;
  void add(double got, double ref) {
    if (std::isfinite(ref)) magnitude = std::max(magnitude, std::abs(ref));
    if (std::isnan(got) || std::isinf(got)) {
      if (got != ref) error = kInf;
      return;
    }
    error = std::max(error, std::abs(got - ref));
  }
  bool within(double tol) const { return error <= tol * std::max(1.0, magnitude); }
};

// The keys and window of a reduced problem: q rows [a, a + r) of the full problem, keys
// [0, seqlen_k), with the bottom-right alignment shifted so every row sees exactly the keys it
// sees in the full problem. (Row a + i of the full problem sits on diagonal a + i + s_k - s_q;
// the reduced row i on i + seqlen_k - r; the window absorbs the difference d.)
struct Reduced {
  int64_t seqlen_k = 0;
  int32_t left = -1, right = -1;
};

Reduced reduce(const Spec& s, int64_t seqlen_q, int64_t seqlen_k, int64_t a, int64_t r) {
  const int64_t left = s.window_left;
  const int64_t right = s.causal ? 0 : s.window_right;
  const int64_t offset = seqlen_k - seqlen_q;
  // Keys past the last one the block's bottom row sees are dropped (only with a right bound).
  const int64_t keys = right < 0 ? seqlen_k : std::clamp<int64_t>(a + r + offset + right, 0, seqlen_k);
  if (keys == 0) return {0, -1, -1};
  const int64_t d = a + offset - (keys - r);  // <= 0 in every case
  Reduced reduced{keys, -1, -1};
  if (right >= 0) reduced.right = static_cast<int32_t>(right + d);
  if (left >= 0 && left - d < keys) reduced.left = static_cast<int32_t>(left - d);  // else: no bound
  return reduced;
}

// The problem of heads [head_begin, ...) alone, with their sinks when the run has them.
ForwardProblem base_problem(const HostProblem& w, int64_t head_begin) {
  const Spec& s = w.spec();
  ForwardProblem p;
  if (s.sinks) p.sinks = static_cast<const float*>(w.sinks.data()) + head_begin;
  p.dtype = w.q.dtype();  // of k and v too
  p.out_dtype = w.out.dtype();
  p.batch = 1;
  p.hdim_qk = static_cast<int32_t>(s.hdim);
  p.hdim_v = static_cast<int32_t>(s.hdim_v);
  p.softmax_scale = s.softmax_scale();
  p.softcap = s.softcap;
  p.window_left = s.window_left;
  p.window_right = s.causal ? 0 : s.window_right;
  return p;
}

// The run's block mask (--block-mask) over rows [a, a + rows) and keys [0, keys) of sequence
// b, for a problem of those alone (its row 0 is row a): built again from the pattern, as the
// run's was, and set in p. Nothing without a mask.
constexpr int32_t kCheckMaskBlock = 64;  // any size: the float64 reference reads the lists

void restrict_block_mask(const Spec& s, int64_t b, int64_t a, int64_t rows, int64_t keys,
                         HostBlockMask* mask, ForwardProblem* p) {
  if (!s.block_mask) return;
  build_block_mask([&](int64_t i) { return s.mask_keys(b, a + i); }, rows, keys,
                   kCheckMaskBlock, kCheckMaskBlock, mask);
  p->block_sparse = mask->view;
}

struct Errors {
  ErrorStat out, lse, dq, dk, dv;
};

// Where lse holds row i of sequence b, head h.
int64_t lse_index(const Spec& s, int64_t b, int64_t h, int64_t i) {
  if (!s.varlen_q.empty()) return h * s.total_q() + s.start_q(b) + i;  // (heads, total_q)
  return (b * s.heads + h) * s.seqlen_q + i;
}

// One block of q rows of one (batch, head): out, lse and (with backward) dq.
void check_block(const HostProblem& w, bool backward, int64_t b, int64_t h, int64_t a, int64_t r,
                 Errors* errors) {
  const Spec& s = w.spec();
  const int64_t hk = h / (s.heads / s.kv_heads);
  const int64_t q0 = s.start_q(b), k0 = s.start_k(b);
  const Reduced reduced = reduce(s, s.seqlen_q_of(b), s.seqlen_k_of(b), a, r);
  const HostArray q = slice(w.q, s.heads, s.hdim, q0 + a, r, h, 1);
  const HostArray k = slice(w.k, s.kv_heads, s.hdim, k0, reduced.seqlen_k, hk, 1);
  const HostArray v = slice(w.v, s.kv_heads, s.hdim_v, k0, reduced.seqlen_k, hk, 1);

  ForwardProblem p = base_problem(w, h);
  p.seqlen_q = static_cast<int32_t>(r);
  p.seqlen_k = static_cast<int32_t>(reduced.seqlen_k);
  p.heads_q = p.heads_kv = 1;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.q_stride = contiguous(r, 1, s.hdim);
  p.k_stride = contiguous(reduced.seqlen_k, 1, s.hdim);
  p.v_stride = contiguous(reduced.seqlen_k, 1, s.hdim_v);
  p.window_left = reduced.left;
  p.window_right = reduced.right;
  p.causal = p.window_left < 0 && p.window_right == 0;
  HostBlockMask mask;
  restrict_block_mask(s, b, a, r, reduced.seqlen_k, &mask, &p);

  std::vector<double> out(r * s.hdim_v), lse(r);
  cpu::reference_forward(p, out.data(), lse.data());
  for (int64_t i = 0; i < r; ++i) {
    const int64_t row = (q0 + a + i) * s.heads + h;
    for (int64_t d = 0; d < s.hdim_v; ++d) errors->out.add(w.out.get(row * s.hdim_v + d), out[i * s.hdim_v + d]);
    errors->lse.add(w.lse.get(lse_index(s, b, h, a + i)), lse[i]);
  }
  if (!backward) return;

  // dq of a row depends on that row alone (and the keys it sees), so the block gives it exactly.
  const HostArray dout = slice(w.dout, s.heads, s.hdim_v, q0 + a, r, h, 1);
  BackwardProblem bp;
  bp.fwd = p;
  bp.dout = dout.data();
  bp.dout_stride = contiguous(r, 1, s.hdim_v);
  std::vector<double> dq(r * s.hdim), dk(reduced.seqlen_k * s.hdim), dv(reduced.seqlen_k * s.hdim_v);
  cpu::reference_backward(bp, dq.data(), dk.data(), dv.data());
  for (int64_t i = 0; i < r; ++i) {
    const int64_t row = (q0 + a + i) * s.heads + h;
    for (int64_t d = 0; d < s.hdim; ++d) errors->dq.add(w.dq.get(row * s.hdim + d), dq[i * s.hdim + d]);
  }
}

// dk and dv of one (batch, kv head): they sum over every query row of the group's heads.
void check_key_gradients(const HostProblem& w, int64_t b, int64_t g, Errors* errors) {
  const Spec& s = w.spec();
  const int64_t group = s.heads / s.kv_heads;
  const int64_t seqlen_q = s.seqlen_q_of(b), seqlen_k = s.seqlen_k_of(b);
  const int64_t q0 = s.start_q(b), k0 = s.start_k(b);
  const HostArray q = slice(w.q, s.heads, s.hdim, q0, seqlen_q, g * group, group);
  const HostArray dout = slice(w.dout, s.heads, s.hdim_v, q0, seqlen_q, g * group, group);
  const HostArray k = slice(w.k, s.kv_heads, s.hdim, k0, seqlen_k, g, 1);
  const HostArray v = slice(w.v, s.kv_heads, s.hdim_v, k0, seqlen_k, g, 1);

  BackwardProblem bp;
  ForwardProblem& p = bp.fwd;
  p = base_problem(w, g * group);
  p.seqlen_q = static_cast<int32_t>(seqlen_q);
  p.seqlen_k = static_cast<int32_t>(seqlen_k);
  p.heads_q = static_cast<int32_t>(group);
  p.heads_kv = 1;
  p.causal = p.window_left < 0 && p.window_right == 0;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.q_stride = contiguous(seqlen_q, group, s.hdim);
  p.k_stride = contiguous(seqlen_k, 1, s.hdim);
  p.v_stride = contiguous(seqlen_k, 1, s.hdim_v);
  bp.dout = dout.data();
  bp.dout_stride = contiguous(seqlen_q, group, s.hdim_v);
  HostBlockMask mask;
  restrict_block_mask(s, b, 0, seqlen_q, seqlen_k, &mask, &p);
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  cpu::reference_backward(bp, dq.data(), dk.data(), dv.data());
  for (int64_t j = 0; j < seqlen_k; ++j) {
    const int64_t row = (k0 + j) * s.kv_heads + g;
    for (int64_t d = 0; d < s.hdim; ++d) errors->dk.add(w.dk.get(row * s.hdim + d), dk[j * s.hdim + d]);
    for (int64_t d = 0; d < s.hdim_v; ++d) errors->dv.add(w.dv.get(row * s.hdim_v + d), dv[j * s.hdim_v + d]);
  }
}

// Outputs start as NaN (the workload poisons them), and no correct result is NaN: a NaN
// anywhere means an element was never written, or a masked row went wrong.
int64_t count_nans(const HostArray& a) {
  int64_t nans = 0;
  for (int64_t i = 0; i < a.size(); ++i) nans += std::isnan(a.get(i)) ? 1 : 0;
  return nans;
}

bool report_nans(std::ostream& log, const HostProblem& w, bool backward) {
  const std::pair<const char*, const HostArray*> outputs[] = {
      {"out", &w.out}, {"lse", &w.lse}, {"dq", &w.dq}, {"dk", &w.dk}, {"dv", &w.dv}};
  bool ok = true;
  for (const auto& [name, array] : outputs) {
    if (!backward && name[0] == 'd') continue;
    if (const int64_t nans = count_nans(*array); nans > 0) {
      log << "  " << name << ": " << nans << " of " << array->size() << " elements are NaN (unwritten?)  FAIL\n";
      ok = false;
    }
  }
  if (ok) log << "  every output element written, no NaN  ok\n";
  return ok;
}

bool report(std::ostream& log, const char* name, const ErrorStat& stat, double tol) {
  const bool ok = stat.within(tol);
  char line[200];
  std::snprintf(line, sizeof line, "  %-4s max abs error %.3e  (max |ref| %.3g, tolerance %.1e x max(1, |ref|))  %s\n",
                name, stat.error, stat.magnitude, tol, ok ? "ok" : "FAIL");
  log << line;
  return ok;
}

}  // namespace

double reference_check_bytes(const Spec& s, bool backward, DType key_dtype) {
  const double per_key = static_cast<double>(s.hdim + s.hdim_v) *
                             (static_cast<double>(dtype_size(key_dtype)) + sizeof(double) * (backward ? 3 : 1)) +
                         4 * sizeof(double);
  return static_cast<double>(s.seqlen_k) * per_key;  // the longest sequence's keys
}

CheckResult check_against_reference(const HostProblem& w, bool backward, std::ostream& log) {
  const Spec& s = w.spec();
  CheckResult result;
  if (s.total_q() == 0) {
    // No query rows: no output, and the key gradients are exactly zero.
    bool zero = true;
    if (backward)
      for (const HostArray* g : {&w.dk, &w.dv})
        for (int64_t i = 0; i < g->size(); ++i) zero = zero && g->get(i) == 0.0f;
    result.passed = zero;
    log << (zero ? "  check: no query rows; dk, dv (if any) are zero  ok\n"
                 : "  check: no query rows, but dk or dv is not zero  FAIL\n");
    return result;
  }

  // Fixed length: three (batch, head) pairs. Varlen: every sequence with query rows, three
  // heads each, since each sequence has a mask of its own.
  std::set<std::pair<int64_t, int64_t>> pairs;
  if (s.varlen_q.empty() && s.varlen_k.empty())
    pairs = {{0, 0}, {s.batch / 2, s.heads / 2}, {s.batch - 1, s.heads - 1}};
  else
    for (int64_t b = 0; b < s.batch; ++b)
      if (s.seqlen_q_of(b) > 0) pairs.insert({{b, 0}, {b, s.heads / 2}, {b, s.heads - 1}});

  Errors errors;
  int64_t rows = 0;
  for (const auto& [b, h] : pairs) {
    const int64_t seqlen_q = s.seqlen_q_of(b);
    const int64_t r = std::min(kBlockRows, seqlen_q);
    for (int64_t a : std::set<int64_t>{0, (seqlen_q - r) / 2, seqlen_q - r}) {
      check_block(w, backward, b, h, a, r, &errors);
      rows += r;
    }
  }

  // dk and dv of the last sequence with queries and keys.
  int64_t last = s.batch - 1;
  while (last >= 0 && (s.seqlen_q_of(last) == 0 || s.seqlen_k_of(last) == 0)) --last;
  const double group = static_cast<double>(s.heads / s.kv_heads);
  result.checked_dkdv = backward && last >= 0 &&
                        group * s.seqlen_q_of(last) * s.seqlen_k_of(last) <= kMaxFullReferenceScores;
  if (result.checked_dkdv) check_key_gradients(w, last, s.kv_heads - 1, &errors);

  log << "  check against the float64 reference: " << pairs.size() << " (batch, head) pairs, "
      << rows << " rows in all\n";
  const double tol = w.q.dtype() == DType::e4m3 ? kFp8Tolerance : tolerance(w.out.dtype());
  result.passed &= report_nans(log, w, backward);
  result.passed &= report(log, "out", errors.out, tol);
  result.passed &= report(log, "lse", errors.lse, kLseTolerance);
  if (backward) {
    result.passed &= report(log, "dq", errors.dq, 2 * tol);
    if (result.checked_dkdv) {
      result.passed &= report(log, "dk", errors.dk, 2 * tol);
      result.passed &= report(log, "dv", errors.dv, 2 * tol);
    } else {
      log << (last < 0 ? "  dk, dv not checked: no sequence has both queries and keys\n"
                       : "  dk, dv not checked: too large for a full float64 reference of one kv-head group\n");
    }
  }
  result.out_error = errors.out.error;
  result.lse_error = errors.lse.error;
  result.dq_error = errors.dq.error;
  result.dk_error = errors.dk.error;
  result.dv_error = errors.dv.error;
  return result;
}

}  // namespace hfa::tool

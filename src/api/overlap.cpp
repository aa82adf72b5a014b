// See overlap.hpp. Both tests come down to one question about integers: can values v_i, each in
// [low_i, high_i], put sum coefficient_i · v_i inside a target interval? The coefficients are the
// views' strides in bytes, the interval the width of an element. A depth-first search answers it,
// largest coefficient first, each value bounded to those that leave the smaller terms able to
// reach the target: for dims that nest (each stride past the bytes of the smaller dims), as a
// framework's do, one or two values per term, so a search visits a few nodes per dim.
#include "api/overlap.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "common/errors.hpp"

namespace hfa::detail {
namespace {

// Addresses and byte offsets, with room for their sums and differences: a view's last offset
// in bytes fits int64 (check_tensor_form), so no sum here comes near 2^127.
using Wide = __int128;

// Nodes a search may visit: far more than nested dims need, few enough to cost no more than the
// call's other checks.
constexpr int64_t kSearchBudget = int64_t{1} << 16;

constexpr int kMaxTerms = 2 * HFA_MAX_RANK;  // a pair of views

// coefficient · v for an integer v in [low, high].
struct Term {
  Wide coefficient = 0;  // > 0
  Wide low = 0, high = 0;
  int dim = -1;  // the view's dim it stands for
};

Wide floor_div(Wide a, Wide b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
Wide ceil_div(Wide a, Wide b) { return -floor_div(-a, b); }

// By coefficient, descending or ascending; an insertion sort, for at most kMaxTerms terms (where
// std::sort's unrolled paths also trip GCC's array-bounds warning).
void sort_terms(Term* terms, int count, bool descending) {
  for (int i = 1; i < count; ++i)
    for (int j = i; j > 0; --j) {
      const Wide a = terms[j - 1].coefficient, b = terms[j].coefficient;
      if (descending ? a >= b : a <= b) break;
      std::swap(terms[j - 1], terms[j]);
    }
}

// Values for terms sorted by descending coefficient that put their sum in a target interval.
class BoundedSum {
 public:
  // `nonzero`: not all values may be 0.
  BoundedSum(const Term* terms, int count, bool nonzero)
      : terms_(terms), count_(count), nonzero_(nonzero) {
    for (int i = count - 1; i >= 0; --i) {
      rest_low_[i] = rest_low_[i + 1] + terms[i].coefficient * terms[i].low;
      rest_high_[i] = rest_high_[i + 1] + terms[i].coefficient * terms[i].high;
    }
  }

  // Whether values were found (then in value()); false also past the budget.
  bool solve(Wide low, Wide high) { return search(0, low, high, false); }
  Wide value(int i) const { return values_[i]; }

 private:
  bool search(int i, Wide low, Wide high, bool chose_nonzero) {
    if (i == count_) return low <= 0 && 0 <= high && (!nonzero_ || chose_nonzero);
    if (++visits_ > kSearchBudget) return false;
    const Term& term = terms_[i];
    const Wide c = term.coefficient;
    // The values that leave the smaller terms, whose sums span [rest_low, rest_high], able to
    // reach the target.
    Wide first = std::max(term.low, ceil_div(low - rest_high_[i + 1], c));
    const Wide last = std::min(term.high, floor_div(high - rest_low_[i + 1], c));
    // v and -v name the same pair of elements (in swapped roles): the first nonzero is positive.
    if (nonzero_ && !chose_nonzero) first = std::max<Wide>(first, 0);
    if (first > last) return false;
    // From the value that centres the smaller terms' span on the target, outward: the likeliest
    // first.
    const Wide centre = std::clamp(
        floor_div(low + high - rest_low_[i + 1] - rest_high_[i + 1], 2 * c), first, last);
    for (Wide step = 0; centre + step <= last || centre - step - 1 >= first; ++step) {
      for (const Wide v : {centre + step, centre - step - 1}) {
        if (v < first || v > last) continue;
        values_[i] = v;
        if (search(i + 1, low - c * v, high - c * v, chose_nonzero || v != 0)) return true;
      }
      if (visits_ > kSearchBudget) return false;
    }
    return false;
  }

  const Term* terms_;
  int count_;
  bool nonzero_;
  std::array<Wide, kMaxTerms + 1> rest_low_{}, rest_high_{};  // sums over terms i.. at the bounds
  std::array<Wide, kMaxTerms> values_{};
  int64_t visits_ = 0;
};

bool has_elements(const Tensor& t) {
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] == 0) return false;
  return true;
}

// A view's bytes: data + sum over its dims that step (more than one element, a nonzero stride)
// of index_d · stride_d in bytes, plus one of the element's bytes.
struct ByteView {
  Wide data = 0;
  Wide element = 0;                        // bytes per element
  std::array<Term, HFA_MAX_RANK> steps{};  // coefficient: the stride in bytes; [0, extent - 1]
  int count = 0;
  Wide last = 0;  // the offset of the last byte
};

ByteView bytes_of(const Tensor& t) {
  ByteView view;
  view.data = reinterpret_cast<uintptr_t>(t.data);
  view.element = static_cast<Wide>(dtype_size(static_cast<DType>(t.dtype)));
  view.last = view.element - 1;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 2 || t.stride[d] == 0) continue;
    const Term step{Wide{t.stride[d]} * view.element, 0, Wide{t.shape[d]} - 1, d};
    view.steps[view.count++] = step;
    view.last += step.coefficient * step.high;
  }
  return view;
}

// The same elements at the same addresses.
bool same_view(const Tensor& a, const Tensor& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.stride[d] != b.stride[d])) return false;
  return true;
}

std::string tuple_string(const int64_t* values, int count) {
  std::string s = "(";
  for (int i = 0; i < count; ++i) s += cat(i ? ", " : "", values[i]);
  return s + ")";
}

}  // namespace

bool views_share_memory(const Tensor& a, const Tensor& b) {
  if (!has_elements(a) || !has_elements(b)) return false;
  const ByteView x = bytes_of(a), y = bytes_of(b);
  // Apart: most pairs end here.
  if (x.data + x.last < y.data || y.data + y.last < x.data) return false;
  // An element of a at x.data + p and one of b at y.data + q share a byte when p - q lies in
  // [gap - (a's element - 1), gap + b's element - 1], gap = y.data - x.data. p is a sum of a's
  // steps, -q one of b's steps with values in [-(extent - 1), 0].
  std::array<Term, kMaxTerms> terms{};
  int count = 0;
  for (int i = 0; i < x.count; ++i) terms[count++] = x.steps[i];
  for (int i = 0; i < y.count; ++i)
    terms[count++] = {y.steps[i].coefficient, -y.steps[i].high, 0, y.steps[i].dim};
  // Equal strides merge into one term whose values add: views interleaved in one buffer (packed
  // q, k and v; dq, dk and dv) pair up this way, and their search stays a few nodes per dim.
  sort_terms(terms.data(), count, true);
  int merged = 0;
  for (int i = 0; i < count; ++i) {
    if (merged > 0 && terms[merged - 1].coefficient == terms[i].coefficient) {
      terms[merged - 1].low += terms[i].low;
      terms[merged - 1].high += terms[i].high;
    } else {
      terms[merged++] = terms[i];
    }
  }
  const Wide gap = y.data - x.data;
  return BoundedSum(terms.data(), merged, false).solve(gap - (x.element - 1), gap + y.element - 1);
}

bool elements_overlap(const Tensor& t, int64_t (&first)[HFA_MAX_RANK],
                      int64_t (&second)[HFA_MAX_RANK]) {
  std::fill(std::begin(first), std::end(first), 0);
  std::fill(std::begin(second), std::end(second), 0);
  if (!has_elements(t)) return false;
  // Several elements at one address: the first two of such a dim.
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] > 1 && t.stride[d] == 0) {
      first[d] = 1;
      return true;
    }
  }
  const ByteView view = bytes_of(t);
  std::array<Term, HFA_MAX_RANK> terms = view.steps;
  const int count = view.count;
  // Dims that nest keep every element apart: by ascending stride, each steps past the bytes the
  // smaller dims (and the element) cover. Every framework's layout passes without a search.
  sort_terms(terms.data(), count, false);
  Wide covered = view.element;
  bool nested = true;
  for (int i = 0; i < count && nested; ++i) {
    nested = terms[i].coefficient >= covered;
    covered += terms[i].coefficient * terms[i].high;
  }
  if (nested) return false;
  // Else two elements share a byte when their indices differ by some k != 0 (|k_d| < extent_d)
  // whose step, sum k_d · stride_d in bytes, is shorter than an element.
  for (int i = 0; i < count; ++i) terms[i].low = -terms[i].high;
  sort_terms(terms.data(), count, true);
  BoundedSum sum(terms.data(), count, true);
  if (!sum.solve(-(view.element - 1), view.element - 1)) return false;
  for (int i = 0; i < count; ++i) {
    const auto k = static_cast<int64_t>(sum.value(i));
    first[terms[i].dim] = std::max<int64_t>(k, 0);
    second[terms[i].dim] = std::max<int64_t>(-k, 0);
  }
  return true;
}

Status check_shared_memory(std::span<const CallTensor> tensors) {
  for (std::size_t j = 0; j < tensors.size(); ++j) {
    const CallTensor& later = tensors[j];
    if (later.tensor == nullptr) continue;
    int64_t first[HFA_MAX_RANK], second[HFA_MAX_RANK];
    if (later.written && elements_overlap(*later.tensor, first, second)) {
      const int rank = later.tensor->rank;
      return invalid(later.name, "elements ", tuple_string(first, rank), " and ",
                     tuple_string(second, rank), " share memory (strides ",
                     tuple_string(later.tensor->stride, rank),
                     "): a tensor the call writes may not overlap itself");
    }
    for (std::size_t i = 0; i < j; ++i) {
      const CallTensor& earlier = tensors[i];
      if (earlier.tensor == nullptr || (!earlier.written && !later.written)) continue;
      // Named by the written one; of two written ones, by the later.
      const CallTensor& output = later.written ? later : earlier;
      const CallTensor& other = later.written ? earlier : later;
      const bool may_be_in_place = !other.written && output.in_place_group != 0 &&
                                   output.in_place_group == other.in_place_group;
      if (may_be_in_place && same_view(*output.tensor, *other.tensor)) continue;
      if (!views_share_memory(*output.tensor, *other.tensor)) continue;
      if (may_be_in_place)
        return invalid(output.name, "overlaps ", other.name,
                       " (an output may be an input only as the very same view: same data, dtype, "
                       "shape and strides)");
      return invalid(output.name, "overlaps ", other.name,
                     " (a tensor the call writes may share no byte with another tensor of the "
                     "call)");
    }
  }
  return Status::ok();
}

}  // namespace hfa::detail

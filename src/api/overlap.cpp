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

#include "common/dtype_bytes.hpp"
#include "common/errors.hpp"

namespace hfa::detail {
namespace {

// Addresses and byte offsets, with room for their sums and differences: a view's last offset
// in bytes fits int64 (check_tensor_form), so no sum here comes near 2^127.
using Wide = __int128;

// Nodes a search may visit: nested dims need a few per dim; the bound caps what irregular
// strides can cost (about a millisecond).
constexpr int64_t kSearchBudget = int64_t{1} << 16;

constexpr int kMaxTerms = 2 * HFA_MAX_RANK;  // a pair of views

// coefficient · v for an integer v in [low, high].
struct Term {
  Wide coefficient;  // > 0
  Wide low, high;
  int dim;  // the view's dim it stands for (self overlap: for the witness)
};

Wide floor_div(Wide a, Wide b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
Wide ceil_div(Wide a, Wide b) { return -floor_div(-a, b); }
Wide gcd(Wide a, Wide b) {  // std::gcd takes no __int128 in strict C++20
  while (b != 0) a = std::exchange(b, a % b);
  return a;
}

// An insertion sort, for the few items here (at most kMaxTerms; std::sort's unrolled paths also
// trip GCC's array-bounds warning on arrays this small).
template <typename T, typename Before>
void sort_few(T* items, int count, Before before) {
  for (int i = 1; i < count; ++i)
    for (int j = i; j > 0 && before(items[j], items[j - 1]); --j) std::swap(items[j], items[j - 1]);
}

void sort_descending(Term* terms, int count) {
  sort_few(terms, count, [](const Term& a, const Term& b) { return a.coefficient > b.coefficient; });
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
      rest_gcd_[i] = gcd(terms[i].coefficient, rest_gcd_[i + 1]);
    }
  }

  // Whether values were found (then in value()); false also past the budget.
  bool solve(Wide low, Wide high) { return search(0, low, high, false); }
  Wide value(int i) const { return values_[i]; }

 private:
  bool search(int i, Wide low, Wide high, bool chose_nonzero) {
    if (i == count_) return low <= 0 && 0 <= high && (!nonzero_ || chose_nonzero);
    if (++visits_ > kSearchBudget) return false;
    // Every sum of the terms from i on is a multiple of their gcd: none in [low, high], no value
    // here can do (views a stride's parity apart end at once).
    if (floor_div(high, rest_gcd_[i]) * rest_gcd_[i] < low) return false;
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
  std::array<Wide, kMaxTerms + 1> rest_gcd_{};                // gcd of the coefficients i..
  std::array<Wide, kMaxTerms> values_{};
  int64_t visits_ = 0;
};

// The bytes [first, last] a view spans; none when it has no element. Computed for every tensor
// of every call, so kept to one pass: the last offset in bytes fits int64 (check_tensor_form),
// and extents and strides are non-negative, so unsigned sums are exact.
struct Span {
  bool empty;
  uintptr_t first, last;
};

Span span_of(const Tensor& t) {
  const auto element = static_cast<uintptr_t>(element_bytes(t.dtype));
  uintptr_t last = element - 1;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return {true, 0, 0};
    last += static_cast<uintptr_t>(t.shape[d] - 1) * static_cast<uintptr_t>(t.stride[d]) * element;
  }
  const auto first = reinterpret_cast<uintptr_t>(t.data);
  return {false, first, first + last};
}

bool spans_meet(const Span& x, const Span& y) {
  return !x.empty && !y.empty && x.first <= y.last && y.first <= x.last;
}

// Whether a written tensor's span meets another's (spans of tensors with bytes; `written[i]` is
// tensor i's). Every pair, without a branch on the data: the usual call's spans are all apart, and
// a loop of compares that all fail costs less than one mispredicted branch of a cleverer search.
bool written_spans_meet(const Span* spans, const bool* written, std::size_t count) {
  bool meet = false;
  for (std::size_t j = 1; j < count; ++j)
    for (std::size_t i = 0; i < j; ++i)
      meet |= (written[i] | written[j]) & (spans[i].first <= spans[j].last) &
              (spans[j].first <= spans[i].last);
  return meet;
}

// A dim that steps (more than one element, a nonzero stride).
struct Step {
  int64_t bytes;  // the stride in bytes
  int64_t count;  // the extent
  int dim;
};

// A view's bytes: data + sum over its steps of index · bytes, plus one of the element's bytes.
struct ByteView {
  uintptr_t data;
  int64_t element;  // bytes per element
  Step steps[HFA_MAX_RANK];
  int count;
};

ByteView bytes_of(const Tensor& t) {
  ByteView view;
  view.data = reinterpret_cast<uintptr_t>(t.data);
  view.element = static_cast<int64_t>(element_bytes(t.dtype));
  view.count = 0;
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] > 1 && t.stride[d] != 0)
      view.steps[view.count++] = {t.stride[d] * view.element, t.shape[d], d};
  return view;
}

// Whether two views whose spans meet share a byte: the search.
bool search_shared_byte(const Tensor& a, const Tensor& b) {
  const ByteView x = bytes_of(a), y = bytes_of(b);
  // An element of a at x.data + p and one of b at y.data + q share a byte when p - q lies in
  // [gap - (a's element - 1), gap + b's element - 1], gap = y.data - x.data. p is a sum of a's
  // steps with values in [0, extent - 1], -q one of b's with values in [-(extent - 1), 0].
  Term terms[kMaxTerms];
  int count = 0;
  for (int i = 0; i < x.count; ++i)
    terms[count++] = {x.steps[i].bytes, 0, x.steps[i].count - 1, x.steps[i].dim};
  for (int i = 0; i < y.count; ++i)
    terms[count++] = {y.steps[i].bytes, 1 - y.steps[i].count, 0, y.steps[i].dim};
  // Equal strides merge into one term whose values add: views interleaved in one buffer (packed
  // q, k and v; dq, dk and dv) pair up this way, and their search stays a few nodes per dim.
  sort_descending(terms, count);
  int merged = 0;
  for (int i = 0; i < count; ++i) {
    if (merged > 0 && terms[merged - 1].coefficient == terms[i].coefficient) {
      terms[merged - 1].low += terms[i].low;
      terms[merged - 1].high += terms[i].high;
    } else {
      terms[merged++] = terms[i];
    }
  }
  const Wide gap = Wide{y.data} - Wide{x.data};
  return BoundedSum(terms, merged, false).solve(gap - (x.element - 1), gap + y.element - 1);
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
  // Apart: most pairs end here.
  return spans_meet(span_of(a), span_of(b)) && search_shared_byte(a, b);
}

bool elements_overlap(const Tensor& t, int64_t (&first)[HFA_MAX_RANK],
                      int64_t (&second)[HFA_MAX_RANK]) {
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] == 0) return false;
  // Dims that nest keep every element apart: taken in some order, each steps past the bytes the
  // dims before it (and the element) cover. Row-major order first, in one pass, as every
  // framework's layout passes it; then by ascending stride.
  const auto element = static_cast<int64_t>(element_bytes(t.dtype));
  int64_t covered = element;
  bool nested = true;
  for (int d = t.rank - 1; d >= 0 && nested; --d) {
    if (t.shape[d] < 2) continue;
    nested = t.stride[d] * element >= covered;
    covered += t.stride[d] * element * (t.shape[d] - 1);
  }
  if (nested) return false;
  // Several elements at one address: the first two of such a dim.
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] > 1 && t.stride[d] == 0) {
      std::fill(std::begin(first), std::end(first), 0);
      std::fill(std::begin(second), std::end(second), 0);
      first[d] = 1;
      return true;
    }
  }
  ByteView view = bytes_of(t);
  sort_few(view.steps, view.count,
           [](const Step& a, const Step& b) { return a.bytes < b.bytes; });
  covered = view.element;
  nested = true;
  for (int i = 0; i < view.count && nested; ++i) {
    nested = view.steps[i].bytes >= covered;
    covered += view.steps[i].bytes * (view.steps[i].count - 1);
  }
  if (nested) return false;
  // Else two elements share a byte when their indices differ by some k != 0 (|k_d| < extent_d)
  // whose step, sum k_d · stride_d in bytes, is shorter than an element.
  Term terms[HFA_MAX_RANK];
  for (int i = 0; i < view.count; ++i) {
    const Step& step = view.steps[i];
    terms[i] = {step.bytes, 1 - step.count, step.count - 1, step.dim};
  }
  sort_descending(terms, view.count);
  BoundedSum sum(terms, view.count, true);
  if (!sum.solve(-(view.element - 1), view.element - 1)) return false;
  std::fill(std::begin(first), std::end(first), 0);
  std::fill(std::begin(second), std::end(second), 0);
  for (int i = 0; i < view.count; ++i) {
    const auto k = static_cast<int64_t>(sum.value(i));
    first[terms[i].dim] = std::max<int64_t>(k, 0);
    second[terms[i].dim] = std::max<int64_t>(-k, 0);
  }
  return true;
}

namespace {
Status too_many_tensors(std::size_t count) {
  return {Code::internal,
          cat("check_shared_memory: ", count, " tensors, more than ", kMaxCallTensors)};
}
}  // namespace

Status check_shared_memory(const CallTensors& tensors) {
  if (tensors.count() > kMaxCallTensors) return too_many_tensors(tensors.count());
  return check_shared_memory(tensors.given());
}

Status check_shared_memory(std::span<const CallTensor> tensors) {
  if (tensors.size() > kMaxCallTensors) return too_many_tensors(tensors.size());
  // The tensors given that have bytes, each with its span, computed once for every pair it is
  // in. One with no element shares none, with itself or another (an empty batch's call then
  // checks nothing here).
  const CallTensor* given[kMaxCallTensors];
  Span spans[kMaxCallTensors];
  bool written[kMaxCallTensors];
  std::size_t count = 0;
  for (const CallTensor& t : tensors) {
    if (t.tensor == nullptr) continue;
    const Span span = span_of(*t.tensor);
    if (span.empty) continue;
    given[count] = &t;
    written[count] = t.written;
    spans[count++] = span;
  }
  // No written tensor's span meeting another's (the usual call: each tensor in memory of its own)
  // leaves no pair to search, only each written tensor's own elements; else the pairs in argument
  // order, as the message names the first.
  const bool spans_apart = !written_spans_meet(spans, written, count);
  for (std::size_t j = 0; j < count; ++j) {
    const CallTensor& later = *given[j];
    int64_t first[HFA_MAX_RANK], second[HFA_MAX_RANK];
    if (later.written && elements_overlap(*later.tensor, first, second)) {
      const int rank = later.tensor->rank;
      return invalid(later.name, "elements ", tuple_string(first, rank), " and ",
                     tuple_string(second, rank), " share memory (strides ",
                     tuple_string(later.tensor->stride, rank),
                     "): a tensor the call writes may not overlap itself");
    }
    for (std::size_t i = 0; i < j && !spans_apart; ++i) {
      const CallTensor& earlier = *given[i];
      if (!earlier.written && !later.written) continue;
      // Named by the written one; of two written ones, by the later.
      const CallTensor& output = later.written ? later : earlier;
      const CallTensor& other = later.written ? earlier : later;
      const bool may_be_in_place = !other.written && output.in_place_group != 0 &&
                                   output.in_place_group == other.in_place_group;
      if (may_be_in_place && same_view(*output.tensor, *other.tensor)) continue;
      if (!spans_meet(spans[i], spans[j]) || !search_shared_byte(*output.tensor, *other.tensor))
        continue;
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

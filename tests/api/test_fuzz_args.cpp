// A randomized argument test of the C ABI on CPU tensors. Each entry point starts from a valid
// call (small random shapes, random optional features), which must succeed, then takes 1 to 3
// random mutations and is called again: a dtype (any hfa_dtype, 99, -1), a rank, an extent (0,
// -1, 1, smaller or larger than its partner's, past int32 or int64), a stride (0, negative,
// another axis's, overflowing), null or misaligned data, a device (CUDA, 99) or device index, a
// null tensor (or one given that the call did not have), an option (NaN, inf, negative, extreme
// or unknown enum values), a value the CPU reads (cu_seqlens, seqused, cache_seqlens,
// block_table, a block-sparse mask's counts and indices, top-k indices, Hadamard signs) out of
// range (just past its bound too, where the case knows it), or a view moved over another
// argument's memory (its very view, its start, or a few elements from there). Whatever the
// mutations, the call must
//   (a) return (no crash; the binary runs clean under AddressSanitizer and UBSan),
//   (b) succeed, or fail with HFA_ERROR_INVALID_ARGUMENT or HFA_ERROR_NOT_SUPPORTED and a message
//       "<argument>: ..." that names one of the entry point's arguments (Case::names),
//   (c) have written nothing on failure, and on success only its outputs, inside their views,
//       and have accepted no view that must be rejected,
//   (d) on success give outputs without NaN. Inputs hold tame values inside their views and NaN
//       (0xff bytes) outside them, so a read outside a view shows up as NaN in an output (not
//       checked once a view is moved over other memory, whose values may be anything),
//   (e) keep hfa.h's memory rule, counted byte by byte: on success no written tensor shares a
//       byte with another tensor of the call (but for an in-place merge's very view) or
//       overlaps itself, and a rejection for shared memory names two arguments (or one's
//       elements) that really share a byte.
// Only mutations a library can detect are made: every buffer holds its view four times over at 4
// bytes an element, and a mutation whose view would reach past its buffer is drawn again, unless
// the view must be rejected anyway (a negative extent or stride, an offset overflowing int64).
// Seeds are fixed: a failure prints the entry point, the case, the mutations and the iteration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/half_float.hpp"
#include "hfa/hfa.h"
#include "quant/e4m3.hpp"

namespace {

using Rng = std::mt19937_64;

constexpr unsigned char kPoison = 0x7b;  // outputs before a call: finite in every float dtype
constexpr unsigned char kSlack = 0xff;   // input bytes outside the views: NaN in every float dtype
constexpr unsigned char kFiller = 0x3c;  // input bytes a mutation brings into a view: finite
constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kFltMax = std::numeric_limits<float>::max();

int64_t uniform(Rng& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
bool chance(Rng& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
template <typename T>
T pick(Rng& rng, std::initializer_list<T> values) {
  return *(values.begin() + uniform(rng, 0, static_cast<int64_t>(values.size()) - 1));
}
float normal(Rng& rng) { return std::normal_distribution<float>(0.0f, 1.0f)(rng); }

// a + b and a · b, saturated to the type's range (mutated extents and strides reach its limits).
template <typename T>
T add_sat(T a, T b) {
  T r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min()) : r;
}
template <typename T>
T mul_sat(T a, T b) {
  T r;
  return __builtin_mul_overflow(a, b, &r) ? ((a < 0) != (b < 0) ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max()) : r;
}

// Blocks of `block` that cover `length` (ceil(length / block)).
int64_t blocks_of(int64_t length, int64_t block) { return (length + block - 1) / block; }

// Bytes per element as the library counts them (an unknown dtype: the most, 4).
int64_t element_bytes(int dtype) {
  switch (dtype) {
    case HFA_F16: case HFA_BF16: return 2;
    case HFA_E4M3: case HFA_E5M2: case HFA_FP4_E2M1X2: case HFA_UE8M0: return 1;
    default: return 4;
  }
}

const char* dtype_label(int dtype) {
  static const char* names[] = {"f32", "f16", "bf16", "e4m3", "e5m2", "i32", "fp4", "ue8m0"};
  return dtype >= 0 && dtype <= HFA_UE8M0 ? names[dtype] : "?";
}

bool is_nan(int dtype, const unsigned char* at) {
  uint32_t bits32 = 0;
  uint16_t bits16 = 0;
  switch (dtype) {
    case HFA_F32: std::memcpy(&bits32, at, 4); return (bits32 & 0x7f800000u) == 0x7f800000u && (bits32 & 0x7fffffu);
    case HFA_F16: std::memcpy(&bits16, at, 2); return (bits16 & 0x7c00) == 0x7c00 && (bits16 & 0x3ff);
    case HFA_BF16: std::memcpy(&bits16, at, 2); return (bits16 & 0x7f80) == 0x7f80 && (bits16 & 0x7f);
    case HFA_E4M3: return (*at & 0x7f) == 0x7f;
    case HFA_E5M2: return (*at & 0x7c) == 0x7c && (*at & 3);
    case HFA_UE8M0: return *at == 0xff;
    default: return false;  // i32, fp4 (E2M1 has no NaN)
  }
}

// One finite value of a dtype, from x.
void put(int dtype, unsigned char* at, float x) {
  switch (dtype) {
    case HFA_F32: std::memcpy(at, &x, 4); break;
    case HFA_F16: { const uint16_t h = hfa::detail::float_to_fp16(x); std::memcpy(at, &h, 2); break; }
    case HFA_BF16: { const uint16_t h = hfa::detail::float_to_bf16(x); std::memcpy(at, &h, 2); break; }
    case HFA_E4M3: *at = hfa::quant::e4m3_encode(x); break;
    case HFA_I32: { const int32_t i = static_cast<int32_t>(x); std::memcpy(at, &i, 4); break; }
    case HFA_UE8M0: *at = static_cast<unsigned char>(120 + static_cast<int>(std::fabs(x) * 4) % 14); break;
    default: *at = static_cast<unsigned char>(static_cast<int>(std::fabs(x) * 1000) & 0xff); break;  // fp4
  }
}

// The element count and the last element offset of a view, in int128 (no overflow here).
struct Extent {
  bool valid = false;     // rank 1..4, extents and strides >= 0
  bool empty = false;     // some extent is 0
  __int128 count = 0;
  __int128 last = 0;      // offset of the last element, in elements
};

Extent extent_of(const hfa_tensor& t) {
  Extent e;
  if (t.rank < 1 || t.rank > HFA_MAX_RANK) return e;
  e.count = 1;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0) return e;
    if (t.shape[d] == 0) e.empty = true;
  }
  e.valid = true;
  if (e.empty) {
    e.count = 0;
    return e;
  }
  for (int d = 0; d < t.rank; ++d) {
    if (t.stride[d] < 0) {
      e.valid = false;
      return e;
    }
    e.count *= t.shape[d];
    e.last += static_cast<__int128>(t.shape[d] - 1) * t.stride[d];
  }
  return e;
}

// fn(element offset) for each element of a valid, non-empty view.
template <typename Fn>
void for_each_offset(const hfa_tensor& t, Fn&& fn) {
  int64_t index[HFA_MAX_RANK] = {0, 0, 0, 0};
  for (;;) {
    int64_t offset = 0;
    for (int d = 0; d < t.rank; ++d) offset += index[d] * t.stride[d];
    fn(offset);
    int d = t.rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// One tensor argument: its view and the memory behind it.
struct Slot {
  std::string name;
  int owner = 0;            // the slot whose memory the view is over: itself, or (in place) another
  bool writable = false;    // the call may write the view on success
  bool input = true;        // holds values the call reads (else: poisoned, an output only)
  bool passed = true;       // the entry point reads this argument (false: not mutated)
  bool present = true;      // passed as a pointer, not null
  bool i32_values = false;  // int32 values the CPU checks (offsets, lengths, pages)
  int32_t i32_end = 0;      // with i32_values: the first value past their range (0: none given),
                            // which value mutations try with the last one inside it
  bool sign_values = false; // fp32 ±1 the CPU checks
  std::vector<unsigned char> mem;
  hfa_tensor t{};
  hfa_tensor original{};
};

struct Knob {
  std::string name;
  std::function<std::string(Rng&)> apply;  // returns what it set, for the failure message
};

// A call: its tensors, its scalar options, how to make it, which argument names it may answer.
struct Case {
  virtual ~Case() = default;  // owned as unique_ptr<Case>, made as one of the entry points' cases

  std::string label;
  std::deque<Slot> slots;
  std::vector<Knob> knobs;
  std::function<hfa_status()> call;
  std::set<std::string> names;
  // A workspace-size query's answer: poisoned before, 0 on success (the CPU needs no workspace).
  bool has_bytes = false;
  bool bytes_null = false;
  size_t bytes = 0;
  bool nan_check = true;  // cleared by mutations whose results may rightly overflow to NaN
  std::vector<std::string> mutations;
  std::function<bool(const Slot&)> ignored;  // an argument this call does not read (may be anything)
  std::function<void()> prepare;             // sets `writable` from the mutated options
  // A written view that may be the very view of a read one (an in-place merge).
  std::function<bool(const Slot& written, const Slot& read)> in_place;
  std::vector<unsigned char> scratch = std::vector<unsigned char>(64);  // a too-small workspace

  Slot* find(const std::string& name) {
    for (Slot& s : slots)
      if (s.name == name) return &s;
    return nullptr;
  }
  const Slot* find(const std::string& name) const { return const_cast<Case*>(this)->find(name); }
  const hfa_tensor* ptr(const std::string& name) {
    Slot* s = find(name);
    return s && s->present ? &s->t : nullptr;
  }
  size_t* bytes_ptr() { return bytes_null ? nullptr : &bytes; }

  // A tensor of `shape`, row-major unless `dense` is false, when its non-last dims may be
  // padded or permuted (strides the API accepts); memory for four times its span at 4 bytes an
  // element. Inputs get random finite values in the view and NaN around it; outputs the poison.
  Slot& add(const std::string& name, hfa_dtype dtype, std::vector<int64_t> shape, bool output,
            Rng& rng, bool dense = false) {
    Slot& s = slots.emplace_back();
    s.name = name;
    s.owner = static_cast<int>(slots.size()) - 1;
    s.writable = output;
    s.input = !output;
    const int rank = static_cast<int>(shape.size());
    s.t.dtype = dtype;
    s.t.rank = rank;
    s.t.device = HFA_CPU;
    for (int d = 0; d < rank; ++d) s.t.shape[d] = shape[d];
    int order[HFA_MAX_RANK] = {0, 1, 2, 3};  // outer to inner, the last dim innermost
    if (!dense && rank > 2 && chance(rng, 0.25)) std::shuffle(order, order + rank - 1, rng);
    int64_t running = 1;
    for (int i = rank - 1; i >= 0; --i) {
      const int d = order[i];
      s.t.stride[d] = running;
      const int64_t pad = !dense && i == rank - 1 && rank > 1 && chance(rng, 0.3) ? uniform(rng, 1, 3) : 0;
      running *= std::max<int64_t>(shape[d], 1) + pad;
    }
    const Extent e = extent_of(s.t);
    const int64_t span = e.empty ? 1 : static_cast<int64_t>(e.last) + 1;
    s.mem.assign(static_cast<size_t>(16 * span + 64), output ? kPoison : kSlack);
    s.t.data = s.mem.data();
    if (!output) fill(s, [&](unsigned char* at) { put(dtype, at, normal(rng)); });
    s.original = s.t;
    return s;
  }

  // A view of `base`'s memory: its view with the last extent cut to `last` (the same data and
  // strides), as MLA's V is the first 512 columns of its cache.
  Slot& view(const std::string& name, const Slot& base, int64_t last) {
    Slot& s = slots.emplace_back();
    s.name = name;
    s.owner = base.owner;
    s.t = base.t;
    s.t.shape[s.t.rank - 1] = last;
    s.original = s.t;
    return s;
  }

  // Writes gen(element) over every element of s's view, in row-major order.
  template <typename Gen>
  void fill(Slot& s, Gen&& gen) {
    const Extent e = extent_of(s.t);
    if (!e.valid || e.empty) return;
    const int64_t size = element_bytes(s.t.dtype);
    unsigned char* base = static_cast<unsigned char*>(s.t.data);
    for_each_offset(s.t, [&](int64_t offset) { gen(base + offset * size); });
  }
  void set_i32(Slot& s, const std::vector<int32_t>& values) {
    size_t i = 0;
    fill(s, [&](unsigned char* at) { std::memcpy(at, &values.at(i++), 4); });
  }
  template <typename Gen>
  void set_f32(Slot& s, Gen&& gen) {
    fill(s, [&](unsigned char* at) {
      const float x = gen();
      std::memcpy(at, &x, 4);
    });
  }

  // Called after setup: every view a valid call uses, as it was.
  void seal() {
    for (Slot& s : slots) s.original = s.t;
  }
};

// A view the library must reject, whatever the call: a rank out of range, a negative extent or
// stride, an offset or element count past int64, null data with elements.
bool must_reject(const hfa_tensor& t) {
  if (t.rank < 1 || t.rank > HFA_MAX_RANK) return true;
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] < 0) return true;
  const Extent e = extent_of(t);
  if (e.empty) return false;
  if (!e.valid || t.data == nullptr) return true;
  __int128 count = 1, span = 0;  // the library's own int64 products, step by step
  for (int d = 0; d < t.rank; ++d) {
    count *= t.shape[d];
    span += static_cast<__int128>(t.shape[d] - 1) * t.stride[d];
    if (count > kI64Max || span > kI64Max) return true;
  }
  return false;
}

// A view with elements, all inside its memory, few enough to visit.
bool in_bounds(const Case& c, const Slot& s) {
  const hfa_tensor& t = s.t;
  if (must_reject(t)) return false;
  const Extent e = extent_of(t);
  if (e.empty) return false;
  const Slot& owner = c.slots[s.owner];
  const auto start = static_cast<const unsigned char*>(t.data) - owner.mem.data();
  const Extent o = extent_of(s.original);
  const __int128 original_count = o.valid ? o.count : 0;
  return start >= 0 && (e.last + 1) * 4 + start <= static_cast<__int128>(owner.mem.size()) &&
         e.count <= 4 * original_count + 64;
}

// Whether a mutated view may be handed to the call: it must be rejected, or it has no elements,
// or everything it addresses lies in its memory (in_bounds).
bool safe_view(const Case& c, const Slot& s) {
  if (!s.present || must_reject(s.t) || extent_of(s.t).empty) return true;
  return in_bounds(c, s);
}

// Whether an input element holds a value no valid call would choke on: finite and small (the
// inputs are normal random values, scales and LSEs), or an integer (checked by the library).
bool tame(int dtype, const unsigned char* at) {
  float x = 0.0f;
  uint16_t h = 0;
  switch (dtype) {
    case HFA_F32: std::memcpy(&x, at, 4); break;
    case HFA_F16: std::memcpy(&h, at, 2); x = hfa::detail::fp16_to_float(h); break;
    case HFA_BF16: std::memcpy(&h, at, 2); x = hfa::detail::bf16_to_float(h); break;
    case HFA_E4M3: x = hfa::quant::e4m3_decode(*at); break;
    case HFA_E5M2: return !is_nan(dtype, at) && (*at & 0x7c) != 0x7c;
    case HFA_UE8M0: return *at <= 140;  // 2^13 at most: a block of FP4 values stays far from inf
    default: return true;
  }
  return std::isfinite(x) && std::fabs(x) <= 64.0f;
}

// A mutated input view reads valid values only: the elements it shares with the original view
// (same dtype, same place) keep theirs, and any other element (new bytes, or old bytes read at
// another offset or as another dtype) gets a finite filler where it is not tame. Bytes outside
// every view keep their NaN.
void refill_inputs(Case& c) {
  for (size_t i = 0; i < c.slots.size(); ++i) {
    Slot& s = c.slots[i];
    if (!s.present || !s.input || s.owner != static_cast<int>(i) || !in_bounds(c, s)) continue;
    std::vector<bool> original(s.mem.size(), false), element_start(s.mem.size(), false);
    const Extent o = extent_of(s.original);
    if (o.valid && !o.empty) {
      const int64_t size = element_bytes(s.original.dtype);
      for_each_offset(s.original, [&](int64_t offset) {
        element_start[offset * size] = true;
        for (int64_t b = 0; b < size; ++b) original[offset * size + b] = true;
      });
    }
    const int64_t size = element_bytes(s.t.dtype);
    const auto start = static_cast<unsigned char*>(s.t.data) - s.mem.data();  // a shifted view: > 0
    const bool same_dtype = s.t.dtype == s.original.dtype;
    for_each_offset(s.t, [&](int64_t offset) {
      const int64_t first = start + offset * size;
      if (same_dtype && element_start[first]) return;
      unsigned char* at = s.mem.data() + first;
      for (int64_t b = 0; b < size; ++b)
        if (!original[first + b] && at[b] == kSlack) at[b] = kFiller;
      if (!tame(s.t.dtype, at)) std::memset(at, kFiller, static_cast<size_t>(size));
    });
  }
}

// --- Mutations ------------------------------------------------------------------------------

std::string tensor_mutation(Slot& s, Rng& rng) {
  hfa_tensor& t = s.t;
  const int rank = std::clamp(t.rank, 1, HFA_MAX_RANK);
  const int d = static_cast<int>(uniform(rng, 0, rank - 1));
  const std::string at = s.name + ".";
  switch (uniform(rng, 0, 9)) {
    case 0: {
      t.dtype = static_cast<hfa_dtype>(pick<int>(rng, {0, 1, 2, 3, 4, 5, 6, 7, 8, 99, -1}));
      return at + "dtype=" + std::to_string(t.dtype);
    }
    case 1: {
      const int r = pick<int>(rng, {-1, 0, 1, 2, 3, 4, 5, t.rank - 1, t.rank + 1});
      for (int e = std::max(t.rank, 0); e < std::min(r, HFA_MAX_RANK); ++e) {
        t.shape[e] = pick<int64_t>(rng, {1, 2});
        t.stride[e] = pick<int64_t>(rng, {0, 1, 64});
      }
      t.rank = r;
      return at + "rank=" + std::to_string(r);
    }
    case 2:
    case 3: {
      const int64_t n = t.shape[d];
      t.shape[d] = pick<int64_t>(rng, {0, -1, 1, add_sat<int64_t>(n, -1), n / 2, add_sat<int64_t>(n, 1),
                                       mul_sat<int64_t>(n, 2), kI32Max, int64_t{kI32Max} + 1,
                                       kI64Max, std::numeric_limits<int64_t>::min()});
      return at + "shape[" + std::to_string(d) + "]=" + std::to_string(t.shape[d]);
    }
    case 4:
    case 5: {
      const int64_t n = t.stride[d];
      const int other = static_cast<int>(uniform(rng, 0, rank - 1));
      // Overflows int64 over the dim's extent when that is 3 or more.
      const int64_t big = add_sat<int64_t>(kI64Max / std::max<int64_t>(add_sat<int64_t>(t.shape[d], -1), 1), 1);
      t.stride[d] = pick<int64_t>(rng, {0, -1, mul_sat<int64_t>(n, -1), t.stride[other], add_sat<int64_t>(n, 1),
                                        mul_sat<int64_t>(n, 2), big, kI64Max,
                                        std::numeric_limits<int64_t>::min()});
      return at + "stride[" + std::to_string(d) + "]=" + std::to_string(t.stride[d]);
    }
    case 6:
      if (t.data != nullptr && chance(rng, 0.5)) {  // misaligned for its dtype, still in its memory
        const int shift = pick<int>(rng, {1, 2, 3});
        t.data = static_cast<unsigned char*>(t.data) + shift;
        return at + "data+=" + std::to_string(shift);
      }
      t.data = nullptr;
      return at + "data=null";
    case 7: {
      t.device = static_cast<hfa_device_kind>(pick<int>(rng, {HFA_CUDA, 99, -1}));
      if (chance(rng, 0.5)) t.device_index = pick<int32_t>(rng, {-1, 0, 1000});
      return at + "device=" + std::to_string(t.device) + ":" + std::to_string(t.device_index);
    }
    case 8: t.device_index = pick<int32_t>(rng, {-1, 1000, kI32Min}); return at + "device_index=" + std::to_string(t.device_index);
    default: s.present = !s.present; return s.name + (s.present ? "=given" : "=null");
  }
}

std::string value_mutation(Case& c, Slot& s, Rng& rng) {
  if (!in_bounds(c, s)) return "";
  const Extent e = extent_of(s.t);
  const int64_t index = uniform(rng, 0, static_cast<int64_t>(e.count) - 1);
  int64_t i = 0;
  std::string what;
  const int64_t size = element_bytes(s.t.dtype);
  auto* base = static_cast<unsigned char*>(s.t.data);
  const int32_t plus = static_cast<int32_t>(uniform(rng, 1, 3));
  for_each_offset(s.t, [&](int64_t offset) {
    if (i++ != index) return;
    unsigned char* at = base + offset * size;
    if (s.sign_values) {
      const float x = pick<float>(rng, {0.5f, -0.0f, 0.0f, kNaN, 2.0f, kInf, -1.0f, 1.0f});
      std::memcpy(at, &x, 4);
      what = std::to_string(x);
    } else {
      int32_t v;
      std::memcpy(&v, at, 4);
      const int32_t old = v;
      std::vector<int32_t> values = {-1, -plus, kI32Min, kI32Max, add_sat(old, plus), add_sat(old, -plus),
                                     add_sat(old, 1000), 0, kI32Max - plus};
      if (s.i32_end > 0) values.insert(values.end(), {s.i32_end, s.i32_end, s.i32_end - 1});
      v = values[uniform(rng, 0, static_cast<int64_t>(values.size()) - 1)];
      std::memcpy(at, &v, 4);
      what = std::to_string(v);
    }
  });
  return s.name + "[" + std::to_string(index) + "]=" + what;
}

// Moves s's view over the memory of another argument (or of itself): that argument's very view,
// s's own shape at its start, s's own shape a few elements of s's dtype on (an address aligned to
// that dtype), or the two rows by rows in turn, as in a packed buffer (sharing no byte: both
// views change). The values read there are anything: mutate() turns the NaN check off.
std::string alias_mutation(Case& c, Slot& s, Rng& rng) {
  std::vector<Slot*> targets;
  for (Slot& t : c.slots)
    if (t.passed && t.present && t.t.data != nullptr && !extent_of(t.t).empty) targets.push_back(&t);
  if (targets.empty()) return "";
  Slot& target = *targets[uniform(rng, 0, static_cast<int64_t>(targets.size()) - 1)];
  Slot& owner = c.slots[target.owner];
  const int64_t size = element_bytes(s.t.dtype);
  const int how = static_cast<int>(uniform(rng, 0, 3));
  if (how == 0) {
    s.t = target.t;
  } else if (how < 3) {
    int64_t at = static_cast<const unsigned char*>(target.t.data) - owner.mem.data();
    if (how == 2) at += size * uniform(rng, -2, 3);
    at = std::clamp<int64_t>(at - at % size, 0, static_cast<int64_t>(owner.mem.size()) - size);
    s.t.data = owner.mem.data() + at;
  } else {
    if (&target == &s || element_bytes(target.t.dtype) != size || target.t.rank != s.t.rank ||
        s.t.rank < 1 || s.t.rank > HFA_MAX_RANK)
      return "";
    // Rows of the larger extents, s's after each of the target's: (..., rows, 2, row).
    const int rank = s.t.rank;
    int64_t extent[HFA_MAX_RANK];
    for (int d = 0; d < rank; ++d) extent[d] = std::max<int64_t>({s.t.shape[d], target.t.shape[d], 1});
    int64_t running = mul_sat<int64_t>(2, extent[rank - 1]);
    s.t.stride[rank - 1] = target.t.stride[rank - 1] = 1;
    for (int d = rank - 2; d >= 0; --d) {
      s.t.stride[d] = target.t.stride[d] = running;
      running = mul_sat(running, extent[d]);
    }
    // Both views inside the owner's memory, or no interleaving.
    if (mul_sat<int64_t>(running, size) > static_cast<int64_t>(owner.mem.size())) return "";
    target.t.data = owner.mem.data();
    s.t.data = owner.mem.data() + extent[rank - 1] * size;
  }
  s.owner = target.owner;
  static const char* forms[] = {" = the view of ", " at the start of ", " a few elements from ",
                                " interleaved by rows with "};
  return s.name + forms[how] + target.name;
}

// 1 to 3 mutations, each redrawn until its view is safe (safe_view).
void mutate(Case& c, Rng& rng) {
  const int count = static_cast<int>(uniform(rng, 1, 3));
  for (int m = 0; m < count; ++m) {
    std::vector<Slot*> passed, valued;
    for (Slot& s : c.slots) {
      if (!s.passed) continue;
      passed.push_back(&s);
      if ((s.i32_values || s.sign_values) && s.present) valued.push_back(&s);
    }
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    if (u < 0.3 && !c.knobs.empty()) {
      Knob& knob = c.knobs[uniform(rng, 0, static_cast<int64_t>(c.knobs.size()) - 1)];
      c.mutations.push_back(knob.name + "=" + knob.apply(rng));
      continue;
    }
    if (u < 0.45 && !valued.empty()) {
      Slot& s = *valued[uniform(rng, 0, static_cast<int64_t>(valued.size()) - 1)];
      const std::string what = value_mutation(c, s, rng);
      if (!what.empty()) c.mutations.push_back(what);
      continue;
    }
    if (passed.empty()) continue;
    Slot& s = *passed[uniform(rng, 0, static_cast<int64_t>(passed.size()) - 1)];
    const bool alias = u < 0.6 && s.present;
    for (int attempt = 0; attempt < 32; ++attempt) {
      std::vector<std::pair<hfa_tensor, int>> views;  // an alias may move two views
      for (const Slot& each : c.slots) views.emplace_back(each.t, each.owner);
      const bool was_present = s.present;
      const std::string what = alias ? alias_mutation(c, s, rng) : tensor_mutation(s, rng);
      bool safe = !what.empty();
      for (const Slot& each : c.slots) safe = safe && safe_view(c, each);
      if (safe) {
        c.mutations.push_back(what);
        if (alias) c.nan_check = false;
        break;
      }
      for (size_t i = 0; i < c.slots.size(); ++i) std::tie(c.slots[i].t, c.slots[i].owner) = views[i];
      s.present = was_present;
    }
  }
  refill_inputs(c);
}

// Knobs for common options. `field` points into the case's options struct.
template <typename T>
Knob knob(const std::string& name, T* field, std::vector<T> values, Case* c = nullptr,
          std::vector<T> no_nan_check = {}) {
  return {name, [=](Rng& rng) {
            *field = values[uniform(rng, 0, static_cast<int64_t>(values.size()) - 1)];
            for (const T& v : no_nan_check)
              if (std::memcmp(&v, field, sizeof(T)) == 0) c->nan_check = false;
            return std::to_string(*field);
          }};
}

// softmax_scale and softcap values. The API takes any finite scale >= 0 and softcap >= 0, but a
// scale of 1e30 or more (scores, or the backward's exp(S - LSE) with the LSE of the valid call's
// scale, overflow to inf) or a softcap of FLT_MAX (softcap · log2(e) overflows) gives inf - inf:
// those calls skip the NaN check.
const std::vector<float> kScales = {kNaN, kInf, -kInf, -1.0f, -0.0f, 0.0f, 1e-30f, 1e-40f, 0.125f, 3.0f, 1e30f, kFltMax};
const std::vector<float> kSoftcaps = {kNaN, kInf, -kInf, -1.0f, -0.0f, 0.0f, 1e-30f, 5.0f, 50.0f, kFltMax};
const std::vector<int32_t> kWindows = {-1, -2, kI32Min, 0, 1, 3, kI32Max};
const std::vector<int32_t> kMargins = {-1, kI32Min, 0, 1, 132, kI32Max};

template <typename Options>
void add_common_knobs(Case& c, Options& o) {
  c.knobs.push_back({"softmax_scale", [&c, &o](Rng& rng) {
                       o.has_softmax_scale = pick<int32_t>(rng, {0, 1, 1, 1, 7});
                       o.softmax_scale = kScales[uniform(rng, 0, static_cast<int64_t>(kScales.size()) - 1)];
                       if (o.has_softmax_scale && std::fabs(o.softmax_scale) >= 1e30f) c.nan_check = false;
                       return std::to_string(o.has_softmax_scale) + "," + std::to_string(o.softmax_scale);
                     }});
  c.knobs.push_back(knob<int32_t>("causal", &o.causal, {0, 1, 2, -1}));
  c.knobs.push_back(knob<int32_t>("window_left", &o.window_left, kWindows));
  c.knobs.push_back(knob<int32_t>("window_right", &o.window_right, kWindows));
  c.knobs.push_back(knob<float>("softcap", &o.softcap, kSoftcaps, &c, {kFltMax}));
  c.knobs.push_back(knob<int32_t>("sm_margin", &o.sm_margin, kMargins));
  c.knobs.push_back({"stream", [&o](Rng&) {
                       o.stream = reinterpret_cast<void*>(uintptr_t{0x1234});
                       return std::string("0x1234");
                     }});
  c.knobs.push_back({"workspace", [&c, &o](Rng& rng) {
                       switch (uniform(rng, 0, 2)) {
                         case 0: o.workspace = c.scratch.data(); o.workspace_bytes = 1; return std::string("1 byte");
                         case 1: o.workspace = nullptr; o.workspace_bytes = SIZE_MAX; return std::string("null, SIZE_MAX bytes");
                         default: o.workspace = c.scratch.data(); o.workspace_bytes = 0; return std::string("0 bytes");
                       }
                     }});
}

const std::vector<std::string> kCommonNames = {"options", "softmax_scale", "softcap", "window_left",
                                               "window_right", "sm_margin", "workspace"};

// A call made as hfa_prepare_* and hfa_run: the status of the step that fails, else the run's. A
// CPU call needs no workspace; one that did would get it here.
template <typename Prepare>
hfa_status prepare_and_run(Prepare&& prepare) {
  hfa_call call;
  size_t workspace_bytes = 0;
  if (const hfa_status status = prepare(&call, &workspace_bytes); status != HFA_SUCCESS)
    return status;
  std::vector<unsigned char> workspace(workspace_bytes);
  return hfa_run(&call, workspace.data(), workspace_bytes);
}

// --- Attention: hfa_forward, hfa_backward, their workspace queries and prepared calls --------

enum class Entry { forward, forward_query, forward_prepared, backward, backward_query, backward_prepared };

struct AttentionCase : Case {
  hfa_options o = hfa_default_options();
  bool options_null = false;

  hfa_options resolved() {
    hfa_options r = o;
    r.cu_seqlens_q = ptr("cu_seqlens_q");
    r.cu_seqlens_k = ptr("cu_seqlens_k");
    r.sinks = ptr("sinks");
    r.seqused_q = ptr("seqused_q");
    r.seqused_k = ptr("seqused_k");
    r.dsinks = ptr("dsinks");
    r.q_descale = ptr("q_descale");
    r.k_descale = ptr("k_descale");
    r.v_descale = ptr("v_descale");
    r.softmax_d = ptr("softmax_d");
    r.alibi_slopes = ptr("alibi_slopes");
    r.kv_num_blocks = ptr("kv_num_blocks");
    r.kv_indices = ptr("kv_indices");
    r.full_kv_num_blocks = ptr("full_kv_num_blocks");
    r.full_kv_indices = ptr("full_kv_indices");
    r.kv_mask_bits = ptr("kv_mask_bits");
    return r;
  }
};

// ALiBi's slopes (a VECTOR row): one per query head or per (sequence, query head), at times.
void add_alibi_slopes(Case& c, int64_t batch, int64_t heads, Rng& rng) {
  const std::vector<int64_t> shape = chance(rng, 0.5) ? std::vector<int64_t>{heads} : std::vector<int64_t>{batch, heads};
  Slot& slopes = c.add("alibi_slopes", HFA_F32, shape, false, rng, true);
  c.set_f32(slopes, [&] { return std::uniform_real_distribution<float>(0.0f, 1.0f)(rng); });
  slopes.present = chance(rng, 0.2);
}

// A block-sparse mask (hfa_options' FlexAttention BlockMask rows, options.def): per row of query
// blocks a random set of the key blocks, each full or partial, none listed twice, the slots past
// a count holding -1 (unread); a partial block's bits random. Varlen: one mask over the packed
// tokens (batch 1); the batch and head dims broadcast at times. Small blocks keep the bits few.
void add_block_mask(AttentionCase& c, int64_t batch, int64_t heads, bool varlen, int64_t rows_q,
                    int64_t rows_k, Rng& rng, bool given) {
  c.o.sparse_block_q = chance(rng, 0.8) ? 64 : 128;
  c.o.sparse_block_kv = static_cast<int32_t>(pick<int64_t>(rng, {1, 2, 3, 32, 33}));
  const int64_t words = blocks_of(c.o.sparse_block_kv, 32);
  const int64_t q_blocks = std::max<int64_t>(blocks_of(rows_q, c.o.sparse_block_q), 1) + uniform(rng, 0, 1);
  const int64_t kv_blocks = blocks_of(rows_k, c.o.sparse_block_kv);
  const int64_t slots = std::max<int64_t>(kv_blocks, 1) + uniform(rng, 0, 1);
  const int64_t mask_batch = varlen || batch == 0 || chance(rng, 0.3) ? 1 : batch;
  const int64_t mask_heads = chance(rng, 0.6) ? 1 : heads;
  const bool full_lists = chance(rng, 0.5);
  std::vector<int32_t> counts, indices, full_counts, full_indices;
  for (int64_t row = 0; row < mask_batch * mask_heads * q_blocks; ++row) {
    std::vector<int32_t> blocks(static_cast<size_t>(kv_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    const int64_t listed = uniform(rng, 0, kv_blocks);
    const int64_t full = full_lists ? uniform(rng, 0, listed) : 0;
    full_counts.push_back(static_cast<int32_t>(full));
    counts.push_back(static_cast<int32_t>(listed - full));
    for (int64_t s = 0; s < slots; ++s) {
      full_indices.push_back(s < full ? blocks[s] : -1);
      indices.push_back(s < listed - full ? blocks[full + s] : -1);
    }
  }
  const std::vector<int64_t> count_shape = {mask_batch, mask_heads, q_blocks};
  const std::vector<int64_t> list_shape = {mask_batch, mask_heads, q_blocks, slots};
  auto lists = [&](const char* name, const std::vector<int64_t>& shape, const std::vector<int32_t>& values,
                   int64_t end, bool present) {
    Slot& s = c.add(name, HFA_I32, shape, false, rng, true);
    c.set_i32(s, values);
    s.i32_values = true;
    s.i32_end = static_cast<int32_t>(end);
    s.present = present;
  };
  lists("kv_num_blocks", count_shape, counts, slots + 1, given);
  lists("kv_indices", list_shape, indices, kv_blocks, given);
  lists("full_kv_num_blocks", count_shape, full_counts, slots + 1, given && full_lists);
  lists("full_kv_indices", list_shape, full_indices, kv_blocks, given && full_lists);
  Slot& bits = c.add("kv_mask_bits", HFA_I32, {mask_batch, mask_heads, q_blocks, slots * c.o.sparse_block_q * words},
                     false, rng, true);
  c.fill(bits, [&](unsigned char* at) {
    const auto word = static_cast<uint32_t>(rng());
    std::memcpy(at, &word, 4);
  });
  bits.present = given;
  if (!given) c.o.sparse_block_q = c.o.sparse_block_kv = 128;
}

// A descale of one of the FP8 forward's forms; `rows` is the longest sequence's.
void add_descale(AttentionCase& c, const std::string& name, int64_t batch, int64_t heads,
                 int64_t heads_kv, int64_t rows, int32_t* block, Rng& rng, bool given) {
  const int form = static_cast<int>(uniform(rng, 0, 2));
  const int64_t h = chance(rng, 0.5) ? heads : heads_kv;
  Slot* s = nullptr;
  if (form == 2 && (*block > 0 || given)) {
    if (*block == 0) *block = static_cast<int32_t>(uniform(rng, 1, 4));
    const int64_t blocks = blocks_of(rows, *block) + uniform(rng, 0, 1);
    s = &c.add(name, HFA_F32, {batch, std::max<int64_t>(blocks, 1), h}, false, rng);
  } else if (form == 1) {
    s = &c.add(name, HFA_F32, {batch, h}, false, rng);
  } else {
    s = &c.add(name, HFA_F32, {1}, false, rng);
  }
  c.set_f32(*s, [&] { return std::uniform_real_distribution<float>(0.25f, 2.0f)(rng); });
  s->present = given;
}

std::unique_ptr<Case> attention_case(Entry entry, Rng& rng) {
  auto owned = std::make_unique<AttentionCase>();
  AttentionCase& c = *owned;
  const bool backward = entry == Entry::backward || entry == Entry::backward_query ||
                        entry == Entry::backward_prepared;
  const bool query = entry == Entry::forward_query || entry == Entry::backward_query;
  const hfa_dtype dtype = backward ? pick(rng, {HFA_F32, HFA_F16, HFA_BF16})
                                   : pick(rng, {HFA_F32, HFA_F16, HFA_BF16, HFA_E4M3});
  const bool varlen = chance(rng, 0.35);
  const int64_t batch = chance(rng, 0.05) ? 0 : uniform(rng, 1, 3);
  const int64_t heads_kv = uniform(rng, 1, 2), heads = heads_kv * uniform(rng, 1, 2);
  const int64_t d = pick<int64_t>(rng, {64, 64, 64, 128}), dv = pick<int64_t>(rng, {d, d, 64});
  std::vector<int32_t> cu_q = {0}, cu_k = {0}, len_q, len_k;
  for (int64_t b = 0; b < batch; ++b) {
    len_q.push_back(static_cast<int32_t>(chance(rng, 0.1) ? 0 : uniform(rng, 1, 5)));
    len_k.push_back(static_cast<int32_t>(chance(rng, 0.1) ? 0 : uniform(rng, 1, 6)));
  }
  int64_t seqlen_q = varlen ? 0 : (chance(rng, 0.05) ? 0 : uniform(rng, 1, 5));
  int64_t seqlen_k = varlen ? 0 : (chance(rng, 0.05) ? 0 : uniform(rng, 1, 6));
  if (!varlen)
    for (int64_t b = 0; b < batch; ++b) len_q[b] = static_cast<int32_t>(seqlen_q), len_k[b] = static_cast<int32_t>(seqlen_k);
  for (int64_t b = 0; b < batch; ++b) cu_q.push_back(cu_q.back() + len_q[b]), cu_k.push_back(cu_k.back() + len_k[b]);
  const int32_t longest_q = len_q.empty() ? 0 : *std::max_element(len_q.begin(), len_q.end());
  const int32_t longest_k = len_k.empty() ? 0 : *std::max_element(len_k.begin(), len_k.end());
  if (varlen) {
    c.o.max_seqlen_q = std::max(longest_q, 1) + static_cast<int32_t>(uniform(rng, 0, 1));
    c.o.max_seqlen_k = std::max(longest_k, 1) + static_cast<int32_t>(uniform(rng, 0, 1));
  }
  const int64_t total_q = cu_q.back(), total_k = cu_k.back();
  auto shape = [&](int64_t rows_or_total, int64_t h, int64_t dim) -> std::vector<int64_t> {
    if (varlen) return {rows_or_total, h, dim};
    return {batch, rows_or_total, h, dim};
  };
  const int64_t rows_q = varlen ? total_q : seqlen_q, rows_k = varlen ? total_k : seqlen_k;
  const std::vector<int64_t> lse_shape =
      varlen ? std::vector<int64_t>{heads, total_q} : std::vector<int64_t>{batch, heads, seqlen_q};

  hfa_dtype out_dtype = dtype;
  if (dtype == HFA_E4M3) out_dtype = pick(rng, {HFA_BF16, HFA_F16, HFA_F32});
  else if (!backward && dtype != HFA_F32 && chance(rng, 0.3)) out_dtype = HFA_F32;

  c.add("q", dtype, shape(rows_q, heads, d), false, rng);
  c.add("k", dtype, shape(rows_k, heads_kv, d), false, rng);
  c.add("v", dtype, shape(rows_k, heads_kv, dv), false, rng);
  c.add("out", out_dtype, shape(rows_q, heads, dv), !backward, rng);
  c.add("lse", HFA_F32, lse_shape, !backward, rng);
  c.find("lse")->present = backward || chance(rng, 0.7);
  for (const char* name : {"cu_seqlens_q", "cu_seqlens_k"}) {
    Slot& s = c.add(name, HFA_I32, {batch + 1}, false, rng, true);
    c.set_i32(s, name[11] == 'q' ? cu_q : cu_k);
    s.i32_values = true;
    s.present = varlen;
  }
  Slot& sinks = c.add("sinks", HFA_F32, {heads}, false, rng);
  sinks.present = chance(rng, 0.3);
  for (const char* name : {"seqused_q", "seqused_k"}) {
    const bool of_q = name[8] == 'q';
    Slot& s = c.add(name, HFA_I32, {batch}, false, rng, true);
    std::vector<int32_t> used;
    for (int64_t b = 0; b < batch; ++b) used.push_back(static_cast<int32_t>(uniform(rng, 0, of_q ? len_q[b] : len_k[b])));
    c.set_i32(s, used);
    s.i32_values = true;
    s.present = chance(rng, 0.2);
  }
  const int64_t descale_rows_q = varlen ? c.o.max_seqlen_q : seqlen_q;
  const int64_t descale_rows_k = varlen ? c.o.max_seqlen_k : seqlen_k;
  const bool fp8 = dtype == HFA_E4M3;
  add_descale(c, "q_descale", batch, heads, heads_kv, descale_rows_q, &c.o.descale_block_q, rng, fp8 && chance(rng, 0.6));
  add_descale(c, "k_descale", batch, heads_kv, heads_kv, descale_rows_k, &c.o.descale_block_kv, rng, fp8 && chance(rng, 0.6));
  add_descale(c, "v_descale", batch, heads_kv, heads_kv, descale_rows_k, &c.o.descale_block_kv, rng, fp8 && chance(rng, 0.6));
  // A block option belongs to a given rank-3 descale.
  auto per_block = [&](const char* name) { return c.ptr(name) && c.ptr(name)->rank == 3; };
  if (!per_block("q_descale")) c.o.descale_block_q = 0;
  if (!per_block("k_descale") && !per_block("v_descale")) c.o.descale_block_kv = 0;

  add_alibi_slopes(c, batch, heads, rng);
  add_block_mask(c, batch, heads, varlen, rows_q, rows_k, rng, chance(rng, 0.25));

  c.o.causal = chance(rng, 0.3);
  if (chance(rng, 0.2)) c.o.window_left = static_cast<int32_t>(uniform(rng, 0, 4)), c.o.window_right = static_cast<int32_t>(uniform(rng, -1, 3));
  if (chance(rng, 0.2)) c.o.softcap = std::uniform_real_distribution<float>(5.0f, 30.0f)(rng);
  if (chance(rng, 0.3)) c.o.has_softmax_scale = 1, c.o.softmax_scale = std::uniform_real_distribution<float>(0.05f, 0.5f)(rng);
  if (!backward && out_dtype == HFA_F32 && c.ptr("lse") && chance(rng, 0.2)) c.o.accumulate = 1;

  if (backward) {
    // out and lse from the forward of these inputs; the gradients of dout.
    const hfa_options fwd = c.resolved();
    EXPECT_EQ(HFA_SUCCESS, hfa_forward(c.ptr("q"), c.ptr("k"), c.ptr("v"), c.ptr("out"), c.ptr("lse"), &fwd))
        << hfa_last_error();
    c.add("dout", dtype, shape(rows_q, heads, dv), false, rng);
    c.add("dq", dtype, shape(rows_q, heads, d), true, rng);
    c.add("dk", dtype, shape(rows_k, heads_kv, d), true, rng);
    c.add("dv", dtype, shape(rows_k, heads_kv, dv), true, rng);
    Slot& dsinks = c.add("dsinks", HFA_F32, {heads}, true, rng);
    dsinks.present = c.ptr("sinks") && chance(rng, 0.5);
    Slot& softmax_d = c.add("softmax_d", HFA_F32, lse_shape, false, rng);
    softmax_d.present = chance(rng, 0.2);
    c.o.deterministic = chance(rng, 0.3);
  }

  c.label = std::string(varlen ? "varlen" : "fixed") + " " + dtype_label(dtype) + "->" +
            dtype_label(out_dtype) + " batch " + std::to_string(batch) + " heads " +
            std::to_string(heads) + "/" + std::to_string(heads_kv) + " d " + std::to_string(d) +
            "/" + std::to_string(dv) + (varlen ? "" : " seqlen " + std::to_string(seqlen_q) + "/" + std::to_string(seqlen_k));
  for (Slot& s : c.slots) {
    if (query) {
      s.writable = false;  // a query writes no tensor
      s.passed = s.name != "out" && s.name != "lse" && s.name != "dout" && s.name != "dq" &&
                 s.name != "dk" && s.name != "dv" && !(backward && (s.name == "dsinks" || s.name == "softmax_d"));
    }
  }

  add_common_knobs(c, c.o);
  c.knobs.push_back(knob<int32_t>("max_seqlen_q", &c.o.max_seqlen_q, {0, -1, kI32Min, 1, kI32Max, c.o.max_seqlen_q - 1, c.o.max_seqlen_q + 1}));
  c.knobs.push_back(knob<int32_t>("max_seqlen_k", &c.o.max_seqlen_k, {0, -1, kI32Min, 1, kI32Max, c.o.max_seqlen_k - 1, c.o.max_seqlen_k + 1}));
  c.knobs.push_back(knob<int32_t>("descale_block_q", &c.o.descale_block_q, {-1, kI32Min, 0, 1, 2, 128, kI32Max}));
  c.knobs.push_back(knob<int32_t>("descale_block_kv", &c.o.descale_block_kv, {-1, kI32Min, 0, 1, 2, 128, kI32Max}));
  c.knobs.push_back(knob<int32_t>("deterministic", &c.o.deterministic, {0, 1, 7}));
  c.knobs.push_back(knob<int32_t>("accumulate", &c.o.accumulate, {0, 1, 3}));
  c.knobs.push_back(knob<int32_t>("sparse_block_q", &c.o.sparse_block_q, {-1, kI32Min, 0, 1, 63, 64, 128, 192, 256, 320, kI32Max}));
  c.knobs.push_back(knob<int32_t>("sparse_block_kv", &c.o.sparse_block_kv, {-1, kI32Min, 0, 1, 2, 31, 32, 33, kI32Max}));
  c.knobs.push_back({"options", [&c](Rng&) { c.options_null = true; return std::string("null"); }});
  c.names = {"q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "sinks",
             "seqused_q", "seqused_k", "q_descale", "k_descale", "v_descale", "descale_block_q",
             "descale_block_kv", "alibi_slopes", "kv_num_blocks", "kv_indices", "full_kv_num_blocks",
             "full_kv_indices", "kv_mask_bits", "sparse_block_q", "sparse_block_kv"};
  c.names.insert(kCommonNames.begin(), kCommonNames.end());
  if (query) {
    c.has_bytes = true;
    c.names.insert("bytes");
    c.knobs.push_back({"bytes", [&c](Rng&) { c.bytes_null = true; return std::string("null"); }});
  } else {
    c.names.insert({"out", "lse"});
  }
  if (backward && !query) c.names.insert({"dout", "dq", "dk", "dv", "dsinks", "softmax_d"});

  // Null options are the defaults: no option tensor is read.
  c.ignored = [&c](const Slot& s) {
    static const std::set<std::string> inline_args = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv"};
    return c.options_null && !inline_args.count(s.name);
  };
  c.call = [&c, entry]() {
    const hfa_options r = c.resolved();
    const hfa_options* o = c.options_null ? nullptr : &r;
    switch (entry) {
      case Entry::forward: return hfa_forward(c.ptr("q"), c.ptr("k"), c.ptr("v"), c.ptr("out"), c.ptr("lse"), o);
      case Entry::forward_query: return hfa_forward_workspace_size(c.ptr("q"), c.ptr("k"), c.ptr("v"), o, c.bytes_ptr());
      case Entry::forward_prepared:
        return prepare_and_run([&](hfa_call* call, size_t* bytes) {
          return hfa_prepare_forward(c.ptr("q"), c.ptr("k"), c.ptr("v"), c.ptr("out"), c.ptr("lse"), o, call, bytes);
        });
      case Entry::backward:
        return hfa_backward(c.ptr("dout"), c.ptr("q"), c.ptr("k"), c.ptr("v"), c.ptr("out"), c.ptr("lse"),
                            c.ptr("dq"), c.ptr("dk"), c.ptr("dv"), o);
      case Entry::backward_prepared:
        return prepare_and_run([&](hfa_call* call, size_t* bytes) {
          return hfa_prepare_backward(c.ptr("dout"), c.ptr("q"), c.ptr("k"), c.ptr("v"), c.ptr("out"),
                                      c.ptr("lse"), c.ptr("dq"), c.ptr("dk"), c.ptr("dv"), o, call, bytes);
        });
      default: return hfa_backward_workspace_size(c.ptr("q"), c.ptr("k"), c.ptr("v"), o, c.bytes_ptr());
    }
  };
  c.seal();
  return owned;
}

// --- hfa_forward_kvcache, its workspace query and its prepared call --------------------------

enum class CacheFormat { plain, fp8_per_head, fp8_per_token, nvfp4, mxfp4 };

struct KVCase : Case {
  hfa_kvcache_options o = hfa_default_kvcache_options();
  bool options_null = false;

  hfa_kvcache_options resolved() {
    hfa_kvcache_options r = o;
    r.cache_seqlens = ptr("cache_seqlens");
    r.block_table = ptr("block_table");
    r.k_scale = ptr("k_scale");
    r.v_scale = ptr("v_scale");
    r.k_global_scale = ptr("k_global_scale");
    r.v_global_scale = ptr("v_global_scale");
    r.k_new = ptr("k_new");
    r.v_new = ptr("v_new");
    r.rotary_cos = ptr("rotary_cos");
    r.rotary_sin = ptr("rotary_sin");
    r.cu_seqlens_q = ptr("cu_seqlens_q");
    r.cu_seqlens_k_new = ptr("cu_seqlens_k_new");
    r.alibi_slopes = ptr("alibi_slopes");
    r.indices = ptr("indices");
    return r;
  }
};

enum class KVEntry { call, query, prepared };

std::unique_ptr<Case> kvcache_case(KVEntry entry, Rng& rng) {
  const bool query = entry == KVEntry::query;
  auto owned = std::make_unique<KVCase>();
  KVCase& c = *owned;
  const hfa_dtype dtype = pick(rng, {HFA_F32, HFA_F16, HFA_BF16});
  // MLA (DeepSeek's latent attention absorbed for decode): head dim 576 for q and its one cache,
  // V the view of the cache's first 512 columns; an append writes each new token once, through
  // k_cache (v_new absent or the same view of k_new); no rotary tables.
  const bool mla = chance(rng, 0.15);
  const auto format = mla ? CacheFormat::plain : static_cast<CacheFormat>(uniform(rng, 0, 4));
  const bool fp4 = format == CacheFormat::nvfp4 || format == CacheFormat::mxfp4;
  const bool paged = chance(rng, 0.6);
  const bool varlen = chance(rng, 0.3);
  const bool append = chance(rng, 0.4);
  const bool varlen_new = append && chance(rng, 0.4);
  const bool rotary = append && !mla && chance(rng, 0.5);
  const int64_t batch = chance(rng, 0.05) ? 0 : uniform(rng, 1, 3);
  const int64_t heads_kv = uniform(rng, 1, 2), heads = heads_kv * uniform(rng, 1, 2);
  const int64_t d = mla ? 576 : pick<int64_t>(rng, {64, 64, 128}), dv = mla ? 512 : d;
  const int64_t page_size = paged ? pick<int64_t>(rng, {1, 4, 16}) : uniform(rng, 1, 20);
  const int64_t max_pages = paged ? uniform(rng, 1, 4) : 1;
  const int64_t num_pages = paged ? batch * max_pages + uniform(rng, 0, 2) : batch;
  const int64_t capacity = max_pages * page_size;

  // Query rows and new tokens per sequence, then cache lengths that leave room for the new ones.
  std::vector<int32_t> rows(batch), added(batch), lengths(batch), cu_q = {0}, cu_new = {0};
  const int64_t seqlen_q = varlen ? 0 : (chance(rng, 0.05) ? 0 : uniform(rng, 1, 3));
  const int64_t seqlen_new = append && !varlen_new ? uniform(rng, 1, std::min<int64_t>(3, capacity)) : 0;
  for (int64_t b = 0; b < batch; ++b) {
    rows[b] = static_cast<int32_t>(varlen ? uniform(rng, 0, 3) : seqlen_q);
    added[b] = static_cast<int32_t>(varlen_new ? uniform(rng, 0, std::min<int64_t>(3, capacity)) : seqlen_new);
    lengths[b] = static_cast<int32_t>(uniform(rng, 0, capacity - added[b]));
    cu_q.push_back(cu_q.back() + rows[b]);
    cu_new.push_back(cu_new.back() + added[b]);
  }
  const int32_t longest_q = rows.empty() ? 0 : *std::max_element(rows.begin(), rows.end());
  if (varlen) c.o.max_seqlen_q = std::max(longest_q, 1) + static_cast<int32_t>(uniform(rng, 0, 1));
  const int64_t total_q = cu_q.back();

  const std::vector<int64_t> q_shape = varlen ? std::vector<int64_t>{total_q, heads, d}
                                              : std::vector<int64_t>{batch, seqlen_q, heads, d};
  c.add("q", dtype, q_shape, false, rng);
  const hfa_dtype cache_dtype = format == CacheFormat::plain ? dtype : fp4 ? HFA_FP4_E2M1X2 : HFA_E4M3;
  const int64_t row = fp4 ? d / 2 : d;
  const std::vector<int64_t> cache_shape = {paged ? num_pages : batch, page_size, heads_kv, row};
  Slot& k = c.add("k_cache", cache_dtype, cache_shape, false, rng);
  Slot& v = mla ? c.view("v_cache", k, dv) : c.add("v_cache", cache_dtype, cache_shape, false, rng);
  if (fp4)  // random nibbles (E2M1 has no NaN)
    for (Slot* s : {&k, &v}) c.fill(*s, [&](unsigned char* at) { *at = static_cast<unsigned char>(uniform(rng, 0, 255)); });
  std::vector<int64_t> out_shape = q_shape;
  out_shape.back() = dv;
  c.add("out", dtype, out_shape, !query, rng);
  Slot& lse = c.add("lse", HFA_F32, varlen ? std::vector<int64_t>{heads, total_q} : std::vector<int64_t>{batch, heads, seqlen_q},
                    !query, rng, true);
  lse.present = chance(rng, 0.6);

  Slot& seqlens = c.add("cache_seqlens", HFA_I32, {batch}, false, rng, true);
  c.set_i32(seqlens, lengths);
  seqlens.i32_values = true;
  seqlens.i32_end = static_cast<int32_t>(capacity + 1);
  Slot& table = c.add("block_table", HFA_I32, {batch, max_pages}, false, rng);
  {
    // Each sequence's pages: distinct pages of the cache; past its last page, anything.
    std::vector<int32_t> pages(static_cast<size_t>(num_pages));
    for (int64_t i = 0; i < num_pages; ++i) pages[i] = static_cast<int32_t>(i);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::vector<int32_t> entries;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < max_pages; ++i) {
        const bool used = i * page_size < lengths[b] + added[b];
        entries.push_back(used || chance(rng, 0.5) ? pages[b * max_pages + i] : static_cast<int32_t>(uniform(rng, -9, 99)));
      }
    c.set_i32(table, entries);
  }
  table.i32_values = true;
  table.i32_end = static_cast<int32_t>(num_pages);
  table.present = paged;

  // Scales for the format; for a plain cache, per-kv-head ones to be given by mistake.
  for (const char* name : {"k_scale", "v_scale"}) {
    Slot* s = nullptr;
    switch (format) {
      case CacheFormat::plain:
      case CacheFormat::fp8_per_head:
        s = &c.add(name, HFA_F32, {heads_kv}, false, rng);
        break;
      case CacheFormat::fp8_per_token:
        s = &c.add(name, HFA_F32, {cache_shape[0], page_size, heads_kv}, false, rng);
        break;
      case CacheFormat::nvfp4:
        s = &c.add(name, HFA_E4M3, {cache_shape[0], page_size, heads_kv, d / 16}, false, rng);
        break;
      case CacheFormat::mxfp4:
        s = &c.add(name, HFA_UE8M0, {cache_shape[0], page_size, heads_kv, d / 32}, false, rng);
        break;
    }
    if (s->t.dtype == HFA_F32) c.set_f32(*s, [&] { return std::uniform_real_distribution<float>(0.01f, 0.5f)(rng); });
    if (s->t.dtype == HFA_E4M3) c.fill(*s, [&](unsigned char* at) { *at = static_cast<unsigned char>(uniform(rng, 0x20, 0x40)); });
    s->present = format != CacheFormat::plain;
  }
  for (const char* name : {"k_global_scale", "v_global_scale"}) {
    Slot& s = c.add(name, HFA_F32, {1}, false, rng);
    c.set_f32(s, [&] { return std::uniform_real_distribution<float>(0.1f, 2.0f)(rng); });
    s.present = format == CacheFormat::nvfp4;
  }
  // An append (k_new given) writes the caches, and the scales of a format that has one per row.
  c.prepare = [&c, query, mla]() {
    const bool append = c.ptr("k_new") != nullptr && !query;
    const bool plain = c.find("k_cache")->t.dtype == c.find("q")->t.dtype;
    const bool per_head = c.ptr("k_scale") && c.ptr("k_scale")->rank == 1;
    const bool scales_per_row = !plain && !per_head;
    c.find("k_cache")->writable = append;
    c.find("v_cache")->writable = append && !mla;  // MLA's V is written through k_cache
    for (const char* name : {"k_scale", "v_scale"}) c.find(name)->writable = append && scales_per_row;
  };
  // MLA: the append writes k_cache, of which v_cache may be the view (its first 512 columns).
  if (mla)
    c.in_place = [](const Slot& written, const Slot& read) {
      if (written.name != "k_cache" || read.name != "v_cache" || written.t.data != read.t.data ||
          written.t.rank != read.t.rank || written.t.rank < 1 || written.t.rank > HFA_MAX_RANK)
        return false;
      const int last = written.t.rank - 1;
      for (int dim = 0; dim < written.t.rank; ++dim)
        if (written.t.stride[dim] != read.t.stride[dim] || (dim < last && written.t.shape[dim] != read.t.shape[dim]))
          return false;
      return read.t.shape[last] <= written.t.shape[last];
    };

  // New tokens, the rotary tables that go with them, varlen offsets.
  const int64_t total_new = cu_new.back();
  const std::vector<int64_t> new_rows = varlen_new ? std::vector<int64_t>{total_new, heads_kv, d}
                                                   : std::vector<int64_t>{batch, std::max<int64_t>(seqlen_new, 1), heads_kv, d};
  Slot& k_new = c.add("k_new", dtype, new_rows, false, rng);
  k_new.present = append;
  Slot& v_new = mla ? c.view("v_new", k_new, dv) : c.add("v_new", dtype, new_rows, false, rng);
  v_new.present = append && (!mla || chance(rng, 0.5));
  const int64_t half = pick<int64_t>(rng, {1, 4, d / 2});
  const int64_t seqlen_ro = capacity + longest_q + uniform(rng, 1, 3);
  const hfa_dtype rotary_dtype = chance(rng, 0.5) ? HFA_F32 : dtype;
  for (const char* name : {"rotary_cos", "rotary_sin"}) {
    Slot& s = c.add(name, rotary_dtype, {seqlen_ro, half}, false, rng);
    int64_t i = 0;
    c.fill(s, [&](unsigned char* at) {
      const float angle = static_cast<float>(i / half) / std::pow(100.0f, static_cast<float>(i % half) / half);
      put(rotary_dtype, at, name[7] == 'c' ? std::cos(angle) : std::sin(angle));
      ++i;
    });
    s.present = rotary;
  }
  c.o.rotary_interleaved = chance(rng, 0.5);
  for (const char* name : {"cu_seqlens_q", "cu_seqlens_k_new"}) {
    const bool of_q = name[11] == 'q';
    Slot& s = c.add(name, HFA_I32, {batch + 1}, false, rng, true);
    c.set_i32(s, of_q ? cu_q : cu_new);
    s.i32_values = true;
    s.present = of_q ? varlen : varlen_new;
  }

  add_alibi_slopes(c, batch, heads, rng);

  // Sparse (top-k) attention: each query row's own tokens of the paged cache taken as a pool,
  // -1 for none; the lengths, the table, ALiBi and the masks then stay out.
  const bool sparse = paged && !append && chance(rng, 0.2);
  {
    const int64_t topk = uniform(rng, 1, 4), pool = num_pages * page_size;
    const std::vector<int64_t> shape = varlen ? std::vector<int64_t>{total_q, topk} : std::vector<int64_t>{batch, seqlen_q, topk};
    Slot& s = c.add("indices", HFA_I32, shape, false, rng, true);
    std::vector<int32_t> tokens;
    for (int64_t n = 0; n < (varlen ? total_q : batch * seqlen_q) * topk; ++n)
      tokens.push_back(pool == 0 || chance(rng, 0.2) ? -1 : static_cast<int32_t>(uniform(rng, 0, pool - 1)));
    c.set_i32(s, tokens);
    s.i32_values = true;
    s.i32_end = static_cast<int32_t>(pool);
    s.present = sparse;
  }
  if (sparse)
    for (const char* name : {"cache_seqlens", "block_table", "alibi_slopes"}) c.find(name)->present = false;

  c.o.causal = !sparse && chance(rng, 0.3);
  if (!sparse && chance(rng, 0.2)) c.o.window_left = static_cast<int32_t>(uniform(rng, 0, 8)), c.o.window_right = static_cast<int32_t>(uniform(rng, -1, 3));
  if (chance(rng, 0.2)) c.o.softcap = std::uniform_real_distribution<float>(5.0f, 30.0f)(rng);
  if (chance(rng, 0.3)) c.o.has_softmax_scale = 1, c.o.softmax_scale = std::uniform_real_distribution<float>(0.05f, 0.5f)(rng);
  if (chance(rng, 0.3)) c.o.num_splits = static_cast<int32_t>(uniform(rng, 1, 4));
  else if (chance(rng, 0.3)) c.o.split_size = static_cast<int32_t>(uniform(rng, 1, 8));
  c.o.validate = chance(rng, 0.2);

  static const char* format_names[] = {"plain", "fp8_per_head", "fp8_per_token", "nvfp4", "mxfp4"};
  c.label = std::string(format_names[static_cast<int>(format)]) + " " + dtype_label(dtype) +
            (paged ? " paged " + std::to_string(num_pages) + "x" + std::to_string(page_size) : " contiguous " + std::to_string(page_size)) +
            " batch " + std::to_string(batch) + (varlen ? " varlen q" : "") +
            (append ? (varlen_new ? " append varlen" : " append") : "") + (rotary ? " rotary" : "") +
            (sparse ? " sparse" : "") + (mla ? " mla" : "");
  if (query)
    for (Slot& s : c.slots) s.passed = s.name != "out" && s.name != "lse";

  add_common_knobs(c, c.o);
  c.knobs.push_back(knob<int32_t>("num_splits", &c.o.num_splits, {-1, 0, 1, 2, 255, 256, 257, kI32Max, kI32Min}));
  c.knobs.push_back(knob<int32_t>("split_size", &c.o.split_size, {-1, 0, 1, 2, 7, 1000, kI32Max, kI32Min}));
  c.knobs.push_back(knob<int32_t>("validate", &c.o.validate, {0, 1, 5}));
  c.knobs.push_back(knob<int32_t>("rotary_interleaved", &c.o.rotary_interleaved, {0, 1, -3}));
  c.knobs.push_back(knob<int32_t>("max_seqlen_q", &c.o.max_seqlen_q, {0, -1, kI32Min, 1, kI32Max, c.o.max_seqlen_q - 1, c.o.max_seqlen_q + 1}));
  c.knobs.push_back({"options", [&c](Rng&) { c.options_null = true; return std::string("null"); }});
  c.names = {"q", "k_cache", "v_cache", "cache_seqlens", "block_table", "k_scale", "v_scale",
             "k_global_scale", "v_global_scale", "num_splits", "split_size", "k_new", "v_new",
             "rotary_cos", "rotary_sin", "cu_seqlens_q", "max_seqlen_q", "cu_seqlens_k_new",
             "alibi_slopes", "indices", "causal"};
  c.names.insert(kCommonNames.begin(), kCommonNames.end());
  if (query) {
    c.has_bytes = true;
    c.names.insert("bytes");
    c.knobs.push_back({"bytes", [&c](Rng&) { c.bytes_null = true; return std::string("null"); }});
  } else {
    c.names.insert({"out", "lse"});
  }
  c.call = [&c, entry]() {
    const hfa_kvcache_options r = c.resolved();
    const hfa_kvcache_options* o = c.options_null ? nullptr : &r;
    switch (entry) {
      case KVEntry::query:
        return hfa_forward_kvcache_workspace_size(c.ptr("q"), c.ptr("k_cache"), c.ptr("v_cache"), o, c.bytes_ptr());
      case KVEntry::prepared:
        return prepare_and_run([&](hfa_call* call, size_t* bytes) {
          return hfa_prepare_forward_kvcache(c.ptr("q"), c.ptr("k_cache"), c.ptr("v_cache"), c.ptr("out"),
                                             c.ptr("lse"), o, call, bytes);
        });
      case KVEntry::call: break;
    }
    return hfa_forward_kvcache(c.ptr("q"), c.ptr("k_cache"), c.ptr("v_cache"), c.ptr("out"), c.ptr("lse"), o);
  };
  c.seal();
  return owned;
}

// --- hfa_quantize_kv / hfa_dequantize_kv -------------------------------------------------------

struct QuantizeCase : Case {
  hfa_quantize_options o{};
  bool options_null = false;
};

std::unique_ptr<Case> quantize_kv_case(bool dequantize, Rng& rng) {
  auto owned = std::make_unique<QuantizeCase>();
  QuantizeCase& c = *owned;
  c.o.format = static_cast<hfa_kv_format>(uniform(rng, 1, 4));
  const bool fp4 = c.o.format == HFA_KV_NVFP4 || c.o.format == HFA_KV_MXFP4;
  const int64_t block = c.o.format == HFA_KV_NVFP4 ? 16 : 32;
  const hfa_dtype dtype = pick(rng, {HFA_F32, HFA_F16, HFA_BF16});
  const int rank = static_cast<int>(uniform(rng, 2, 4));
  const int64_t d = fp4 ? block * uniform(rng, 1, 4) : pick<int64_t>(rng, {1, 8, 32, 64});
  std::vector<int64_t> shape;
  for (int i = 0; i < rank - 2; ++i) shape.push_back(chance(rng, 0.05) ? 0 : uniform(rng, 1, 3));
  const int64_t heads = uniform(rng, 1, 3);
  shape.push_back(heads);
  std::vector<int64_t> codes_shape = shape, scale_shape = shape;
  shape.push_back(d);
  codes_shape.push_back(fp4 ? d / 2 : d);
  if (fp4) scale_shape.push_back(d / block);
  if (c.o.format == HFA_KV_FP8_PER_HEAD) scale_shape = {heads};

  const char* values = dequantize ? "out" : "x";
  const hfa_dtype code_dtype = fp4 ? HFA_FP4_E2M1X2 : HFA_E4M3;
  const hfa_dtype scale_dtype = !fp4 ? HFA_F32 : c.o.format == HFA_KV_NVFP4 ? HFA_E4M3 : HFA_UE8M0;
  const bool scale_written = !dequantize && c.o.format != HFA_KV_FP8_PER_HEAD;
  c.add(values, dtype, shape, dequantize, rng);
  Slot& codes = c.add("codes", code_dtype, codes_shape, !dequantize, rng);
  if (fp4 && dequantize) c.fill(codes, [&](unsigned char* at) { *at = static_cast<unsigned char>(uniform(rng, 0, 255)); });
  Slot& scale = c.add("scale", scale_dtype, scale_shape, scale_written, rng, c.o.format == HFA_KV_FP8_PER_HEAD);
  if (!scale_written) {
    if (scale_dtype == HFA_F32) c.set_f32(scale, [&] { return std::uniform_real_distribution<float>(0.01f, 0.5f)(rng); });
    if (scale_dtype == HFA_E4M3) c.fill(scale, [&](unsigned char* at) { *at = static_cast<unsigned char>(uniform(rng, 0x20, 0x40)); });
  }
  Slot& global = c.add("global_scale", HFA_F32, {1}, false, rng);
  c.set_f32(global, [&] { return std::uniform_real_distribution<float>(0.1f, 2.0f)(rng); });
  global.present = c.o.format == HFA_KV_NVFP4;

  c.label = std::string(dequantize ? "dequantize" : "quantize") + " format " + std::to_string(c.o.format) +
            " " + dtype_label(dtype) + " rank " + std::to_string(rank) + " d " + std::to_string(d);
  c.knobs.push_back({"format", [&c](Rng& rng) {
                       c.o.format = static_cast<hfa_kv_format>(pick<int>(rng, {0, 1, 2, 3, 4, 5, 99, -1}));
                       return std::to_string(c.o.format);
                     }});
  c.knobs.push_back({"options", [&c](Rng&) { c.options_null = true; return std::string("null"); }});
  c.knobs.push_back({"stream", [&c](Rng&) { c.o.stream = reinterpret_cast<void*>(uintptr_t{0x1234}); return std::string("0x1234"); }});
  // The scale is written by a quantization to any format but per kv-head.
  c.prepare = [&c, dequantize]() {
    c.find("scale")->writable = !dequantize && c.o.format != HFA_KV_FP8_PER_HEAD;
  };
  c.names = {values, "codes", "scale", "options", "format", "global_scale"};
  c.call = [&c, dequantize]() {
    hfa_quantize_options r = c.o;
    r.global_scale = c.ptr("global_scale");
    const hfa_quantize_options* o = c.options_null ? nullptr : &r;
    if (dequantize) return hfa_dequantize_kv(c.ptr("codes"), c.ptr("scale"), c.ptr("out"), o);
    return hfa_quantize_kv(c.ptr("x"), c.ptr("codes"), c.ptr("scale"), o);
  };
  c.seal();
  return owned;
}

// --- hfa_quantize_fp8 and hfa_hadamard_signs ---------------------------------------------------

struct Fp8Case : Case {
  hfa_quantize_fp8_options o{};
  bool options_null = false;
};

std::unique_ptr<Case> quantize_fp8_case(Rng& rng) {
  auto owned = std::make_unique<Fp8Case>();
  Fp8Case& c = *owned;
  c.o.granularity = static_cast<hfa_fp8_granularity>(uniform(rng, 1, 3));
  const bool per_block = c.o.granularity == HFA_FP8_PER_BLOCK;
  if (per_block) c.o.block_rows = static_cast<int32_t>(uniform(rng, 1, 4));
  const hfa_dtype dtype = pick(rng, {HFA_F32, HFA_F16, HFA_BF16});
  const bool varlen = chance(rng, 0.3);
  const int64_t batch = chance(rng, 0.05) ? 0 : uniform(rng, 1, 3);
  const int64_t heads = uniform(rng, 1, 3);
  const int64_t d = chance(rng, 0.05) ? 0 : pick<int64_t>(rng, {16, 64, 64, 128});
  const int64_t seqlen = varlen ? 0 : (chance(rng, 0.05) ? 0 : uniform(rng, 1, 5));
  std::vector<int32_t> cu = {0};
  int64_t longest = seqlen;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = varlen ? uniform(rng, 0, 5) : seqlen;
    longest = std::max(longest, length);
    cu.push_back(cu.back() + static_cast<int32_t>(length));
  }
  const std::vector<int64_t> shape = varlen ? std::vector<int64_t>{cu.back(), heads, d}
                                            : std::vector<int64_t>{batch, seqlen, heads, d};
  c.add("x", dtype, shape, false, rng);
  c.add("codes", HFA_E4M3, shape, true, rng);
  std::vector<int64_t> scale_shape = {1};
  if (c.o.granularity == HFA_FP8_PER_HEAD) scale_shape = {batch, heads};
  if (per_block) {
    const int64_t blocks = blocks_of(longest, c.o.block_rows) + (varlen ? uniform(rng, 0, 1) : 0);
    scale_shape = {batch, blocks, heads};
  }
  c.add("scale", HFA_F32, scale_shape, true, rng, true);
  Slot& cu_slot = c.add("cu_seqlens", HFA_I32, {batch + 1}, false, rng, true);
  c.set_i32(cu_slot, cu);
  cu_slot.i32_values = true;
  cu_slot.present = varlen;
  Slot& signs = c.add("signs", HFA_F32, {d}, false, rng, true);
  c.set_f32(signs, [&] { return chance(rng, 0.5) ? 1.0f : -1.0f; });
  signs.sign_values = true;
  signs.present = (d == 64 || d == 128) && chance(rng, 0.4);

  c.label = std::string(varlen ? "varlen" : "fixed") + " granularity " + std::to_string(c.o.granularity) +
            " block_rows " + std::to_string(c.o.block_rows) + " " + dtype_label(dtype) + " d " + std::to_string(d);
  c.knobs.push_back({"granularity", [&c](Rng& rng) {
                       c.o.granularity = static_cast<hfa_fp8_granularity>(pick<int>(rng, {0, 1, 2, 3, 4, 99, -1}));
                       return std::to_string(c.o.granularity);
                     }});
  c.knobs.push_back(knob<int32_t>("block_rows", &c.o.block_rows, {0, -1, 1, 2, kI32Max, kI32Min}));
  c.knobs.push_back({"options", [&c](Rng&) { c.options_null = true; return std::string("null"); }});
  c.names = {"x", "codes", "scale", "options", "granularity", "block_rows", "cu_seqlens", "signs"};
  c.call = [&c]() {
    hfa_quantize_fp8_options r = c.o;
    r.cu_seqlens = c.ptr("cu_seqlens");
    r.signs = c.ptr("signs");
    return hfa_quantize_fp8(c.ptr("x"), c.ptr("codes"), c.ptr("scale"), c.options_null ? nullptr : &r);
  };
  c.seal();
  return owned;
}

struct SignsCase : Case {
  uint64_t seed = 0;
};

std::unique_ptr<Case> hadamard_signs_case(Rng& rng) {
  auto owned = std::make_unique<SignsCase>();
  SignsCase& c = *owned;
  const int64_t d = pick<int64_t>(rng, {0, 1, 64, 100, 128});
  c.seed = rng();
  c.add("signs", HFA_F32, {d}, true, rng);
  c.label = "d " + std::to_string(d);
  c.knobs.push_back({"seed", [&c](Rng& rng) { c.seed = pick<uint64_t>(rng, {0, ~uint64_t{0}, rng()}); return std::to_string(c.seed); }});
  c.names = {"signs"};
  c.call = [&c]() { return hfa_hadamard_signs(c.seed, c.ptr("signs"), reinterpret_cast<void*>(uintptr_t{0x1234})); };
  c.seal();
  return owned;
}

// --- hfa_merge_partials ------------------------------------------------------------------------

struct MergeCase : Case {
  int32_t num_partials = 0;
  bool outs_null = false, lses_null = false;
};

std::unique_ptr<Case> merge_case(Rng& rng) {
  auto owned = std::make_unique<MergeCase>();
  MergeCase& c = *owned;
  const int n = static_cast<int>(uniform(rng, 1, 4));
  c.num_partials = n;
  const bool varlen = chance(rng, 0.4);
  const int64_t batch = uniform(rng, 1, 2), seqlen = uniform(rng, 0, 4), heads = uniform(rng, 1, 3);
  const int64_t total = uniform(rng, 0, 6), hdim = chance(rng, 0.05) ? 0 : pick<int64_t>(rng, {1, 4, 7, 64});
  const std::vector<int64_t> out_shape = varlen ? std::vector<int64_t>{total, heads, hdim}
                                                : std::vector<int64_t>{batch, seqlen, heads, hdim};
  const std::vector<int64_t> lse_shape = varlen ? std::vector<int64_t>{heads, total}
                                                : std::vector<int64_t>{batch, heads, seqlen};
  // One more partial than num_partials, so that a larger count may be valid.
  for (int i = 0; i <= n; ++i) c.add("outs[" + std::to_string(i) + "]", pick(rng, {HFA_F32, HFA_BF16, HFA_F16}), out_shape, false, rng);
  for (int i = 0; i <= n; ++i) {
    Slot& s = c.add("lses[" + std::to_string(i) + "]", HFA_F32, lse_shape, false, rng);
    c.set_f32(s, [&] { return chance(rng, 0.15) ? -kInf : 3.0f * normal(rng); });
  }
  const bool in_place = chance(rng, 0.25);
  Slot& out = c.add("out", in_place ? c.find("outs[0]")->t.dtype : pick(rng, {HFA_F32, HFA_BF16, HFA_F16}),
                    out_shape, true, rng);
  Slot& lse = c.add("lse", HFA_F32, lse_shape, true, rng);
  lse.present = chance(rng, 0.7);
  if (in_place) {  // out (and lse) the very views of outs[0] (and lses[0])
    for (auto [view, of] : {std::pair{&out, 0}, std::pair{&lse, n + 1}}) {  // slots outs[0], lses[0]
      if (view == &lse && chance(rng, 0.5)) continue;
      view->t = c.slots[of].t;
      view->owner = of;
      view->mem.clear();
    }
  }
  c.label = std::string(varlen ? "varlen" : "fixed") + " n " + std::to_string(n) + " hdim " + std::to_string(hdim) +
            (in_place ? " in place" : "");
  // out may be the very view of a partial output, lse of a partial LSE: the same elements at
  // the same addresses, told element by element.
  c.in_place = [](const Slot& written, const Slot& read) {
    const bool pair = (written.name == "out" && read.name.rfind("outs[", 0) == 0) ||
                      (written.name == "lse" && read.name.rfind("lses[", 0) == 0);
    if (!pair || written.t.dtype != read.t.dtype || written.t.rank != read.t.rank) return false;
    for (int d = 0; d < written.t.rank; ++d)
      if (written.t.shape[d] != read.t.shape[d]) return false;
    if (extent_of(written.t).empty) return true;
    std::vector<const unsigned char*> x, y;
    const int64_t size = element_bytes(written.t.dtype);
    for_each_offset(written.t, [&](int64_t o) { x.push_back(static_cast<const unsigned char*>(written.t.data) + o * size); });
    for_each_offset(read.t, [&](int64_t o) { y.push_back(static_cast<const unsigned char*>(read.t.data) + o * size); });
    return x == y;
  };
  c.knobs.push_back(knob<int32_t>("num_partials", &c.num_partials, {0, -1, 17, kI32Min, kI32Max, n - 1, n + 1, 16}));
  c.knobs.push_back({"outs", [&c](Rng&) { c.outs_null = true; return std::string("null"); }});
  c.knobs.push_back({"lses", [&c](Rng&) { c.lses_null = true; return std::string("null"); }});
  c.names = {"outs", "lses", "num_partials", "out", "lse"};
  for (int i = 0; i < HFA_MAX_MERGE_PARTIALS; ++i) {
    c.names.insert("outs[" + std::to_string(i) + "]");
    c.names.insert("lses[" + std::to_string(i) + "]");
  }
  // Partials from num_partials on are not read.
  c.ignored = [&c](const Slot& s) {
    const size_t open = s.name.find('[');
    return open != std::string::npos && c.num_partials >= 1 && c.num_partials <= HFA_MAX_MERGE_PARTIALS &&
           std::stoi(s.name.substr(open + 1)) >= c.num_partials;
  };
  c.call = [&c, n]() {
    const hfa_tensor* outs[HFA_MAX_MERGE_PARTIALS] = {};
    const hfa_tensor* lses[HFA_MAX_MERGE_PARTIALS] = {};
    for (int i = 0; i <= n; ++i) {
      outs[i] = c.ptr("outs[" + std::to_string(i) + "]");
      lses[i] = c.ptr("lses[" + std::to_string(i) + "]");
    }
    return hfa_merge_partials(c.outs_null ? nullptr : outs, c.lses_null ? nullptr : lses, c.num_partials,
                              c.ptr("out"), c.ptr("lse"), reinterpret_cast<void*>(uintptr_t{0x1234}));
  };
  c.seal();
  return owned;
}

// --- The checks --------------------------------------------------------------------------------

// The argument a message names: the identifier before its first ": ", or "" if it has none.
std::string named_argument(const std::string& message) {
  const size_t colon = message.find(": ");
  if (colon == std::string::npos || colon == 0) return "";
  for (size_t i = 0; i < colon; ++i) {
    const char ch = message[i];
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '[' || ch == ']')) return "";
  }
  return message.substr(0, colon);
}

// How many elements of s's view cover each byte of its owner's memory; empty for a view with no
// element (or one past its memory, which no call accepts).
std::vector<uint8_t> coverage(const Case& c, const Slot& s) {
  if (!in_bounds(c, s)) return {};
  const Slot& owner = c.slots[s.owner];
  std::vector<uint8_t> counts(owner.mem.size(), 0);
  const int64_t size = element_bytes(s.t.dtype);
  const auto start = static_cast<const unsigned char*>(s.t.data) - owner.mem.data();
  for_each_offset(s.t, [&](int64_t offset) {
    for (int64_t b = 0; b < size; ++b) {
      uint8_t& n = counts[start + offset * size + b];
      n = static_cast<uint8_t>(std::min(n + 1, 255));
    }
  });
  return counts;
}

bool share_a_byte(const Case& c, const Slot& a, const Slot& b) {
  if (a.owner != b.owner) return false;  // separate vectors
  const std::vector<uint8_t> x = coverage(c, a), y = coverage(c, b);
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    if (x[i] && y[i]) return true;
  return false;
}

bool overlaps_itself(const Case& c, const Slot& s) {
  for (uint8_t n : coverage(c, s))
    if (n > 1) return true;
  return false;
}

// The first break of hfa.h's memory rule among the call's tensors, "" if none.
std::string memory_rule_break(const Case& c) {
  std::vector<const Slot*> args;
  for (const Slot& s : c.slots)
    if (s.passed && s.present && !(c.ignored && c.ignored(s))) args.push_back(&s);
  for (size_t j = 0; j < args.size(); ++j) {
    const Slot& later = *args[j];
    if (later.writable && overlaps_itself(c, later)) return later.name + ", whose elements overlap";
    for (size_t i = 0; i < j; ++i) {
      const Slot& earlier = *args[i];
      if (!earlier.writable && !later.writable) continue;
      const Slot& written = later.writable ? later : earlier;
      const Slot& other = later.writable ? earlier : later;
      if (!other.writable && c.in_place && c.in_place(written, other)) continue;
      if (share_a_byte(c, written, other)) return written.name + " over " + other.name + "'s memory";
    }
  }
  return "";
}

// A rejection for shared memory ("a: overlaps b (...)", "a: elements (...) and (...) share
// memory") names memory that is shared: "" if so (or if the message is of another kind).
std::string check_memory_rejection(const Case& c, const std::string& message) {
  const std::string name = named_argument(message);
  if (name.empty()) return "";
  const std::string rest = message.substr(name.size() + 2);
  const Slot* a = c.find(name);
  if (rest.rfind("overlaps ", 0) == 0) {
    const std::string other = rest.substr(9, rest.find(" (") - 9);
    const Slot* b = c.find(other);
    if (a == nullptr || b == nullptr) return "\"" + message + "\" names no two arguments";
    if (!share_a_byte(c, *a, *b)) return "\"" + message + "\", but they share no byte";
  } else if (rest.rfind("elements (", 0) == 0 && rest.find(" share memory") != std::string::npos) {
    if (a == nullptr || !overlaps_itself(c, *a)) return "\"" + message + "\", but its elements are apart";
  }
  return "";
}

// Runs the case's call and checks (b) to (e); returns the failures, "" if none.
std::string run_and_check(Case& c, hfa_status* status_out = nullptr) {
  std::vector<std::vector<unsigned char>> before;
  for (const Slot& s : c.slots) before.push_back(s.mem);
  if (c.prepare) c.prepare();
  constexpr size_t kPoisonBytes = 0x7b7b7b7b7b7b7b7bull;
  c.bytes = kPoisonBytes;
  const hfa_status status = c.call();
  if (status_out) *status_out = status;
  const std::string message = hfa_last_error();
  std::string failures;
  auto fail = [&](const std::string& what) { failures += "  " + what + "\n"; };

  const bool ok = status == HFA_SUCCESS;
  if (ok) {
    if (!message.empty()) fail("success, but hfa_last_error() is \"" + message + "\"");
  } else if (status != HFA_ERROR_INVALID_ARGUMENT && status != HFA_ERROR_NOT_SUPPORTED) {
    fail(std::string("status ") + hfa_status_name(status) + ": \"" + message + "\"");
  } else {
    const std::string name = named_argument(message);
    if (name.empty() || !c.names.count(name))
      fail(std::string(hfa_status_name(status)) + " names no argument of this entry point: \"" + message + "\"");
  }
  if (c.has_bytes && !c.bytes_null) {
    if (!ok && c.bytes != kPoisonBytes) fail("bytes written after a rejection: " + std::to_string(c.bytes));
    if (ok && c.bytes != 0) fail("bytes = " + std::to_string(c.bytes) + " on the CPU, expected 0");
  }

  // A view no call may take (a rank out of range, a negative extent or stride, int64 overflow,
  // null data with elements) was accepted.
  if (ok)
    for (const Slot& s : c.slots)
      if (s.passed && s.present && must_reject(s.t) && !(c.ignored && c.ignored(s)))
        fail("accepted " + s.name + ", a view that must be rejected");

  // (e) The memory rule, byte by byte.
  if (ok) {
    if (const std::string broken = memory_rule_break(c); !broken.empty()) fail("accepted " + broken);
  } else if (const std::string wrong = check_memory_rejection(c, message); !wrong.empty()) {
    fail("rejected " + wrong);
  }

  // Writes: nothing on failure; on success only inside the views of writable tensors.
  for (size_t i = 0; i < c.slots.size(); ++i) {
    const Slot& s = c.slots[i];
    if (s.mem == before[i]) continue;
    if (!ok) {
      fail("rejected (\"" + message + "\"), but " + s.name + " was written");
      continue;
    }
    std::vector<bool> allowed(s.mem.size(), false);
    for (const Slot& view : c.slots) {
      if (view.owner != static_cast<int>(i) || !view.writable || !view.present) continue;
      if (extent_of(view.t).empty) continue;
      if (!in_bounds(c, view)) {
        fail("accepted " + view.name + ", a view that must be rejected or reaches past its memory");
        continue;
      }
      const int64_t size = element_bytes(view.t.dtype);
      const auto start = static_cast<const unsigned char*>(view.t.data) - s.mem.data();
      for_each_offset(view.t, [&](int64_t offset) {
        for (int64_t b = 0; b < size; ++b) allowed[start + offset * size + b] = true;
      });
    }
    for (size_t b = 0; b < s.mem.size(); ++b) {
      if (s.mem[b] != before[i][b] && !allowed[b]) {
        fail(s.name + " written outside the views the call may write (byte " + std::to_string(b) + ")");
        break;
      }
    }
  }

  // NaN in an output.
  if (ok && c.nan_check) {
    for (const Slot& s : c.slots) {
      if (!s.writable || !s.present) continue;
      if (!in_bounds(c, s)) continue;
      const int64_t size = element_bytes(s.t.dtype);
      const auto* base = static_cast<const unsigned char*>(s.t.data);
      int64_t nans = 0;
      for_each_offset(s.t, [&](int64_t offset) { nans += is_nan(s.t.dtype, base + offset * size); });
      if (nans > 0) fail(std::to_string(nans) + " NaN in " + s.name);
    }
  }
  return failures;
}

// Every view of the call, for a failure message.
std::string describe(const Case& c) {
  std::string text;
  for (const Slot& s : c.slots) {
    if (!s.passed || !s.present) continue;
    const hfa_tensor& t = s.t;
    text += "    " + s.name + ": " + std::to_string(t.dtype) + " (";
    for (int d = 0; d < std::clamp(t.rank, 0, HFA_MAX_RANK); ++d) text += (d ? ", " : "") + std::to_string(t.shape[d]);
    text += ") strides (";
    for (int d = 0; d < std::clamp(t.rank, 0, HFA_MAX_RANK); ++d) text += (d ? ", " : "") + std::to_string(t.stride[d]);
    text += std::string(")") + (t.data ? "" : " null") + "\n";
  }
  return text;
}

using Builder = std::function<std::unique_ptr<Case>(Rng&)>;

// Per iteration: the valid case must pass every check and succeed; then a copy of it (built
// again from the same seed) takes its mutations and must pass the checks.
void fuzz(const char* entry, uint64_t seed, int iterations, const Builder& build) {
  int failures = 0, accepted = 0, rejected = 0;
  for (int it = 0; it < iterations && failures < 10; ++it) {
    const uint64_t case_seed = seed * 1000003u + static_cast<uint64_t>(it);
    {
      Rng rng(case_seed);
      std::unique_ptr<Case> valid = build(rng);
      hfa_status status = HFA_SUCCESS;
      const std::string problems = run_and_check(*valid, &status);
      if (!problems.empty() || status != HFA_SUCCESS) {
        ADD_FAILURE() << entry << " iteration " << it << " (" << valid->label << "): the valid call failed: "
                      << hfa_last_error() << "\n" << problems;
        ++failures;
        continue;
      }
    }
    Rng rng(case_seed);
    std::unique_ptr<Case> c = build(rng);
    Rng mutations(case_seed ^ 0x9e3779b97f4a7c15ull);
    mutate(*c, mutations);
    hfa_status status = HFA_SUCCESS;
    const std::string problems = run_and_check(*c, &status);
    (status == HFA_SUCCESS ? accepted : rejected) += 1;
    if (!problems.empty()) {
      std::string list;
      for (const std::string& m : c->mutations) list += (list.empty() ? "" : ", ") + m;
      ADD_FAILURE() << entry << " iteration " << it << " (" << c->label << "), mutations {" << list
                    << "}:\n" << problems << describe(*c);
      ++failures;
    }
  }
  std::printf("%s: %d mutated calls accepted, %d rejected\n", entry, accepted, rejected);
}

constexpr int kIterations = 2000;

TEST(FuzzArgs, Forward) {
  fuzz("hfa_forward", 1, kIterations, [](Rng& rng) { return attention_case(Entry::forward, rng); });
}
TEST(FuzzArgs, ForwardWorkspaceSize) {
  fuzz("hfa_forward_workspace_size", 2, kIterations / 2, [](Rng& rng) { return attention_case(Entry::forward_query, rng); });
}
TEST(FuzzArgs, Backward) {
  fuzz("hfa_backward", 3, kIterations, [](Rng& rng) { return attention_case(Entry::backward, rng); });
}
TEST(FuzzArgs, BackwardWorkspaceSize) {
  fuzz("hfa_backward_workspace_size", 4, kIterations / 2, [](Rng& rng) { return attention_case(Entry::backward_query, rng); });
}
TEST(FuzzArgs, ForwardKVCache) {
  fuzz("hfa_forward_kvcache", 5, kIterations, [](Rng& rng) { return kvcache_case(KVEntry::call, rng); });
}
TEST(FuzzArgs, ForwardKVCacheWorkspaceSize) {
  fuzz("hfa_forward_kvcache_workspace_size", 6, kIterations / 2, [](Rng& rng) { return kvcache_case(KVEntry::query, rng); });
}
TEST(FuzzArgs, QuantizeKV) {
  fuzz("hfa_quantize_kv", 7, kIterations, [](Rng& rng) { return quantize_kv_case(false, rng); });
}
TEST(FuzzArgs, DequantizeKV) {
  fuzz("hfa_dequantize_kv", 8, kIterations, [](Rng& rng) { return quantize_kv_case(true, rng); });
}
TEST(FuzzArgs, QuantizeFp8) {
  fuzz("hfa_quantize_fp8", 9, kIterations, quantize_fp8_case);
}
TEST(FuzzArgs, HadamardSigns) {
  fuzz("hfa_hadamard_signs", 10, kIterations / 2, hadamard_signs_case);
}
TEST(FuzzArgs, MergePartials) {
  fuzz("hfa_merge_partials", 11, kIterations, merge_case);
}
// The prepared calls: the validation the calls above fuzz, through hfa_prepare_* and hfa_run.
TEST(FuzzArgs, ForwardPrepared) {
  fuzz("hfa_prepare_forward", 12, kIterations / 2, [](Rng& rng) { return attention_case(Entry::forward_prepared, rng); });
}
TEST(FuzzArgs, BackwardPrepared) {
  fuzz("hfa_prepare_backward", 13, kIterations / 2, [](Rng& rng) { return attention_case(Entry::backward_prepared, rng); });
}
TEST(FuzzArgs, ForwardKVCachePrepared) {
  fuzz("hfa_prepare_forward_kvcache", 14, kIterations / 2, [](Rng& rng) { return kvcache_case(KVEntry::prepared, rng); });
}

}  // namespace

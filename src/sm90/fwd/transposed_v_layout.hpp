// Where the FP8 forward's transposed copy of v keeps each sequence's keys (transpose_v.cuh
// writes it, the producer reads it, the workspace query sizes it).
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace hfa::sm90::fwd {

inline constexpr int kKeyGroup = 16;       // keys a P register order permutes

HFA_HD inline int64_t round_up_to_group(int64_t keys) {
  return (keys + kKeyGroup - 1) / kKeyGroup * kKeyGroup;
}

// Where sequence b's keys start in a transposed row: its first key's index among all keys,
// rounded up to a group, plus one group for each sequence before it (so that rounding up never
// runs into the next sequence).
HFA_HD inline int64_t vt_key_offset(int64_t first_key, int batch) {
  return round_up_to_group(first_key) + int64_t(kKeyGroup) * batch;
}

// Keys of a transposed row: room for every sequence of a total of `total_keys` keys.
HFA_HD inline int64_t vt_row_keys(int64_t total_keys, int batch) {
  return round_up_to_group(total_keys) + int64_t(kKeyGroup) * (batch + 1);
}

}  // namespace hfa::sm90::fwd

// Which devices exist, and how to name them in messages.
#pragma once

#include <string>

#include "hfa/hfa.hpp"

namespace hfa::detail {

// "cpu" or "cuda:<index>".
std::string device_name(const Tensor& t);

// Same device: the same kind and, for CUDA, the same index. CPU indices are ignored
// (frameworks disagree on them: PyTorch says -1, others 0).
bool same_device(const Tensor& a, const Tensor& b);

// Rejects a tensor on a device this process cannot use (no CUDA in the build, no GPU, index
// out of range). `name` is the argument the message blames.
Status check_device_usable(const char* name, const Tensor& t);

}  // namespace hfa::detail

// The options of hfa/options.def that are values rather than tensors (the FLAG, INT32, REAL,
// SCALE, HANDLE and BYTES rows) as the backends see them: one member of the problem struct per
// row, of the row's name and with its default, declared from the row alone here and copied from
// the caller's struct by the API from the row alone (api/options.cpp: copy_values). So a new
// scalar option reaches the kernels with its row and the code that reads it, no other edit.
#pragma once

#include <cstddef>
#include <cstdint>

// A problem struct's member for a row, by the row's kind: HFA_PROBLEM_VALUE_##kind(name, value).
#define HFA_PROBLEM_VALUE_FLAG(name, value) bool name = value;
#define HFA_PROBLEM_VALUE_INT32(name, value) int32_t name = value;
#define HFA_PROBLEM_VALUE_REAL(name, value) float name = value;
// The value given, or the row's default where the caller gave none (softmax_scale's default is
// resolved by the API).
#define HFA_PROBLEM_VALUE_SCALE(name, value) float name = value;
#define HFA_PROBLEM_VALUE_HANDLE(name, value) void* name = nullptr;
#define HFA_PROBLEM_VALUE_BYTES(name, value) std::size_t name = value;
// Tensors are the API's to check and view: the problem has fields of their own for those.
#define HFA_PROBLEM_VALUE_TENSOR(name, value)
#define HFA_PROBLEM_VALUE_VECTOR(name, value)

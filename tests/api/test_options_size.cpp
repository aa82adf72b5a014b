// The options structs' struct_size (hfa.h): a caller built against another hfa.h passes a struct
// of another size, which every entry point that takes one refuses by name, before reading any
// field past struct_size. The callers' structs here end where a page no access may touch begins,
// so that a read past one faults instead of passing unseen.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "api/fixture.hpp"
#include "hfa/hfa.h"

namespace hfa::test {
namespace {

// `bytes` of zeroed memory that the next page, inaccessible, follows immediately.
class Fenced {
 public:
  explicit Fenced(std::size_t bytes) : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
    base_ = mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(static_cast<char*>(base_) + page_, page_, PROT_NONE), 0);
    data_ = static_cast<char*>(base_) + page_ - bytes;
  }
  ~Fenced() { munmap(base_, 2 * page_); }
  Fenced(const Fenced&) = delete;
  Fenced& operator=(const Fenced&) = delete;

  template <typename T>
  T* as() const { return reinterpret_cast<T*>(data_); }

 private:
  std::size_t page_;
  void* base_ = nullptr;
  char* data_ = nullptr;
};

// A caller's struct of `bytes` bytes (an older hfa.h's: the library's rows cut short), fenced,
// holding the library's defaults as far as it reaches.
template <typename C>
C* older_struct(const Fenced& memory, std::size_t bytes, void (*init)(C*, size_t)) {
  C* options = memory.as<C>();
  init(options, bytes);
  return options;
}

// Every entry point that takes an options struct, called with `options` (the tensors are the
// fixture's: the struct is checked before them).
std::vector<std::pair<const char*, std::function<hfa_status()>>> calls_with(
    Attention& a, const hfa_options* options, const hfa_kvcache_options* kv) {
  const Tensor *q = &a.q.tensor, *k = &a.k.tensor, *v = &a.v.tensor, *out = &a.out.tensor,
               *lse = &a.lse.tensor;
  static size_t bytes;
  static hfa_call call;
  return {
      {"hfa_forward", [=] { return hfa_forward(q, k, v, out, lse, options); }},
      {"hfa_forward_workspace_size",
       [=] { return hfa_forward_workspace_size(q, k, v, options, &bytes); }},
      {"hfa_backward",
       [=, &a] {
         return hfa_backward(&a.dout.tensor, q, k, v, out, lse, &a.dq.tensor, &a.dk.tensor,
                             &a.dv.tensor, options);
       }},
      {"hfa_backward_workspace_size",
       [=] { return hfa_backward_workspace_size(q, k, v, options, &bytes); }},
      {"hfa_prepare_forward",
       [=] { return hfa_prepare_forward(q, k, v, out, lse, options, &call, &bytes); }},
      {"hfa_prepare_backward",
       [=, &a] {
         return hfa_prepare_backward(&a.dout.tensor, q, k, v, out, lse, &a.dq.tensor,
                                     &a.dk.tensor, &a.dv.tensor, options, &call, &bytes);
       }},
      {"hfa_forward_kvcache", [=] { return hfa_forward_kvcache(q, k, v, out, lse, kv); }},
      {"hfa_forward_kvcache_workspace_size",
       [=] { return hfa_forward_kvcache_workspace_size(q, k, v, kv, &bytes); }},
      {"hfa_prepare_forward_kvcache",
       [=] { return hfa_prepare_forward_kvcache(q, k, v, out, lse, kv, &call, &bytes); }},
  };
}

void expect_refused(std::size_t attention_bytes, std::size_t kvcache_bytes,
                    const std::string& attention_message, const std::string& kvcache_message) {
  Attention a;
  const Fenced attention_memory(attention_bytes), kvcache_memory(kvcache_bytes);
  const hfa_options* options =
      older_struct(attention_memory, attention_bytes, &hfa_init_options);
  const hfa_kvcache_options* kv =
      older_struct(kvcache_memory, kvcache_bytes, &hfa_init_kvcache_options);
  for (const auto& [name, call] : calls_with(a, options, kv)) {
    EXPECT_EQ(call(), HFA_ERROR_INVALID_ARGUMENT) << name;
    const bool kvcache = std::string(name).find("kvcache") != std::string::npos;
    EXPECT_EQ(hfa_last_error(), kvcache ? kvcache_message : attention_message) << name;
  }
  EXPECT_TRUE(a.forward_outputs_untouched());
  EXPECT_TRUE(a.backward_outputs_untouched());
}

std::string smaller(std::size_t given, std::size_t ours) {
  return "options: struct of " + std::to_string(given) + " bytes, this library needs " +
         std::to_string(ours) + ": rebuild against its hfa.h";
}

// An older hfa.h's struct: one 8-byte row (two int32 rows, or a pointer) fewer.
TEST(OptionsSize, ASmallerStructIsRefusedByEveryCallUnread) {
  const std::size_t attention = sizeof(hfa_options) - 8, kvcache = sizeof(hfa_kvcache_options) - 8;
  expect_refused(attention, kvcache, smaller(attention, sizeof(hfa_options)),
                 smaller(kvcache, sizeof(hfa_kvcache_options)));
}

TEST(OptionsSize, ALargerStructIsRefused) {
  const std::size_t attention = sizeof(hfa_options) + 8, kvcache = sizeof(hfa_kvcache_options) + 8;
  auto larger = [](std::size_t given, std::size_t ours) {
    return "options: struct of " + std::to_string(given) + " bytes, this library's has " +
           std::to_string(ours) +
           ": the caller was built against a newer hfa.h (rebuild against this library's, or "
           "use the library of that hfa.h)";
  };
  expect_refused(attention, kvcache, larger(attention, sizeof(hfa_options)),
                 larger(kvcache, sizeof(hfa_kvcache_options)));
}

TEST(OptionsSize, AStructNotStartedFromTheDefaultsIsRefused) {
  Attention a;
  hfa_options options{};
  hfa_kvcache_options kv{};
  for (const auto& [name, call] : calls_with(a, &options, &kv)) {
    EXPECT_EQ(call(), HFA_ERROR_INVALID_ARGUMENT) << name;
    EXPECT_EQ(std::string(hfa_last_error()),
              "options: struct_size is 0: start the struct from the default options "
              "(hfa_default_options(), a constructed hfa::Options), which set it")
        << name;
  }
}

// The initializers write within the caller's size: the defaults as far as they reach (nothing
// past a fenced end), zeros past the library's struct, and the caller's size.
TEST(OptionsSize, InitializersWriteWithinTheCallersSize) {
  const hfa_options defaults = hfa_default_options();
  EXPECT_EQ(defaults.struct_size, sizeof(hfa_options));
  EXPECT_EQ(hfa_default_kvcache_options().struct_size, sizeof(hfa_kvcache_options));

  const std::size_t shorter = offsetof(hfa_options, window_right);
  const Fenced short_memory(shorter);
  hfa_init_options(short_memory.as<hfa_options>(), shorter);
  const auto* cut = short_memory.as<hfa_options>();
  EXPECT_EQ(cut->struct_size, shorter);
  EXPECT_EQ(cut->window_left, -1);

  const std::size_t longer = sizeof(hfa_options) + 16;
  const Fenced long_memory(longer);
  std::memset(long_memory.as<char>(), 0x5a, longer);
  hfa_init_options(long_memory.as<hfa_options>(), longer);
  EXPECT_EQ(long_memory.as<hfa_options>()->struct_size, longer);
  EXPECT_EQ(std::memcmp(long_memory.as<char>() + sizeof(size_t),
                        reinterpret_cast<const char*>(&defaults) + sizeof(size_t),
                        sizeof(hfa_options) - sizeof(size_t)),
            0);
  for (std::size_t i = sizeof(hfa_options); i < longer; ++i)
    EXPECT_EQ(long_memory.as<char>()[i], 0) << i;

  // Too small to hold its size: nothing written (and nothing read or written past it).
  const Fenced tiny(4);
  std::memset(tiny.as<char>(), 0x5a, 4);
  hfa_init_kvcache_options(tiny.as<hfa_kvcache_options>(), 4);
  EXPECT_EQ(tiny.as<unsigned char>()[0], 0x5a);
  hfa_init_options(nullptr, sizeof(hfa_options));  // no struct: nothing to do
}

// The C++ structs carry their size too: a caller built against another hfa.hpp is refused by
// the C++ API alike.
TEST(OptionsSize, TheCppStructsAreCheckedToo) {
  Attention a;
  EXPECT_EQ(a.options.struct_size, sizeof(Options));
  a.options.struct_size = sizeof(Options) - 8;
  const Status status = a.forward();
  EXPECT_EQ(status.code(), Code::invalid_argument);
  EXPECT_EQ(status.message(), smaller(sizeof(Options) - 8, sizeof(Options)));
  EXPECT_TRUE(a.forward_outputs_untouched());

  KVCacheOptions kv;
  EXPECT_EQ(kv.struct_size, sizeof(KVCacheOptions));
  kv.struct_size = sizeof(KVCacheOptions) + 8;
  std::size_t bytes = 0;
  const Status kv_status =
      forward_kvcache_workspace_size(a.q.tensor, a.k.tensor, a.v.tensor, kv, &bytes);
  EXPECT_EQ(kv_status.code(), Code::invalid_argument);
  EXPECT_EQ(kv_status.message().rfind("options: struct of ", 0), 0u) << kv_status.message();
}

}  // namespace
}  // namespace hfa::test

// hfa's environment variables: every accepted value read as documented, every other one an
// error of the API's calls that names the variable and what it accepts.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "common/environment.hpp"
#include "cpu/kernels.hpp"
#include "cpu/thread_pool.hpp"
#include "fixture.hpp"
#include "hfa/hfa.h"

namespace hfa::test {
namespace {

using detail::CpuIsa;
using detail::Environment;

std::map<std::string, std::string> fake_variables;

const char* fake_lookup(const char* name) {
  const auto found = fake_variables.find(name);
  return found == fake_variables.end() ? nullptr : found->second.c_str();
}

Environment read(std::map<std::string, std::string> variables) {
  fake_variables = std::move(variables);
  return detail::read_environment(fake_lookup);
}

TEST(Environment, UnsetOrEmptyMeansTheDefaults) {
  for (const Environment& env :
       {read({}), read({{"HFA_CPU_THREADS", ""}, {"HFA_CPU_ISA", ""}, {"HFA_SM90_PACK_GQA", ""}})}) {
    EXPECT_TRUE(env.status.is_ok()) << env.status.message();
    EXPECT_EQ(env.cpu_threads, 0);
    EXPECT_EQ(env.cpu_isa, CpuIsa::best);
    EXPECT_TRUE(env.sm90_pack_gqa);
    EXPECT_TRUE(env.sm90_decode_stream);
  }
}

TEST(Environment, AcceptedValues) {
  const Environment env = read({{"HFA_CPU_THREADS", "3"}, {"HFA_CPU_ISA", "generic"},
                                {"HFA_SM90_PACK_GQA", "0"}, {"HFA_SM90_DECODE_STREAM", "0"}});
  EXPECT_TRUE(env.status.is_ok()) << env.status.message();
  EXPECT_EQ(env.cpu_threads, 3);
  EXPECT_EQ(env.cpu_isa, CpuIsa::generic);
  EXPECT_FALSE(env.sm90_pack_gqa);
  EXPECT_FALSE(env.sm90_decode_stream);
  EXPECT_EQ(read({{"HFA_CPU_ISA", "auto"}}).cpu_isa, CpuIsa::best);
  EXPECT_TRUE(read({{"HFA_SM90_PACK_GQA", "1"}}).sm90_pack_gqa);
  EXPECT_EQ(read({{"HFA_CPU_THREADS", "4096"}}).cpu_threads, 4096);
}

TEST(Environment, BadValuesNameTheVariableAndTheAcceptedValues) {
  const std::map<std::string, std::string> accepted = {
      {"HFA_CPU_THREADS", "accepted: an integer from 1 to 4096"},
      {"HFA_CPU_ISA", "accepted: auto (AVX-512 when the CPU has it), generic"},
      {"HFA_SM90_PACK_GQA", "accepted: 0 (off), 1 (on)"},
      {"HFA_SM90_DECODE_STREAM", "accepted: 0 (off), 1 (on)"}};
  const std::multimap<std::string, std::string> bad = {
      {"HFA_CPU_THREADS", "abc"}, {"HFA_CPU_THREADS", "0"},    {"HFA_CPU_THREADS", "-2"},
      {"HFA_CPU_THREADS", "4x"},  {"HFA_CPU_THREADS", "4097"}, {"HFA_CPU_THREADS", " 4"},
      {"HFA_CPU_ISA", "avx2"},    {"HFA_CPU_ISA", "Generic"},  {"HFA_SM90_PACK_GQA", "off"},
      {"HFA_SM90_DECODE_STREAM", "true"}};
  for (const auto& [name, value] : bad) {
    const Environment env = read({{name, value}});
    EXPECT_EQ(env.status.code(), Code::invalid_argument) << name << "=" << value;
    const std::string& message = env.status.message();
    EXPECT_EQ(message.rfind(name + ": environment variable set to \"" + value + "\"", 0), 0u)
        << message;
    EXPECT_NE(message.find(accepted.at(name)), std::string::npos) << message;
  }
}

TEST(Environment, TheFirstBadVariableIsReportedAndTheOthersStillRead) {
  const Environment env = read({{"HFA_CPU_THREADS", "2"}, {"HFA_CPU_ISA", "avx2"},
                                {"HFA_SM90_PACK_GQA", "no"}});
  EXPECT_EQ(env.status.message().rfind("HFA_CPU_ISA:", 0), 0u) << env.status.message();
  EXPECT_EQ(env.cpu_threads, 2);
  EXPECT_EQ(env.cpu_isa, CpuIsa::best);
}

// The library reads its environment once, on first use; a death test runs its statement in a
// fresh process (the "threadsafe" style re-executes this binary), so the variable set there is
// in place before that first read, and this process is left alone.
void run_first_calls_with(const char* name, const char* value) {
  setenv(name, value, 1);
  for (int call = 0; call < 2; ++call) {  // the first call fails, and so does every later one
    Attention a;
    const hfa_status status = hfa_forward(&a.q.tensor, &a.k.tensor, &a.v.tensor, &a.out.tensor,
                                          nullptr, nullptr);
    std::fprintf(stderr, "call %d: %s: %s\n", call, hfa_status_name(status), hfa_last_error());
    if (status != HFA_ERROR_INVALID_ARGUMENT || !a.forward_outputs_untouched()) std::exit(1);
  }
  std::exit(0);
}

TEST(Environment, BadCpuThreadsFailsTheCalls) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_first_calls_with("HFA_CPU_THREADS", "abc"), testing::ExitedWithCode(0),
              "call 1: HFA_ERROR_INVALID_ARGUMENT: HFA_CPU_THREADS: environment variable set to "
              "\"abc\"; accepted: an integer from 1 to 4096");
}

TEST(Environment, BadCpuIsaFailsTheCalls) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_first_calls_with("HFA_CPU_ISA", "avx2"), testing::ExitedWithCode(0),
              "call 1: HFA_ERROR_INVALID_ARGUMENT: HFA_CPU_ISA: environment variable set to "
              "\"avx2\"; accepted: auto");
}

TEST(Environment, GoodValuesTakeEffect) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("HFA_CPU_THREADS", "3", 1);
        setenv("HFA_CPU_ISA", "generic", 1);
        Attention a;
        const bool ran = a.forward().is_ok();
        std::fprintf(stderr, "ran %d threads %d isa %s\n", ran,
                     cpu::ThreadPool::shared().thread_count(), cpu::active_kernels().isa);
        std::exit(0);
      },
      testing::ExitedWithCode(0), "ran 1 threads 3 isa generic");
}

}  // namespace
}  // namespace hfa::test

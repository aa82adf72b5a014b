// One pool of worker threads for the CPU backend, created on first use and kept: a call spreads
// its independent work items over the workers and the calling thread, and returns when all are
// done. Items are handed out one at a time from a shared counter, so uneven items (causal
// tiles, varlen sequences) balance themselves.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace hfa::cpu {

class ThreadPool {
 public:
  // The process-wide pool: one thread per hardware thread, or HFA_CPU_THREADS when set.
  // Created on first use (and again in a forked child).
  static ThreadPool& shared();

  explicit ThreadPool(int thread_count);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that run items, the caller's included.
  int thread_count() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs body(item, thread) for every item in [0, count), thread in [0, thread_count()).
  // Calls from several threads take turns; body must not throw nor call parallel_for itself.
  template <class Body>
  void parallel_for(int64_t count, Body&& body) {
    run(count, [](void* context, int64_t item, int thread) {
      (*static_cast<std::remove_reference_t<Body>*>(context))(item, thread);
    }, &body);
  }

 private:
  using ItemFunction = void (*)(void* context, int64_t item, int thread);

  void run(int64_t count, ItemFunction function, void* context);
  void run_items(int thread);
  void worker_main(int thread);

  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex state_mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::vector<std::thread> workers_;
  uint64_t generation_ = 0;  // bumped for every parallel_for; workers wait for a new one
  bool stopping_ = false;
  int workers_busy_ = 0;

  ItemFunction function_ = nullptr;
  void* context_ = nullptr;
  int64_t item_count_ = 0;
  std::atomic<int64_t> next_item_{0};
};

// Per-thread fp32 scratch of at least `floats` floats, 64-byte aligned, grown on demand and kept
// for the thread's lifetime (pool threads live as long as the process).
float* thread_scratch(std::size_t floats);

// Sizes carved out of one scratch block keep every piece 64-byte aligned.
constexpr std::size_t scratch_floats(std::size_t floats) { return (floats + 15) / 16 * 16; }

}  // namespace hfa::cpu

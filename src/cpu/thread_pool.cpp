#include "cpu/thread_pool.hpp"

#include <algorithm>
#include <memory>
#include <new>

#include <pthread.h>

#include "common/environment.hpp"

namespace hfa::cpu {
namespace {

int default_thread_count() {
  const int forced = detail::environment().cpu_threads;
  return forced > 0 ? forced : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

constexpr std::align_val_t kScratchAlignment{64};

struct AlignedDelete {
  void operator()(float* block) const { ::operator delete[](block, kScratchAlignment); }
};

// The process's pool, made on first use. A child made by fork() has none of its parent's threads
// (Python's multiprocessing does this), so it gets a pool of its own: the fork handlers below
// forget the parent's there (its copy is left alone, as its locks may have been taken at the
// fork). A call then reads one pointer: no getpid() per call (a system call, about a tenth of a
// microsecond) to tell a child from its parent. Pools are never destroyed: workers blocked in a
// wait end with the process, and no call can outlive the pool it uses.
std::mutex pool_mutex;  // held while a pool is made, and across a fork
std::atomic<ThreadPool*> process_pool{nullptr};

// pthread_atfork's handlers: the mutex is held across fork(), so that the child never starts
// with it taken by a thread it does not have.
void lock_pool_before_fork() { pool_mutex.lock(); }
void unlock_pool_in_parent() { pool_mutex.unlock(); }
void forget_pool_in_child() {
  process_pool.store(nullptr, std::memory_order_relaxed);
  pool_mutex.unlock();
}

bool register_fork_handlers() {
  // Only out of memory fails it; the throw reaches the API's guard, and the next call tries again.
  if (pthread_atfork(lock_pool_before_fork, unlock_pool_in_parent, forget_pool_in_child) != 0)
    throw std::bad_alloc();
  return true;
}

}  // namespace

ThreadPool& ThreadPool::shared() {
  if (ThreadPool* pool = process_pool.load(std::memory_order_acquire)) return *pool;
  std::lock_guard<std::mutex> lock(pool_mutex);
  static const bool fork_handlers_registered = register_fork_handlers();
  (void)fork_handlers_registered;
  ThreadPool* pool = process_pool.load(std::memory_order_relaxed);
  if (pool == nullptr) {
    pool = new ThreadPool(default_thread_count());
    process_pool.store(pool, std::memory_order_release);
  }
  return *pool;
}

ThreadPool::ThreadPool(int thread_count) {
  for (int thread = 1; thread < thread_count; ++thread) {
    workers_.emplace_back([this, thread] { worker_main(thread); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::run(int64_t count, ItemFunction function, void* context) {
  if (count <= 0) return;
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  if (count == 1 || workers_.empty()) {
    for (int64_t item = 0; item < count; ++item) function(context, item, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    function_ = function;
    context_ = context;
    item_count_ = count;
    next_item_.store(0, std::memory_order_relaxed);
    workers_busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  run_items(0);
  std::unique_lock<std::mutex> lock(state_mutex_);
  work_done_.wait(lock, [this] { return workers_busy_ == 0; });
}

void ThreadPool::run_items(int thread) {
  for (;;) {
    const int64_t item = next_item_.fetch_add(1, std::memory_order_relaxed);
    if (item >= item_count_) return;
    function_(context_, item, thread);
  }
}

void ThreadPool::worker_main(int thread) {
  uint64_t seen_generation = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(state_mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
    }
    run_items(thread);
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      if (--workers_busy_ == 0) work_done_.notify_one();
    }
  }
}

float* thread_scratch(std::size_t floats) {
  thread_local std::unique_ptr<float[], AlignedDelete> block;
  thread_local std::size_t capacity = 0;
  if (floats > capacity) {
    block.reset(static_cast<float*>(::operator new[](floats * sizeof(float), kScratchAlignment)));
    capacity = floats;
  }
  return block.get();
}

}  // namespace hfa::cpu

// One thread pool for the process. parallel_for splits [0, n) into contiguous chunks, one per
// thread; the calling thread takes part, so a pool of N threads uses N-1 workers.
// Dispatch is a generation counter that idle workers spin on for a short while before sleeping:
// a decode step issues hundreds of small parallel regions, and a condition-variable wake-up per
// region (tens of microseconds) would cost more than the work.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lmf {

class ThreadPool {
 public:
  // More threads than this is a mistake (each one spins, and a pool of thousands takes minutes to
  // start and stop); the CLI refuses it, the constructor throws. ggml has the same limit.
  static constexpr int kMaxThreads = 512;

  explicit ThreadPool(int n_threads = 0);  // 0 = hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // fn(thread_index, begin, end) over a static split of [0, n) into size() chunks.
  void parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn);
  // fn(thread_index) on every thread (the caller is thread 0).
  void run_all(const std::function<void(int)>& fn);

  static int default_threads();

 private:
  void worker(int idx);
  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace lmf

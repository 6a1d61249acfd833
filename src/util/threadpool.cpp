#include "util/threadpool.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "util/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LMF_PAUSE() _mm_pause()
#else
#define LMF_PAUSE() std::this_thread::yield()
#endif

namespace lmf {

namespace {
// How long an idle worker spins before sleeping: long enough to bridge the gap between the
// parallel regions of one decode step, short enough not to burn a core between requests.
constexpr auto kSpin = std::chrono::microseconds(500);
// Under oversubscription (more runnable threads than cores) a pure spin starves the thread it
// waits for; yielding every few pauses hands the core over instead.
constexpr int kPausesPerYield = 64;
}  // namespace

int ThreadPool::default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int n) : n_threads_(n <= 0 ? default_threads() : n) {
  if (n_threads_ > kMaxThreads) LMF_FAIL("at most ", kMaxThreads, " threads, asked for ", n_threads_);
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int idx) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a while on the generation counter, then sleep on the condition variable.
    auto t0 = std::chrono::steady_clock::now();
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed)) {
      LMF_PAUSE();
      if (++spins % kPausesPerYield == 0) std::this_thread::yield();
      if (spins % 1024 == 0 && std::chrono::steady_clock::now() - t0 > kSpin) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(lk, [&] { return stop_.load() || generation_.load() != seen; });
        sleepers_.fetch_sub(1);
        break;
      }
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    (*job_)(idx);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_all(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  std::exception_ptr err;
  std::mutex err_mu;
  std::function<void(int)> guarded = [&](int i) {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lk(err_mu);
      if (!err) err = std::current_exception();
    }
  };
  job_ = &guarded;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // The mutex orders this publish against a worker that is about to sleep.
    std::lock_guard<std::mutex> lk(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  guarded(0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0;) {
    LMF_PAUSE();
    if (++spins % kPausesPerYield == 0) std::this_thread::yield();
  }
  job_ = nullptr;
  if (err) std::rethrow_exception(err);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int nt = int(std::min<int64_t>(n_threads_, n));
  if (nt == 1) {
    fn(0, 0, n);
    return;
  }
  run_all([&](int t) {
    if (t >= nt) return;
    const int64_t b = n * t / nt, e = n * (t + 1) / nt;
    if (b < e) fn(t, b, e);
  });
}

}  // namespace lmf

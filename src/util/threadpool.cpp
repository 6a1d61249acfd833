#include "util/threadpool.h"

#include <algorithm>
#include <exception>

namespace lmf {

int ThreadPool::default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int n) : n_threads_(n <= 0 ? default_threads() : n) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int idx) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(idx);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
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
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &guarded;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  cv_start_.notify_all();
  guarded(0);
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
  }
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

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/status.h"
#include "util/threadpool.h"

namespace lmf {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 50; ++rep)  // many back-to-back regions (the decode pattern)
        pool.parallel_for(n, [&](int, int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
      for (auto& h : hits) EXPECT_EQ(h.load(), 50);
    }
  }
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.run_all([](int t) {
    if (t == 2) throw std::runtime_error("boom");
  }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.run_all([&](int) { n++; });  // still usable afterwards
  EXPECT_EQ(n.load(), 3);
}

TEST(ThreadPool, RefusesMoreThanTheLimit) {
  ThreadPool at_limit(ThreadPool::kMaxThreads);  // the limit itself starts and stops
  EXPECT_EQ(at_limit.size(), ThreadPool::kMaxThreads);
  try {
    ThreadPool pool(ThreadPool::kMaxThreads + 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 512 threads, asked for 513"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmf

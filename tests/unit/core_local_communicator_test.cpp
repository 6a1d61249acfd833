// The in-process communicator of the tensor-parallel simulation (runtime/local_communicator.h):
// sums in rank order on every rank, bit for bit, call after call; disagreeing sizes and a failed
// rank release every rank with an error instead of a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/local_communicator.h"
#include "util/status.h"

namespace lmf {
namespace {

// fn(rank) on n threads at once; returns each rank's error message ("" when none).
template <class F>
std::vector<std::string> on_ranks(int n, F fn) {
  std::vector<std::string> err(static_cast<size_t>(n));
  std::vector<std::jthread> t;
  for (int r = 0; r < n; ++r)
    t.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const Error& e) {
        err[size_t(r)] = e.what();
      }
    });
  t.clear();  // joins
  return err;
}

TEST(LocalCommunicator, SumsInRankOrderOnEveryRank) {
  for (int n : {1, 2, 3, 4}) {
    LocalGroup g(n);
    constexpr int kCalls = 50;
    const int64_t len = 37;  // not a multiple of n: uneven reduce-scatter shares
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    auto value = [](int r, int call, int64_t i) { return float(1e-3 * (r + 1) * (i + 1) + 1e4 * (r == 1) - call); };
    auto err = on_ranks(n, [&](int r) {
      Communicator& c = g.rank(r);
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), n);
      for (int call = 0; call < kCalls; ++call) {
        std::vector<float> x(static_cast<size_t>(len));
        for (int64_t i = 0; i < len; ++i) x[size_t(i)] = value(r, call, i);
        c.all_reduce_sum(x.data(), len);
        got[size_t(r)].insert(got[size_t(r)].end(), x.begin(), x.end());
      }
    });
    for (const auto& e : err) EXPECT_EQ(e, "");
    for (int call = 0; call < kCalls; ++call)
      for (int64_t i = 0; i < len; ++i) {
        float want = value(0, call, i);  // float additions, rank 0 first
        for (int r = 1; r < n; ++r) want += value(r, call, i);
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(std::memcmp(&got[size_t(r)][size_t(call * len + i)], &want, sizeof(float)), 0)
              << "n " << n << " rank " << r << " call " << call << " i " << i;
      }
  }
}

TEST(LocalCommunicator, DisagreeingSizesFailOnEveryRank) {
  LocalGroup g(3);
  auto err = on_ranks(3, [&](int r) {
    std::vector<float> x(8, 1.f);
    g.rank(r).all_reduce_sum(x.data(), r == 2 ? 7 : 8);
  });
  for (const auto& e : err) EXPECT_EQ(e, "all-reduce: rank 0 sums 8 values, rank 2 7");
}

TEST(LocalCommunicator, AbortReleasesWaitingRanks) {
  LocalGroup g(3);
  auto err = on_ranks(3, [&](int r) {
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the others are waiting by now
      g.abort();
      throw Error("rank 0 failed");
    }
    float x = 1;
    g.rank(r).all_reduce_sum(&x, 1);
  });
  EXPECT_EQ(err[0], "rank 0 failed");
  EXPECT_EQ(err[1], "all-reduce abandoned: another tensor-parallel rank failed");
  EXPECT_EQ(err[2], err[1]);
  // Re-armed, the group sums again.
  g.clear_abort();
  std::vector<float> out(3);
  err = on_ranks(3, [&](int r) {
    float x = float(r + 1);
    g.rank(r).all_reduce_sum(&x, 1);
    out[size_t(r)] = x;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(err[size_t(r)], "");
    EXPECT_EQ(out[size_t(r)], 6.f);
  }
}

}  // namespace
}  // namespace lmf

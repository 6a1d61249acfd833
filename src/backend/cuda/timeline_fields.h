// Launch timeline slot layout and its host-side reduction (pure C++, no CUDA headers: the CPU
// unit tests check it). The device side is kernels/common.cuh tl_*; the replay is timeline.h.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

namespace lmf::cuda {

// A slot is kTlWays copies ("ways") of kTlFields words, each way on its own 128-byte line; a
// block stamps way (block index % kTlWays) and timeline_reduce() combines the ways. One address
// per field took every block's (and every warp's exit) reductions before, and ~2,000 of them at
// the end of a short kernel delayed its completion, and the next kernel's release, by up to ~1 µs
// (docs/PERF.md S16-2, S16-3).
constexpr int kTlFields = 10, kTlWays = 16, kTlWayWords = 16;
constexpr int kTimelineWords = kTlWays * kTlWayWords;  // dev::kTlWords (kernels/common.cuh)
// Fields kept as minima (start, wait return, first mark 0); sums: [7], [8]; the rest maxima.
constexpr bool timeline_min_field(int j) { return j == 0 || j == 1 || j == 9; }
constexpr bool timeline_sum_field(int j) { return j == 7 || j == 8; }
// Initial words of n slots (minima at ~0, the rest 0).
inline std::vector<unsigned long long> timeline_init(int n_slots) {
  std::vector<unsigned long long> v(size_t(n_slots) * kTimelineWords, 0);
  for (size_t w = 0; w < v.size(); w += kTlWayWords)
    for (int j = 0; j < kTlFields; ++j)
      if (timeline_min_field(j)) v[w + size_t(j)] = ~0ull;
  return v;
}
// One slot's fields combined over its ways (a field no block stamped stays ~0 or 0).
inline std::array<unsigned long long, kTlFields> timeline_reduce(const unsigned long long* slot) {
  std::array<unsigned long long, kTlFields> f{};
  for (int j = 0; j < kTlFields; ++j) f[size_t(j)] = timeline_min_field(j) ? ~0ull : 0;
  for (int w = 0; w < kTlWays; ++w)
    for (int j = 0; j < kTlFields; ++j) {
      const unsigned long long v = slot[w * kTlWayWords + j];
      unsigned long long& o = f[size_t(j)];
      o = timeline_min_field(j) ? (v < o ? v : o) : timeline_sum_field(j) ? o + v : (v > o ? v : o);
    }
  return f;
}

}  // namespace lmf::cuda

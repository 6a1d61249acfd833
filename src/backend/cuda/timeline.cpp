// Launch timeline replay (timeline.h).
#include "backend/cuda/timeline.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace lmf::cuda {

TimelineSlots::TimelineSlots(int n_slots) : n_(n_slots) {
  const size_t words = size_t(n_) * kTimelineWords;
  init_.assign(words, 0);
  for (int k = 0; k < n_; ++k)
    for (int j : {0, 1, 9}) init_[size_t(k) * kTimelineWords + size_t(j)] = ~0ull;  // minima
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base_), words * sizeof(unsigned long long)));
}

TimelineSlots::~TimelineSlots() { cudaFree(base_); }

std::vector<SlotTimes> TimelineSlots::replay(cudaGraphExec_t exec, cudaStream_t s, int reps) {
  const size_t words = init_.size();
  std::vector<unsigned long long> got(words);
  std::vector<SlotTimes> mean(static_cast<size_t>(n_));
  std::vector<int> count(static_cast<size_t>(n_), 0);
  for (int r = -2; r < reps; ++r) {
    CUDA_CHECK(cudaMemcpyAsync(base_, init_.data(), words * 8, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaMemcpyAsync(got.data(), base_, words * 8, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (r < 0) continue;
    auto w = [&](int k, int j) { return got[size_t(k) * kTimelineWords + size_t(j)]; };
    unsigned long long t0 = ~0ull;
    auto end = [&](int k) { return timeline_end(got.data() + size_t(k) * kTimelineWords); };
    for (int k = 0; k < n_; ++k)
      if (end(k) != 0) t0 = std::min(t0, w(k, 0));
    for (int k = 0; k < n_; ++k) {
      if (end(k) == 0 || w(k, 0) == ~0ull) continue;  // no block ran
      SlotTimes& m = mean[size_t(k)];
      m.stamped = true;
      m.start += double(w(k, 0) - t0);
      // A kernel without a PDL wait stamp (none reached it) counts its start as the wait.
      m.wait += double((w(k, 1) == ~0ull ? w(k, 0) : w(k, 1)) - t0);
      m.end += double(end(k) - t0);
      ++count[size_t(k)];
    }
  }
  for (int k = 0; k < n_; ++k) {
    SlotTimes& m = mean[size_t(k)];
    if (count[size_t(k)] == 0) continue;
    m.start /= count[size_t(k)];
    m.wait /= count[size_t(k)];
    m.end /= count[size_t(k)];
  }
  return mean;
}

}  // namespace lmf::cuda

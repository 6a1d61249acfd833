// Launch timeline replay (timeline.h).
#include "backend/cuda/timeline.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace lmf::cuda {

TimelineSlots::TimelineSlots(int n_slots) : n_(n_slots), init_(timeline_init(n_slots)) {
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base_), init_.size() * sizeof(unsigned long long)));
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
    std::vector<std::array<unsigned long long, kTlFields>> f(static_cast<size_t>(n_));
    for (int k = 0; k < n_; ++k) f[size_t(k)] = timeline_reduce(got.data() + size_t(k) * kTimelineWords);
    unsigned long long t0 = ~0ull;
    for (const auto& x : f)
      if (x[2] != 0) t0 = std::min(t0, x[0]);
    auto at = [&](unsigned long long v) { return v == 0 || v == ~0ull ? 0.0 : double(v - t0); };
    for (int k = 0; k < n_; ++k) {
      const auto& x = f[size_t(k)];
      if (x[2] == 0 || x[0] == ~0ull) continue;  // no block ran
      SlotTimes& m = mean[size_t(k)];
      m.stamped = true;
      m.start += at(x[0]);
      m.wait += at(x[1] == ~0ull ? x[0] : x[1]);
      m.end += at(x[2]);
      m.phase_end += at(x[3]);
      m.mark0 += at(x[4]);
      m.mark1 += at(x[5]);
      m.last_start += at(x[6]);
      if (x[8] > 0) m.phase_mean += double(x[7]) / double(x[8]);
      m.first_mark0 += at(x[9]);
      ++count[size_t(k)];
    }
  }
  for (int k = 0; k < n_; ++k) {
    SlotTimes& m = mean[size_t(k)];
    const double c = count[size_t(k)];
    if (c == 0) continue;
    for (double* v : {&m.start, &m.wait, &m.end, &m.phase_end, &m.mark0, &m.mark1, &m.last_start, &m.phase_mean,
                      &m.first_mark0})
      *v /= c;
  }
  return mean;
}

}  // namespace lmf::cuda

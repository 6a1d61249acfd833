// Launch timeline of a replayed CUDA graph (measurement: `lmfuse bench --profile` on CUDA, and
// cuda_bench_gemv's decode chain). Each stamped kernel gets a slot of kTimelineWords u64 records
// in %globaltimer nanoseconds (kernels/common.cuh tl_*): earliest block start [0], earliest return
// from the PDL wait [1], latest warp exit (timeline_end), ... A kernel given no slot (or not
// launched) leaves its slot unstamped.
#pragma once
#include <cuda_runtime_api.h>

#include <vector>

namespace lmf::cuda {

// Word [2], the latest warp exit, is kept in kTlEndWays words instead, one per 128-byte line,
// chosen by block: every warp's exit stamps it, and ~2,000 reductions on one address at the end
// of a short kernel delayed its completion (and the next kernel's release) by up to ~1 µs
// (docs/PERF.md S16-2). timeline_end() reads it back.
constexpr int kTlEndBase = 16, kTlEndWays = 16, kTlEndStride = 16;
constexpr int kTimelineWords = kTlEndBase + kTlEndWays * kTlEndStride;  // dev::kTlWords (kernels/common.cuh)
inline unsigned long long timeline_end(const unsigned long long* w) {
  unsigned long long e = w[2];
  for (int i = 0; i < kTlEndWays; ++i) e = w[kTlEndBase + kTlEndStride * i] > e ? w[kTlEndBase + kTlEndStride * i] : e;
  return e;
}

// One slot's mean over the replays, in ns relative to each replay's earliest stamped start;
// stamped = false when no block of that slot's kernel ran.
struct SlotTimes {
  bool stamped = false;
  double start = 0, wait = 0, end = 0;
};

// Device slots for n kernels, initialized per replay (minima to ~0, maxima to 0).
class TimelineSlots {
 public:
  explicit TimelineSlots(int n_slots);
  ~TimelineSlots();
  TimelineSlots(const TimelineSlots&) = delete;
  TimelineSlots& operator=(const TimelineSlots&) = delete;
  unsigned long long* slot(int k) const { return base_ + size_t(k) * kTimelineWords; }
  int size() const { return n_; }
  // Replays `exec` twice to warm up, then `reps` times, each on freshly initialized slots.
  std::vector<SlotTimes> replay(cudaGraphExec_t exec, cudaStream_t s, int reps = 5);

 private:
  int n_ = 0;
  unsigned long long* base_ = nullptr;
  std::vector<unsigned long long> init_;
};

}  // namespace lmf::cuda

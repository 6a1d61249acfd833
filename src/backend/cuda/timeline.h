// Launch timeline of a replayed CUDA graph (measurement: `lmfuse bench --profile` on CUDA, and
// cuda_bench_gemv's decode chain). Each stamped kernel gets a slot of kTimelineWords u64 records
// in %globaltimer nanoseconds (kernels/common.cuh tl_*): earliest block start [0], earliest return
// from the PDL wait [1], latest warp exit [2], ... A kernel given no slot (or not launched) leaves
// its slot unstamped.
#pragma once
#include <cuda_runtime_api.h>

#include <vector>

#include "backend/cuda/timeline_fields.h"

namespace lmf::cuda {

// One slot's mean over the replays, in ns after each replay's earliest stamped start (a field no
// block stamped counts 0; an unstamped wait counts as the start); stamped = false when no block
// of that slot's kernel ran. Fields as in kernels/common.cuh.
struct SlotTimes {
  bool stamped = false;
  double start = 0, wait = 0, end = 0;  // [0], [1], [2]
  double phase_end = 0;                 // [3] latest end of a block's first phase
  double mark0 = 0, mark1 = 0;          // [4], [5] latest tl_mark 0 / 1
  double last_start = 0;                // [6]
  double phase_mean = 0;                // [7] / [8]: first phase per block (a duration)
  double first_mark0 = 0;               // [9]
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
  std::vector<unsigned long long> init_;  // timeline_init
};

}  // namespace lmf::cuda

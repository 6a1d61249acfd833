// The in-process Communicator of the tensor-parallel simulation (runtime/tp_sim.h): N ranks on N
// threads of one process share a LocalGroup; each rank's handle is group.rank(r).
//
// all_reduce_sum is a reduce-scatter then an all-gather, as NCCL's ring does it, over shared
// memory: every rank publishes its pointer (barrier), sums its own 1/N of the elements over all
// ranks in rank order 0..N-1 into a shared buffer (barrier), then copies the whole buffer back.
// Deterministic: the order of addition is fixed, whichever thread does it.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/communicator.h"

namespace lmf {

class LocalGroup {
 public:
  explicit LocalGroup(int n);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  int size() const { return n_; }
  Communicator& rank(int r);
  // A rank failed: every rank waiting in (or later entering) a collective throws instead of
  // waiting for it. clear_abort() re-arms the group once every rank has returned.
  void abort();
  void clear_abort();

 private:
  class Handle;
  friend class Handle;
  void all_reduce_sum(int r, float* data, int64_t n);
  // Waits until all n_ ranks arrived; the last to arrive runs `last` first (under the lock).
  void arrive_and_wait(const std::function<void()>& last = {});

  int n_;
  std::vector<std::unique_ptr<Handle>> handles_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<float*> ptrs_;   // [n_] each rank's data in the current collective
  std::vector<int64_t> lens_;  // [n_] each rank's n
  std::string mismatch_;       // set by the first barrier when the ranks' n differ
  std::vector<float> sum_;     // [n] the reduced values
};

}  // namespace lmf

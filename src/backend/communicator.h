// Collectives between the ranks of one tensor-parallel model (model/tp_split.h, docs/SCALING.md).
// A backend that runs a graph with OpKind::AllReduce is given one through BackendOptions::comm
// (not owned; it outlives the backend). The CPU simulation's implementation puts the ranks on
// threads of one process (runtime/local_communicator.h); a CUDA backend would wrap one ncclComm_t
// per rank / GPU and enqueue ncclAllReduce on its own stream over device pointers, so it adds a
// stream-taking entry of its own rather than pretending this host-pointer one is device-generic.
#pragma once
#include <cstdint>

namespace lmf {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place, host memory: data[i] = the sum over ranks of each rank's data[i]. Every rank calls
  // it with the same n, in the same order of calls; all ranks receive bit-identical sums whose
  // order of addition (rank 0, 1, ..., size-1) does not depend on timing. Throws lmf::Error when
  // the ranks disagree on n or another rank failed (no rank is left waiting).
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
};

}  // namespace lmf

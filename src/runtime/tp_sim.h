// Simulated tensor parallelism on the CPU (issue 57): one model split into N ranks
// (model/tp_split.h), each rank on a CPU backend of its own with its own KV cache (its KV heads),
// the ranks run concurrently on N threads of this process and sum their partial products
// through an in-process communicator (runtime/local_communicator.h). The logits are gathered
// from the ranks' vocabulary slices. What it proves: the split and the all-reduce placement give
// the single-rank logits (tests/golden/tp_sim_test.cpp), before any GPU or NCCL is involved.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "model/tp_split.h"

namespace lmf {

class LocalGroup;

class TpSim {
 public:
  // Splits m n ways (a one-line lmf::Error when it cannot: tp_refusal) and makes one CPU backend
  // per rank with o (o.n_threads threads each, 0 = 1; o.n_ctx positions of KV cache per rank;
  // o.comm is set per rank). m must outlive the TpSim.
  TpSim(const Model& m, int n, const BackendOptions& o, const TpOptions& split = {});
  ~TpSim();
  TpSim(const TpSim&) = delete;
  TpSim& operator=(const TpSim&) = delete;

  int size() const { return int(ranks_.size()); }
  const Model& rank_model(int r) const;
  Backend& rank_backend(int r);
  int64_t pos() const { return pos_; }
  int64_t n_ctx() const { return n_ctx_; }

  // Runs tokens at pos() on every rank at once and advances pos(). Returns the gathered logits
  // [n, n_vocab]: every position if all_logits, else the last. Errors (nothing advances): no
  // tokens, a token outside the vocabulary, the context full, or a rank's failure (the others
  // are released from their collectives and the first failure is rethrown).
  const std::vector<float>& eval(std::span<const int32_t> tokens, bool all_logits = false);
  void reset() { pos_ = 0; }

 private:
  struct Rank;
  const Model& m_;
  std::unique_ptr<LocalGroup> group_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  int64_t n_ctx_ = 0, pos_ = 0;
  std::vector<float> logits_;
};

}  // namespace lmf

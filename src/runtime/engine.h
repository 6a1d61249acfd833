// The many-sequence core: one model on one backend, the runtime-owned paged KV cache, and batch
// steps that advance several sequences at once, each at its own position, over one copy of the
// weights (DESIGN.md, "Many sequences, one engine"). A step's items mix decode rows (one token)
// and prefill chunks; each item gets its own logits, and one item that cannot run (its sequence
// out of blocks or past its context, a token outside the vocabulary) fails alone with a message
// while the others run.
//
// Sessions (runtime/session.h) are sequences of an Engine; the server's scheduler and
// `lmfuse bench -b` drive step() directly. Needs a backend with paged KV (Backend::paged_kv).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"
#include "model/model.h"
#include "runtime/kv_cache.h"

namespace lmf {

struct EngineConfig {
  int64_t n_ctx = 0;            // most positions one sequence may hold (> 0)
  int64_t kv_positions = 0;     // positions of the whole pool (all sequences); 0 = n_ctx
  int64_t block_size = 32;      // positions per KV block (a power of two)
  int64_t max_graphs = 64;      // prepared graphs kept (one per step shape), oldest dropped first
};

struct StepItem {
  int32_t seq = -1;
  std::span<const int32_t> tokens;  // evaluated after what the sequence holds
  bool all_logits = false;          // logits of every token; else of the last one
  float* logits = nullptr;          // host [n_out, n_vocab], written when the item runs; may be null
  int32_t* argmax = nullptr;        // host [n_out]: each of those rows' argmax (greedy), or null
  // Out: empty when the item ran (its sequence then holds the tokens); else why it did not (the
  // sequence is unchanged).
  std::string error;
};

class Engine {
 public:
  Engine(const Model& m, Backend& b, const EngineConfig& c);

  const Model& model() const { return model_; }
  Backend& backend() { return backend_; }
  KvCache& kv() { return *kv_; }
  const KvCache& kv() const { return *kv_; }
  int64_t n_ctx() const { return cfg_.n_ctx; }
  int64_t n_vocab() const { return model_.hp.n_vocab; }

  // Runs every item that can run in one backend step (items must name distinct sequences).
  // Returns the number that ran. A backend failure throws, with every sequence unchanged.
  int64_t step(std::span<StepItem> items, bool profile = false);

  // The prepared graph of a step of n_tokens rows with n_out logits rows.
  Graph& graph_for(int64_t n_tokens, int64_t n_out);

  // Why `tokens` cannot be appended to `seq` ("" when they can): for a caller that wants to know
  // before it builds a step.
  std::string refusal(int32_t seq, std::span<const int32_t> tokens) const;

 private:
  const Model& model_;
  Backend& backend_;
  EngineConfig cfg_;
  std::unique_ptr<KvCache> kv_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Graph>> graphs_;
  std::vector<std::pair<int64_t, int64_t>> graph_order_;  // oldest first
  // Scratch of a step, kept across steps.
  std::vector<int32_t> tokens_;
  std::vector<BatchEntry> entries_;
  std::vector<int64_t> out_rows_;
  std::vector<float> logits_;
  std::vector<int32_t> argmax_;
};

}  // namespace lmf

#include "runtime/engine.h"

#include <algorithm>
#include <cstring>

#include "model/build_graph.h"
#include "runtime/session.h"
#include "util/status.h"

namespace lmf {

Engine::Engine(const Model& m, Backend& b, const EngineConfig& c) : model_(m), backend_(b), cfg_(c) {
  LMF_CHECK(b.paged_kv(), b.name(), " keeps its own KV cache");
  LMF_CHECK(c.n_ctx > 0 && c.block_size > 0 && (c.block_size & (c.block_size - 1)) == 0);
  const int64_t positions = std::max(c.kv_positions > 0 ? c.kv_positions : c.n_ctx, c.block_size);
  const int64_t n_blocks = (positions + c.block_size - 1) / c.block_size;
  backend_.alloc_kv(n_blocks, c.block_size);
  kv_ = std::make_unique<KvCache>(n_blocks, c.block_size,
                                  [this](int32_t src, int32_t dst) { backend_.copy_kv_block(src, dst); });
}

Graph& Engine::graph_for(int64_t n, int64_t n_out) {
  const auto key = std::make_pair(n, n_out);
  auto& slot = graphs_[key];
  if (!slot) {
    slot = std::make_unique<Graph>(build_graph(model_, n, false, n_out));
    slot->paged = true;
    prepare_graph(*slot, backend_);
    graph_order_.push_back(key);
    // A server sees many step shapes; keep the recent ones (a graph costs a plan, not weights).
    while (int64_t(graph_order_.size()) > cfg_.max_graphs) {
      graphs_.erase(graph_order_.front());
      graph_order_.erase(graph_order_.begin());
    }
  }
  return *graphs_[key];
}

std::string Engine::refusal(int32_t seq, std::span<const int32_t> tokens) const {
  if (!kv_->exists(seq)) return cat("no sequence ", seq);
  const int64_t T = int64_t(tokens.size()), pos = kv_->length(seq);
  if (T == 0) return "no tokens to evaluate";
  if (pos + T > cfg_.n_ctx)
    return pos == 0 ? cat("prompt is ", T, " tokens long; the context holds ", cfg_.n_ctx, " (use a larger -c)")
                    : cat("context full: ", pos, " tokens in the cache + ", T, " new exceed the context of ",
                          cfg_.n_ctx, " tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= model_.hp.n_vocab)
      return cat("token id ", t, " is outside the vocabulary (0..", model_.hp.n_vocab - 1, ")");
  return "";
}

int64_t Engine::step(std::span<StepItem> items, bool profile) {
  const int64_t V = model_.hp.n_vocab;
  tokens_.clear();
  entries_.clear();
  out_rows_.clear();
  std::vector<size_t> ran;
  for (size_t i = 0; i < items.size(); ++i) {
    StepItem& it = items[i];
    it.error = refusal(it.seq, it.tokens);
    if (it.error.empty() && std::any_of(ran.begin(), ran.end(), [&](size_t j) { return items[j].seq == it.seq; }))
      it.error = cat("sequence ", it.seq, " appears twice in one step");
    if (it.error.empty() && int64_t(tokens_.size() + it.tokens.size()) > backend_.max_batch_rows())
      it.error = cat("the step would hold ", tokens_.size() + it.tokens.size(), " tokens; ", backend_.name(),
                     " runs at most ", backend_.max_batch_rows(), " per step (send the prompt in chunks)");
    if (it.error.empty() && !kv_->reserve(it.seq, int64_t(it.tokens.size())))
      it.error = cat("the KV cache is full: ", kv_->blocks_needed(it.seq, int64_t(it.tokens.size())),
                     " more blocks of ", kv_->block_size(), " positions needed, ", kv_->free_blocks(), " of ",
                     kv_->n_blocks(), " free (raise --kv-budget or lower the load)");
    if (!it.error.empty()) continue;
    const int64_t row0 = int64_t(tokens_.size()), T = int64_t(it.tokens.size());
    const auto blocks = kv_->blocks(it.seq);
    entries_.push_back({row0, T, kv_->length(it.seq), blocks.data(), int64_t(blocks.size())});
    tokens_.insert(tokens_.end(), it.tokens.begin(), it.tokens.end());
    for (int64_t r = it.all_logits ? 0 : T - 1; r < T; ++r) out_rows_.push_back(row0 + r);
    ran.push_back(i);
  }
  if (ran.empty()) return 0;
  const int64_t T = int64_t(tokens_.size()), n_out = int64_t(out_rows_.size());
  logits_.resize(size_t(n_out * V));
  StepInput in;
  in.tokens = tokens_.data();
  in.n_tokens = T;
  in.entries = entries_.data();
  in.n_entries = int64_t(entries_.size());
  in.out_rows = out_rows_.data();
  // Logits come to the host only when an item asks for them; argmax ids where one asks for those.
  const bool want_logits = std::any_of(ran.begin(), ran.end(), [&](size_t i) { return items[i].logits != nullptr; });
  const bool want_argmax = std::any_of(ran.begin(), ran.end(), [&](size_t i) { return items[i].argmax != nullptr; });
  argmax_.resize(size_t(n_out));
  in.logits = want_logits || !want_argmax ? logits_.data() : nullptr;
  in.row_argmax = want_argmax ? argmax_.data() : nullptr;
  in.profile = profile;
  try {
    backend_.run(graph_for(T, n_out), in);
  } catch (...) {
    for (size_t i : ran) kv_->truncate(items[i].seq, kv_->length(items[i].seq));  // drop the reserved blocks
    throw;
  }
  int64_t o = 0;
  for (size_t i : ran) {
    StepItem& it = items[i];
    const int64_t n = it.all_logits ? int64_t(it.tokens.size()) : 1;
    if (it.logits) std::memcpy(it.logits, logits_.data() + o * V, size_t(n * V) * sizeof(float));
    if (it.argmax) std::memcpy(it.argmax, argmax_.data() + o, size_t(n) * sizeof(int32_t));
    o += n;
    kv_->commit(it.seq, int64_t(it.tokens.size()));
  }
  return int64_t(ran.size());
}

}  // namespace lmf

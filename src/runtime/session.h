// A Session runs a model on a backend: it owns the KV cache position, builds and prepares one
// graph per shape (token count, logits mode) and reuses it, so a decode step never re-plans.
#pragma once
#include <map>
#include <string>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"
#include "model/model.h"

namespace lmf {

class Sampler;  // sampling/sampler.h

class Engine;  // runtime/engine.h

class Session {
 public:
  // The backend must have been created with the context length and loaded with this model. A
  // paged-KV backend (CPU) gets an Engine of its own whose pool holds this one sequence.
  Session(const Model& m, Backend& b);
  // One sequence of a shared engine (many conversations over one model and KV pool); freed with
  // the session.
  explicit Session(Engine& e);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // A new session holding what this one holds, sharing its KV blocks (copy-on-write); paged
  // backends only.
  std::unique_ptr<Session> fork() const;
  // The engine and sequence id of a paged session (null / -1 otherwise).
  Engine* engine() const { return engine_; }
  int32_t seq() const { return seq_; }

  // Runs tokens at the current position (a prompt in one batched pass, or one decode token)
  // and advances it. Returns logits [n, vocab]: the last position only unless all_logits.
  // Errors (nothing is written to the cache): empty input, a token id outside the vocabulary,
  // or pos() + tokens.size() past the context.
  const std::vector<float>& eval(std::span<const int32_t> tokens, bool all_logits = false);

  // Same as eval() but returns only the argmax of the last position's logits; backends that
  // can (CUDA) compute it on the device so only the token id crosses to the host.
  int32_t eval_argmax(std::span<const int32_t> tokens);

  // Same as eval() followed by sample_with_uniform(p, logits, penalty_ids(p, history), u01)
  // (sampling/sampler.h): backends that can (CUDA, see Backend::can_sample) sample on the
  // device so only the token id crosses to the host; the result is the same either way. u01
  // comes from Sampler::next_uniform() (not drawn when greedy), so a seed gives the same tokens
  // on every backend.
  int32_t eval_sample(std::span<const int32_t> tokens, const SamplingParams& p, std::span<const int32_t> history,
                      double u01);

  // The token after `tokens`, picked by `sampler` where the logits are: eval_argmax when its
  // parameters are plain greedy (no penalty), else eval_sample with the sampler's next uniform
  // (none drawn when greedy). history: the tokens the repetition penalty looks at, `tokens`
  // included. The same tokens as eval() followed by sampler.sample(logits, history).
  int32_t eval_next(std::span<const int32_t> tokens, Sampler& sampler, std::span<const int32_t> history);

  // Chained decode (runtime/generator.h drives it): whether steps that pick their token with
  // `p` can run one ahead of the host (Backend::can_chain, knob decode_pipeline: auto = on).
  bool can_chain(const SamplingParams& p) const;
  // eval_next that also leaves the picked id on the device as the next step's input (no
  // repetition penalty, so no history: can_chain).
  int32_t eval_next_chained(std::span<const int32_t> tokens, Sampler& sampler);
  // Queues the decode step at pos() whose input is the id the previous step left on the device,
  // and returns at once (pos() advances); its id comes from take_queued(), oldest first. The
  // sampler's uniform number is drawn now, in step order, as eval_next would.
  void queue_next(Sampler& sampler);
  int32_t take_queued() { return backend_.take_queued(); }

  int64_t pos() const { return pos_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_vocab() const { return model_.hp.n_vocab; }
  const std::vector<float>& logits() const { return logits_; }
  // Forgets positions >= p (the cache is simply overwritten later).
  void rewind(int64_t p);
  void reset() { rewind(0); }
  // The prepared graph for a shape (for inspection and tests).
  Graph& graph_for(int64_t n_tokens, bool all_logits);
  // The next eval times every launch (backends that support it); read backend.profile().
  void profile_next() { profile_next_ = true; }
  // Prompt longer than this is evaluated in chunks (bounded activation memory).
  void set_max_batch(int64_t n) { max_batch_ = n; }

 private:
  // pick: the last chunk's step returns a picked id instead of logits: its argmax or
  // device-sampling fields and chained-decode flag, copied whole into that step's request, so it
  // sets no other field (null: logits).
  void eval_impl(std::span<const int32_t> tokens, bool all_logits, const StepInput* pick = nullptr);
  // A paged step over the engine (eval_impl's chunk): logits into out (may be null).
  void paged_chunk(std::span<const int32_t> tokens, bool all_logits, float* out, bool profile);
  const Model& model_;
  Backend& backend_;
  int64_t n_ctx_;
  int64_t pos_ = 0;
  std::unique_ptr<Engine> own_engine_;  // paged backend, no shared engine given
  Engine* engine_ = nullptr;            // paged: the engine whose KV cache holds this sequence
  int32_t seq_ = -1;
  int64_t max_batch_ = 2048;
  bool profile_next_ = false;
  std::map<std::pair<int64_t, bool>, std::unique_ptr<Graph>> graphs_;
  std::vector<float> logits_;
};

// Prepares a graph for a backend: clears old decisions, lets the backend decide fusions, fixes
// overlaps in the memory plan (re-home or reject) and marks followers.
void prepare_graph(Graph& g, Backend& b, size_t max_rehome_bytes = SIZE_MAX);

}  // namespace lmf

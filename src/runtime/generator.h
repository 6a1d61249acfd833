// The tokens of a generation loop, with the next decode step queued ahead where the session can
// chain steps (Session::can_chain: CUDA, greedy or sampling without a repetition penalty, knob
// decode_pipeline). next() queues the step that consumes the token it is about to return (that
// step reads the token on the device), then waits for the token: the host's work on a token
// (detokenizing, printing, stop checks) overlaps the next step, and no copy or synchronization
// separates two steps. A step queued beyond the last token the caller takes is waited for and
// dropped by finish() (the position rewinds, and the sampler gets back the random number that
// step drew, so a sampler that lives on, as chat's does across turns, continues as it would have).
// Otherwise it is Session::eval_next step by step. Either way the tokens are the same.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "runtime/session.h"
#include "sampling/sampler.h"

namespace lmf {

class Generator {
 public:
  // history: the tokens the cache holds, ending with the prompt given to first() (what the
  // repetition penalty looks at); each returned token is appended once a step consumes it.
  // max_tokens: the most tokens first() and next() return together (the context bounds them too).
  Generator(Session& s, Sampler& sampler, std::vector<int32_t>& history, int64_t max_tokens);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Evaluates `prompt` (tokens not yet in the cache) and returns the first token.
  int32_t first(std::span<const int32_t> prompt);
  // Whether next() may be called: fewer than max_tokens returned, and the context has room for
  // the step that consumes the last one.
  bool more() const;
  // The token after the last returned one.
  int32_t next();
  // Waits for and drops a step queued ahead (rewinding the session's position). Idempotent.
  void finish();

  // The session's position once the returned tokens but the last are consumed (a step queued
  // ahead not counted): what Session::pos() is in the step-by-step loop.
  int64_t pos() const { return s_.pos() - queued_; }
  bool chained() const { return chained_; }

 private:
  void queue_one();
  // Whether a step may consume the last of `returned` tokens, at position `pos`.
  bool may_follow(int64_t returned, int64_t pos) const { return returned < max_ && pos + 1 <= s_.n_ctx(); }
  Session& s_;
  Sampler& sampler_;
  std::vector<int32_t>& history_;
  int64_t max_;
  int64_t returned_ = 0;
  int64_t queued_ = 0;  // steps queued and not yet taken
  int32_t last_ = -1;
  bool chained_ = false;
  std::optional<Sampler> before_queue_;  // the sampler before the newest queued step drew (sampling only)
};

}  // namespace lmf

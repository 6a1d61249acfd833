#include "runtime/generator.h"

#include "util/status.h"

namespace lmf {

Generator::Generator(Session& s, Sampler& sampler, std::vector<int32_t>& history, int64_t max_tokens)
    : s_(s), sampler_(sampler), history_(history), max_(max_tokens) {}

Generator::~Generator() {
  try {
    finish();
  } catch (...) {  // a destructor does not throw; the error surfaced (or will) elsewhere
  }
}

int32_t Generator::first(std::span<const int32_t> prompt) {
  LMF_CHECK(returned_ == 0);
  chained_ = max_ > 1 && s_.can_chain(sampler_.params());
  last_ = chained_ ? s_.eval_next_chained(prompt, sampler_) : s_.eval_next(prompt, sampler_, history_);
  returned_ = 1;
  if (chained_ && more()) queue_one();
  return last_;
}

bool Generator::more() const { return returned_ > 0 && may_follow(returned_, pos()); }

void Generator::queue_one() {
  if (sampler_.params().temperature > 0) before_queue_ = sampler_;
  s_.queue_next(sampler_);
  ++queued_;
}

int32_t Generator::next() {
  if (!more()) LMF_FAIL("no more tokens to generate (", returned_, " of ", max_, ", position ", pos(), ")");
  history_.push_back(last_);  // the step that consumes it runs now (or is queued already)
  if (!chained_) {
    try {
      last_ = s_.eval_next(std::span(&last_, 1), sampler_, history_);
    } catch (...) {
      history_.pop_back();  // the cache did not take it
      throw;
    }
  } else {
    // The step consuming last_ is queued; queue the one after it (consuming the token about to
    // be returned) before waiting, so the device never waits for the host.
    LMF_CHECK(queued_ == 1);
    if (may_follow(returned_ + 1, s_.pos())) queue_one();
    last_ = s_.take_queued();
    --queued_;
  }
  ++returned_;
  return last_;
}

void Generator::finish() {
  // At rest one step is queued at most, the newest: its draw is undone with the saved sampler.
  if (queued_ > 0 && before_queue_) sampler_ = *before_queue_;
  for (; queued_ > 0; --queued_) {
    s_.take_queued();
    s_.rewind(s_.pos() - 1);
  }
  before_queue_.reset();
}

}  // namespace lmf

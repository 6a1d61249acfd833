// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency
// penalties, seeded RNG.
// The same seed, parameters and logits give the same tokens on every run and machine.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace lmf {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off (llama.cpp semantics: divide positive logits, multiply negative)
  int repeat_last_n = 64;          // the penalty window: last n tokens of the history (< 0: all)
  uint64_t seed = 0;
  // OpenAI's: logit -= frequency_penalty * count + presence_penalty * (count > 0), count = the
  // token's occurrences in the penalty window (after the repeat penalty, as llama.cpp orders them).
  // Last, so positional initializers written before they existed keep their meaning.
  float presence_penalty = 0.0f;   // 0: off
  float frequency_penalty = 0.0f;  // 0: off
};

// Any penalty on (repeat != 1, presence or frequency != 0).
bool has_penalty(const SamplingParams& p);

// The token ids in [0, n_vocab) the penalties apply to: the last repeat_last_n entries of history
// (all of it when repeat_last_n < 0), ascending; distinct, except with a frequency penalty, where
// each id appears as often as it occurs (its count). Empty when no penalty is on.
std::vector<int32_t> penalty_ids(const SamplingParams& p, std::span<const int32_t> history, int64_t n_vocab);

// The sampling algorithm with its random number given: u01 in [0, 1) (ignored when greedy).
// Order: penalty over pen_ids -> candidates sorted by (logit desc, id asc) -> top-k -> softmax
// with temperature (double) -> min-p -> top-p -> the first candidate whose cumulative
// probability exceeds u01 * (kept mass). The sums (softmax denominator, cumulative probability,
// kept mass) run in sampling/chunked_sum.h's order: left to right within chunks of 256
// candidates, then over the chunk totals. Backends that sample on the device follow this exactly.
int32_t sample_with_uniform(const SamplingParams& p, std::span<const float> logits,
                            std::span<const int32_t> pen_ids, double u01,
                            std::vector<std::pair<float, int32_t>>* scratch = nullptr);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // history: tokens seen so far (for the repetition penalty).
  // Same as sample_with_uniform(p, logits, penalty_ids(history), next_uniform()); greedy
  // (temperature <= 0) draws no random number.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The next uniform number in [0, 1) from the seeded generator (53 bits), for callers that
  // sample elsewhere (on the device) and must keep the same random sequence.
  double next_uniform() { return double(rng_() >> 11) * (1.0 / 9007199254740992.0); }
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace lmf

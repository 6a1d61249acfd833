#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "sampling/pick.h"
#include "util/status.h"

namespace lmf {

int32_t argmax(std::span<const float> l) {
  LMF_CHECK(!l.empty());
  return int32_t(std::max_element(l.begin(), l.end()) - l.begin());
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  // NaN passes every comparison below and would sample from NaN probabilities; infinity is no
  // setting anyone means (temperature inf = uniform over the vocabulary).
  for (auto [name, v] : {std::pair{"temperature", p.temperature}, {"top-p", p.top_p}, {"min-p", p.min_p},
                         {"repeat penalty", p.repeat_penalty}, {"presence penalty", p.presence_penalty},
                         {"frequency penalty", p.frequency_penalty}})
    if (!std::isfinite(v)) LMF_FAIL(name, " must be a finite number, got ", v);
  if (p.top_p <= 0) LMF_FAIL("top-p must be > 0, got ", p.top_p);
  if (p.repeat_penalty <= 0) LMF_FAIL("repeat penalty must be > 0, got ", p.repeat_penalty);
}

bool has_penalty(const SamplingParams& p) {
  return p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

std::vector<int32_t> penalty_ids(const SamplingParams& p, std::span<const int32_t> history, int64_t n_vocab) {
  std::vector<int32_t> ids;
  if (!has_penalty(p) || p.repeat_last_n == 0) return ids;
  size_t from = p.repeat_last_n < 0 || history.size() < size_t(p.repeat_last_n) ? 0 : history.size() - size_t(p.repeat_last_n);
  for (size_t i = from; i < history.size(); ++i)
    if (history[i] >= 0 && history[i] < n_vocab) ids.push_back(history[i]);
  std::sort(ids.begin(), ids.end());
  if (p.frequency_penalty == 0.0f) ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const auto pen = penalty_ids(p_, history, int64_t(logits.size()));
  return sample_with_uniform(p_, logits, pen, p_.temperature <= 0 ? 0.0 : next_uniform(), &cand_);
}

int32_t sample_with_uniform(const SamplingParams& p_, std::span<const float> logits,
                            std::span<const int32_t> pen_ids, double u01,
                            std::vector<std::pair<float, int32_t>>* scratch) {
  LMF_CHECK(!logits.empty());
  std::vector<std::pair<float, int32_t>> local;
  auto& cand_ = scratch ? *scratch : local;
  const int32_t n = int32_t(logits.size());
  cand_.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) cand_[size_t(i)] = {logits[size_t(i)], i};
  if (has_penalty(p_))
    for (size_t i = 0; i < pen_ids.size();) {  // ascending: a run of one id is its count
      const int32_t t = pen_ids[i];
      size_t j = i + 1;
      while (j < pen_ids.size() && pen_ids[j] == t) ++j;
      const float count = float(j - i);
      i = j;
      if (t < 0 || t >= n) continue;
      float& l = cand_[size_t(t)].first;
      if (p_.repeat_penalty != 1.0f) l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
      if (p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f)
        l -= p_.frequency_penalty * count + p_.presence_penalty;
    }
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  if (p_.temperature <= 0) return std::min_element(cand_.begin(), cand_.end(), by_logit)->second;

  size_t k = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < k) {
    k = size_t(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + long(k), cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  cand_.resize(k);
  // softmax with temperature (sorted descending, so cand_[0] is the max), min-p, top-p and the
  // pick: sampling/pick.h, shared with the CUDA sampler.
  const float mx = cand_[0].first;
  std::vector<double> prob(k);
  for (size_t i = 0; i < k; ++i) prob[i] = std::exp(double(cand_[i].first - mx) / p_.temperature);
  return cand_[size_t(pick_sorted(prob.data(), (long long)k, p_.top_p, p_.min_p, u01))].second;
}

}  // namespace lmf

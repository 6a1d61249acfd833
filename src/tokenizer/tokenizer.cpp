#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "tokenizer/utf8.h"
#include "util/status.h"

namespace lmf {

// Finds added tokens in raw text: leftmost match first, longest token on ties (HF's
// aho-corasick LeftmostLongest). Candidates are bucketed by first byte.
struct Tokenizer::AddedMatcher {
  struct Cand {
    std::string text;
    int32_t id;
  };
  std::array<std::vector<Cand>, 256> by_first;  // each bucket sorted longest first
  bool any = false;

  explicit AddedMatcher(const std::vector<AddedToken>& toks, bool include_special) {
    for (const auto& t : toks) {
      if (t.content.empty() || (t.special && !include_special)) continue;
      by_first[uint8_t(t.content[0])].push_back({t.content, t.id});
      any = true;
    }
    for (auto& b : by_first)
      std::stable_sort(b.begin(), b.end(),
                       [](const Cand& a, const Cand& c) { return a.text.size() > c.text.size(); });
  }
  // Position and candidate of the next match at or after `from`; npos if none.
  size_t next(std::string_view s, size_t from, const Cand** hit) const {
    if (!any) return std::string_view::npos;
    for (size_t i = from; i < s.size(); ++i) {
      const auto& b = by_first[uint8_t(s[i])];
      for (const auto& c : b) {
        if (c.text.size() <= s.size() - i && std::memcmp(s.data() + i, c.text.data(), c.text.size()) == 0) {
          *hit = &c;
          return i;
        }
      }
    }
    return std::string_view::npos;
  }
};

namespace {
const char* const kEogTexts[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>",
                                 "<|end_of_text|>", "<end_of_turn>", "<|end|>", "</s>"};
}

void Tokenizer::finish_setup() {
  special_.assign(id_to_piece_.size(), 0);
  for (const auto& a : added_)
    if (a.special && a.id >= 0 && a.id < n_vocab()) special_[size_t(a.id)] = 1;
  matchers_[0] = std::make_shared<AddedMatcher>(added_, false);
  matchers_[1] = std::make_shared<AddedMatcher>(added_, true);
  eog_.clear();
  if (eos_ >= 0) eog_.push_back(eos_);
  for (const auto& a : added_)
    for (const char* t : kEogTexts)
      if (a.content == t && std::find(eog_.begin(), eog_.end(), a.id) == eog_.end())
        eog_.push_back(a.id);
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc_) {
    normalized = utf8::nfc(text);
    text = normalized;
  }
  pre_.split(text, [&](std::string_view piece) { bpe_.encode_piece(piece, out); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  // Invalid UTF-8 becomes U+FFFD first, like Python's bytes.decode('utf-8', 'replace').
  std::string clean;
  if (!utf8::is_valid(text)) {
    clean = utf8::sanitize(text);
    text = clean;
  }
  const AddedMatcher& m = *matchers_[parse_special ? 1 : 0];
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedMatcher::Cand* hit = nullptr;
    size_t at = m.next(text, pos, &hit);
    if (at == std::string_view::npos) {
      encode_text(text.substr(pos), out);
      break;
    }
    encode_text(text.substr(pos, at - pos), out);
    out.push_back(hit->id);
    pos = at + hit->text.size();
  }
  return out;
}

std::string Tokenizer::piece(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    LMF_FAIL("tokenizer: token id ", id, " out of range [0, ", n_vocab(), ")");
  return id_to_piece_[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string raw;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab())
      LMF_FAIL("tokenizer: token id ", id, " out of range [0, ", n_vocab(), ")");
    if (skip_special && special_[size_t(id)]) continue;
    raw += id_to_piece_[size_t(id)];
  }
  return utf8::sanitize(raw);  // HF: String::from_utf8_lossy
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::find(eog_.begin(), eog_.end(), id) != eog_.end();
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < n_vocab() && special_[size_t(id)];
}

int32_t Tokenizer::token_id(std::string_view token_text) const {
  for (const auto& a : added_)
    if (a.content == token_text) return a.id;
  return bpe_.find(token_text);
}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) {
    tok_.piece(id);  // still range-checks
    return {};
  }
  pending_ += tok_.piece(id);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    size_t bad;
    bool truncated;
    size_t len = utf8::seq_len(pending_, i, &bad, &truncated);
    if (len) {
      out.append(pending_, i, len);
      i += len;
    } else if (truncated) {
      break;  // the next token may complete this character
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace lmf

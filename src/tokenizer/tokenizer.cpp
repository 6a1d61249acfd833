#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "tokenizer/utf8.h"
#include "util/status.h"

namespace lmf {

namespace {
// The code point that ends s[..at) / starts s[at..) (valid UTF-8, at on a boundary).
uint32_t cp_before(std::string_view s, size_t at) {
  size_t i = at - 1;
  while (i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80) --i;
  size_t len;
  return utf8::decode_at(s, i, &len);
}
uint32_t cp_at(std::string_view s, size_t at) {
  size_t len;
  return utf8::decode_at(s, at, &len);
}
}  // namespace

// Finds added tokens as HF's AddedVocabulary does: one Aho-Corasick LeftmostLongest pass over
// all patterns of one kind (raw or normalized), each match then kept or dropped by its token's
// flags. Candidates are bucketed by first byte, longest first (the first added on ties).
struct Tokenizer::AddedMatcher {
  struct Cand {
    std::string text;
    const AddedToken* tok;
  };
  std::array<std::vector<Cand>, 256> by_first;
  bool any = false;

  AddedMatcher(const std::vector<AddedToken>& toks, bool normalized, const Normalizer& norm) {
    for (const auto& t : toks) {
      if (t.normalized != normalized) continue;
      std::string p = normalized && !norm.empty() ? norm.apply(t.content) : t.content;
      if (p.empty()) continue;
      by_first[uint8_t(p[0])].push_back({std::move(p), &t});
      any = true;
    }
    for (auto& b : by_first)
      std::stable_sort(b.begin(), b.end(),
                       [](const Cand& a, const Cand& c) { return a.text.size() > c.text.size(); });
  }
  // Position and candidate of the next match at or after `from`; npos if none.
  size_t next(std::string_view s, size_t from, const Cand** hit) const {
    for (size_t i = from; i < s.size(); ++i) {
      for (const auto& c : by_first[uint8_t(s[i])]) {
        if (c.text.size() <= s.size() - i && std::memcmp(s.data() + i, c.text.data(), c.text.size()) == 0) {
          *hit = &c;
          return i;
        }
      }
    }
    return std::string_view::npos;
  }
  // HF's find_matches: calls text(begin, end) for the stretches between kept matches and
  // token(id) for each kept match, in order.
  template <class Text, class Token>
  void split(std::string_view s, bool parse_special, Text&& text, Token&& token) const {
    size_t done = 0;  // HF's start_offset
    if (any) {
      const Cand* c = nullptr;
      for (size_t at, pos = 0; (at = next(s, pos, &c)) != std::string_view::npos;) {
        size_t start = at, stop = at + c->text.size();
        pos = stop;  // the automaton goes on after the match, kept or not
        const AddedToken& t = *c->tok;
        if (t.special && !parse_special) continue;
        if (t.single_word && ((start > 0 && hf::is_word_char(cp_before(s, start))) ||
                              (stop < s.size() && hf::is_word_char(cp_at(s, stop)))))
          continue;
        if (t.lstrip) {
          size_t ns = start;
          while (ns > 0 && hf::is_white_space(cp_before(s, ns))) {
            --ns;
            while (ns > 0 && (uint8_t(s[ns]) & 0xC0) == 0x80) --ns;
          }
          start = std::max(ns, done);
        }
        if (t.rstrip) {
          size_t len;
          while (stop < s.size() && hf::is_white_space(utf8::decode_at(s, stop, &len))) stop += len;
        }
        if (done < start) text(done, start);
        if (start < stop) token(t.id);  // HF drops empty splits: a match inside what lstrip took
        done = stop;
      }
    }
    if (done < s.size()) text(done, s.size());
  }
};

namespace {
const char* const kEogTexts[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>",
                                 "<|end_of_text|>", "<end_of_turn>", "<|end|>", "</s>"};
}

void Tokenizer::finish_setup() {
  special_.assign(id_to_piece_.size(), 0);
  for (const auto& sp : special_texts_)
    for (size_t i = 0; i < vocab_.size(); ++i)
      if (vocab_[i] == sp) special_[i] = 1;
  raw_match_ = std::make_shared<AddedMatcher>(added_, false, norm_);
  norm_match_ = std::make_shared<AddedMatcher>(added_, true, norm_);
  eog_.clear();
  if (eos_ >= 0) eog_.push_back(eos_);
  for (const auto& a : added_)
    for (const char* t : kEogTexts)
      if (a.content == t && std::find(eog_.begin(), eog_.end(), a.id) == eog_.end())
        eog_.push_back(a.id);
}

void Tokenizer::encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  pre_.split(text, [&](std::string_view piece) { bpe_.encode_piece(piece, out); }, at_start);
}

void Tokenizer::encode_segment(std::string_view text, bool at_start, bool parse_special,
                               std::vector<int32_t>& out) const {
  std::string normalized;
  if (!norm_.empty()) {
    normalized = norm_.apply(text);
    text = normalized;
  }
  norm_match_->split(
      text, parse_special,
      [&](size_t a, size_t b) { encode_plain(text.substr(a, b - a), at_start && a == 0, out); },
      [&](int32_t id) { out.push_back(id); });
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
  raw_match_->split(
      text, parse_special,
      [&](size_t a, size_t b) { encode_segment(text.substr(a, b - a), a == 0, parse_special, out); },
      [&](int32_t id) { out.push_back(id); });
  return out;
}

std::string Tokenizer::piece(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    LMF_FAIL("tokenizer: token id ", id, " out of range [0, ", n_vocab(), ")");
  return id_to_piece_[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const bool fast = dec_.is_byte_level_only();
  std::string raw;
  std::vector<std::string> toks;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab())
      LMF_FAIL("tokenizer: token id ", id, " out of range [0, ", n_vocab(), ")");
    if (skip_special && special_[size_t(id)]) continue;
    if (vocab_[size_t(id)].empty()) continue;  // an id with no token: HF skips it
    if (fast) raw += id_to_piece_[size_t(id)];
    else toks.push_back(vocab_[size_t(id)]);
  }
  if (fast) return utf8::sanitize(raw);  // HF: String::from_utf8_lossy
  return dec_.decode(std::move(toks));
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

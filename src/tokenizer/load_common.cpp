#include <algorithm>

#include "tokenizer/bpe.h"
#include "tokenizer/loader.h"

namespace lmf {

void TokenizerLoader::set_vocab(Tokenizer& t, std::vector<std::string> spelled,
                                const std::vector<std::pair<std::string, std::string>>& merges,
                                bool ignore_merges, const std::string& what) {
  int32_t n = int32_t(spelled.size());
  for (const auto& a : t.added_) n = std::max(n, a.id + 1);
  spelled.resize(size_t(n));
  t.id_to_piece_.assign(size_t(n), std::string());
  std::vector<std::string> bpe_vocab(static_cast<size_t>(n));
  std::vector<uint8_t> is_added(size_t(n), 0);
  for (const auto& a : t.added_) {
    is_added[size_t(a.id)] = 1;
    t.id_to_piece_[size_t(a.id)] = a.content;  // added tokens decode to their literal text
    if (spelled[size_t(a.id)].empty()) spelled[size_t(a.id)] = a.content;
  }
  for (int32_t i = 0; i < n; ++i) {
    if (is_added[size_t(i)]) continue;
    ByteLevel::to_bytes(spelled[size_t(i)], t.id_to_piece_[size_t(i)]);
    bpe_vocab[size_t(i)] = spelled[size_t(i)];
  }
  t.merges_text_.clear();
  t.merges_text_.reserve(merges.size());
  for (const auto& [a, b] : merges) t.merges_text_.push_back(a + " " + b);
  t.vocab_ = std::move(spelled);
  t.bpe_.load(bpe_vocab, merges, ignore_merges, what);
}

}  // namespace lmf

#include <algorithm>

#include "tokenizer/bpe.h"
#include "tokenizer/loader.h"

namespace lmf {

void TokenizerLoader::set_vocab(Tokenizer& t, const std::vector<std::pair<std::string, int32_t>>& model_vocab,
                                const std::vector<std::pair<int32_t, std::string>>& token_strings,
                                const std::vector<std::pair<std::string, std::string>>& merges,
                                const BpeOptions& opt, const std::string& what) {
  int32_t n = 0;
  for (const auto& e : model_vocab) n = std::max(n, e.second + 1);
  for (const auto& e : token_strings) n = std::max(n, e.first + 1);
  for (const auto& a : t.added_) n = std::max(n, a.id + 1);
  t.vocab_.assign(size_t(n), std::string());
  for (const auto& [s, id] : model_vocab) t.vocab_[size_t(id)] = s;
  for (const auto& [id, s] : token_strings) t.vocab_[size_t(id)] = s;
  t.id_to_piece_.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) t.id_to_piece_[size_t(i)] = t.dec_.piece(t.vocab_[size_t(i)]);
  t.merges_text_.clear();
  t.merges_text_.reserve(merges.size());
  for (const auto& [a, b] : merges) t.merges_text_.push_back(a + " " + b);
  t.bpe_.load(model_vocab, merges, opt, what);
}

}  // namespace lmf

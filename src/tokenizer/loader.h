// Internal: the loaders (load_hf.cpp, load_gguf.cpp) fill a Tokenizer's private fields
// through this friend, then call finish_setup().
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lmf {

struct TokenizerLoader {
  static std::unique_ptr<Tokenizer> make() { return std::unique_ptr<Tokenizer>(new Tokenizer()); }
  // Loads the BPE model from the model's own vocabulary (spelling, id) and fills vocab_ /
  // id_to_piece_ from it, with token_strings (id, string: what HF's id_to_token gives for added
  // tokens) taking precedence. dec_ must be set (pieces are its per-token bytes).
  static void set_vocab(Tokenizer& t, const std::vector<std::pair<std::string, int32_t>>& model_vocab,
                        const std::vector<std::pair<int32_t, std::string>>& token_strings,
                        const std::vector<std::pair<std::string, std::string>>& merges,
                        const BpeOptions& opt, const std::string& what);
  static Tokenizer& fields(Tokenizer& t) { return t; }
  static void finish(Tokenizer& t) { t.finish_setup(); }
};

}  // namespace lmf

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
  // Fills vocab_/id_to_piece_ from byte-level spelled tokens plus added tokens, loads BPE.
  static void set_vocab(Tokenizer& t, std::vector<std::string> spelled,
                        const std::vector<std::pair<std::string, std::string>>& merges,
                        bool ignore_merges, const std::string& what);
  static Tokenizer& fields(Tokenizer& t) { return t; }
  static void finish(Tokenizer& t) { t.finish_setup(); }
};

}  // namespace lmf

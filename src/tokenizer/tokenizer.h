// BPE tokenizer, loaded from a Hugging Face tokenizer.json or from llama.cpp's tokenizer.ggml.*
// GGUF metadata: byte-level BPE (GPT-2 family: Qwen2/Qwen3, Llama 3, SmolLM2) and BPE with
// byte_fallback (SentencePiece-converted Llama / Mistral). Token ids and decoded text match
// Hugging Face `tokenizers` exactly; see tests/unit/tokenizer_exact_test.cpp and
// scripts/tokenizer_differential.py.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/hf_parts.h"
#include "tokenizer/pretokenize.h"
#include "util/status.h"

namespace lmf {
namespace gguf {
class File;
class Writer;
}  // namespace gguf

// An added token (tokenizer.json "added_tokens", or GGUF control / user-defined tokens), as HF's
// AddedVocabulary matches it: in the raw text, or (normalized) as its normalized content in each
// normalized stretch of text between raw matches. `special` ones are matched only when
// encode(parse_special=true) (HF: encode_special_tokens=false) and skipped by decode(skip_special).
// lstrip / rstrip take the whitespace before / after a match into it; a single_word token
// matches only between non-word characters.
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool normalized = false;
  bool lstrip = false, rstrip = false, single_word = false;
};

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);
  // tokenizer_config_json may be empty (then no chat template, no bos/eos by name).
  static std::unique_ptr<Tokenizer> from_hf(const std::string& tokenizer_json,
                                            const std::string& tokenizer_config_json);
  // A tokenizer.json file, or a folder holding one; the tokenizer_config.json beside it is read
  // if present.
  static std::unique_ptr<Tokenizer> from_hf_path(const std::string& path);

  // Writes llama.cpp's tokenizer keys. pad_vocab_to > n_vocab() appends "[PAD<i>]" tokens of
  // type UNUSED so the vocabulary matches an embedding matrix with more rows.
  void to_gguf(gguf::Writer& w, int32_t pad_vocab_to = 0) const;

  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  std::string piece(int32_t id) const;  // raw bytes of one token (may be partial UTF-8)

  int32_t bos() const { return bos_; }  // -1 when the model has none
  int32_t eos() const { return eos_; }
  int32_t pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool is_eog(int32_t id) const;
  bool is_special(int32_t id) const;
  int32_t n_vocab() const { return int32_t(id_to_piece_.size()); }
  int32_t token_id(std::string_view token_text) const;  // byte-level spelling; -1 if absent
  const std::string& chat_template() const { return chat_template_; }
  const std::string& pre_name() const { return pre_name_; }  // llama.cpp's tokenizer.ggml.pre
  const std::vector<AddedToken>& added_tokens() const { return added_; }

 private:
  Tokenizer() = default;
  void finish_setup();  // builds lookup tables after the loaders filled the fields
  struct AddedMatcher;
  // Appends the ids of text with no added tokens of `m` matched yet: raw text is normalized,
  // then normalized added tokens are matched, the rest pre-tokenized and BPE-encoded.
  void encode_segment(std::string_view text, bool at_start, bool parse_special,
                      std::vector<int32_t>& out) const;
  void encode_plain(std::string_view normalized, bool at_start, std::vector<int32_t>& out) const;

  // Each id's token string as HF's id_to_token gives it (byte-level: "Ġhello"; added tokens:
  // their content, normalized if they are normalized ones); "" for ids with no token.
  std::vector<std::string> vocab_;
  std::vector<std::string> id_to_piece_;  // bytes per id: Decoder::piece of its token string
  std::vector<uint8_t> special_;          // 1 where the token string is a special token's content
  // Added tokens in HF's matching order (special ones first), one per pattern; flags are those
  // HF applies to a match of that id.
  std::vector<AddedToken> added_;
  std::vector<std::string> special_texts_;  // HF's special token set: contents, in any order
  BpeModel bpe_;
  std::vector<std::string> merges_text_;  // "left right", rank order (for to_gguf)
  PreTokenizer pre_;
  std::string pre_name_;
  Normalizer norm_;
  Decoder dec_;
  std::string no_gguf_;  // why to_gguf cannot write this tokenizer as llama.cpp's ("" = it can)
  int32_t bos_ = -1, eos_ = -1, pad_ = -1;
  bool add_bos_ = false;
  std::vector<int32_t> eog_;
  std::string chat_template_;
  std::shared_ptr<const AddedMatcher> raw_match_, norm_match_;
  friend struct TokenizerLoader;
};

// Turns a stream of token ids into text without ever cutting a UTF-8 sequence: bytes of an
// incomplete character are held until the next token completes it. Invalid bytes become
// U+FFFD, exactly as decode() would produce them.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t, bool skip_special = false)
      : tok_(t), skip_special_(skip_special) {}
  std::string push(int32_t id);
  std::string flush();  // whatever is pending, invalid tails replaced by U+FFFD

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace lmf

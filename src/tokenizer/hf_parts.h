// The parts of a Hugging Face tokenizer.json pipeline that lmfuse runs besides the
// pre-tokenizer and the BPE model: the normalizer and the decoder, as lists of steps with HF's
// semantics (tokenizers 0.23). load_hf.cpp builds them; anything else fails there by name.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lmf {

// tokenizer.json "normalizer": a Sequence of NFC, Prepend and Replace (string pattern) steps.
// HF normalizes each stretch of text between added tokens on its own.
class Normalizer {
 public:
  struct Step {
    enum class Kind { Nfc, Prepend, Replace } kind;
    std::string a, b;  // Prepend: a = text; Replace: a -> b
  };
  void add(Step s) { steps_.push_back(std::move(s)); }
  bool empty() const { return steps_.empty(); }
  bool only_nfc() const;  // every step is NFC (what llama.cpp's qwen2 GGUF implies)
  bool has(Step::Kind k) const;
  std::string apply(std::string_view text) const;  // valid UTF-8 in and out

 private:
  std::vector<Step> steps_;
};

// tokenizer.json "decoder": turns the tokens' strings into text. ByteLevel maps each token back
// to bytes (the whole token as UTF-8 when a character is outside GPT-2's map) and then replaces
// invalid UTF-8 with U+FFFD; ByteFallback turns runs of "<0xXX>" tokens into their bytes (one
// U+FFFD per byte when the run is not UTF-8); Fuse joins; Strip cuts up to `start` / `stop`
// copies of a character off each token's ends; Metaspace turns the replacement into ' ' and, in
// the first token (unless prepend_scheme is "never"), drops it; Replace replaces a string.
class Decoder {
 public:
  struct Step {
    enum class Kind { ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace } kind;
    std::string a, b;  // Strip: a = the character; Replace: a -> b; Metaspace: a = replacement
    size_t start = 0, stop = 0;  // Strip
    bool strip_first = true;     // Metaspace: prepend_scheme != never
  };
  void add(Step s) {
    steps_.push_back(std::move(s));
    set_ = true;
  }
  void set_none() { set_ = false, steps_.clear(); }
  bool is_byte_level_only() const;  // the fast path: concatenated bytes, then lossy UTF-8
  bool is_none() const { return !set_; }
  bool has(Step::Kind k) const;
  std::string decode(std::vector<std::string> tokens) const;
  // One token's bytes for streaming and `piece()`: the per-token part of the steps (ByteLevel's
  // byte map, "<0xXX>" as its byte, Replace and Metaspace's replacement), without the steps
  // that look at neighbours (Strip, the first token of Metaspace).
  std::string piece(const std::string& token) const;

 private:
  std::vector<Step> steps_;
  bool set_ = false;  // tokenizer.json "decoder": null joins the tokens with ' '
};

namespace hf {
// Rust's char::is_whitespace (Unicode White_Space), what lstrip / rstrip strip.
bool is_white_space(uint32_t cp);
// The Rust regex crate's \w (Alphabetic, marks, Nd, Pc, Join_Control), what single_word checks;
// without utf8proc, ASCII only.
bool is_word_char(uint32_t cp);
// "<0xXX>" as Rust's u8::from_str_radix reads the two characters (a '+' sign allowed); -1 if not.
int byte_token(std::string_view token);
}  // namespace hf

}  // namespace lmf

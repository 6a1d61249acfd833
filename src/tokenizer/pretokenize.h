// Pre-tokenization: split normalized text into the pieces that BPE encodes independently.
// A PreTokenizer is a sequence of steps, each applied to every piece of the step before:
// regex splits with HF's "Isolated" behaviour (every match is a piece and so is every gap
// between matches), and the two steps that rewrite a piece first: ByteLevel's add_prefix_space
// and Metaspace (spaces become the replacement character, which may be prepended, then an
// optional split before each replacement character).
// Regexes run on PCRE2 with UTF + UCP (Unicode \s, \p{L}, \p{N}) and are JIT-compiled.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lmf {

namespace pretok {
// Qwen2 / Qwen2.5 / Qwen3 (tokenizer.json Split pattern; llama.cpp pre "qwen2").
extern const char* const kQwen2;
// Llama 3 / 3.1 / 3.2 (llama.cpp pre "llama-bpe").
extern const char* const kLlama3;
// GPT-2, the ByteLevel pre-tokenizer's own regex when use_regex=true (llama.cpp pre "gpt2").
extern const char* const kGpt2;
// HF Digits(individual_digits=true): every numeric code point on its own.
extern const char* const kDigit;
}  // namespace pretok

class Regex;  // compiled PCRE2 pattern (pretokenize.cpp)

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Appends one split step; throws lmf::Error naming the pattern when PCRE2 rejects it.
  void add_split(const std::string& pattern);
  // HF ByteLevel(add_prefix_space=true): a piece that does not start with ' ' gets one.
  void add_prefix_space();
  // HF Metaspace: ' ' -> replacement; the replacement is prepended (unless the piece starts with
  // it) always, or only to a piece at the start of the input text (prepend "first"), or never;
  // with split, each replacement character starts a new piece (MergedWithNext).
  enum class Prepend { Always, First, Never };
  void add_metaspace(const std::string& replacement, Prepend prepend, bool split);
  // False once a step is not a plain regex split (then no llama.cpp name describes it).
  // The steps for one of llama.cpp's tokenizer.ggml.pre names; false if the name is unknown.
  bool set_named(const std::string& pre_name);
  // The llama.cpp name whose steps equal ours, or "" when none does.
  std::string guess_name() const;
  const std::vector<std::string>& patterns() const { return patterns_; }
  bool empty() const { return steps_.empty(); }

  bool only_regex() const { return only_regex_; }
  // Calls f(piece) for every piece of text (valid UTF-8), in order. Pieces view into text, or
  // into a rewritten copy that lives while f runs. at_start: text starts the input (for
  // Metaspace's prepend "first").
  void split(std::string_view text, const std::function<void(std::string_view)>& f,
             bool at_start = true) const;
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Step {
    std::unique_ptr<Regex> re;  // split on this (after the rewrite below, if any)
    enum class Rewrite { None, PrefixSpace, Metaspace } rewrite = Rewrite::None;
    std::string replacement;    // Metaspace
    Prepend prepend = Prepend::Never;
  };
  void split_from(size_t step, std::string_view text, bool at_start,
                  const std::function<void(std::string_view)>& f) const;
  std::vector<Step> steps_;
  std::vector<std::string> patterns_;
  bool only_regex_ = true;
};

}  // namespace lmf

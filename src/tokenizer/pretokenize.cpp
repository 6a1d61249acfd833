#include "tokenizer/pretokenize.h"

#include "util/status.h"

#ifdef LMFUSE_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace lmf {

namespace pretok {
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kDigit = R"(\p{N})";
}  // namespace pretok

namespace {
struct NamedSteps {
  const char* name;
  std::vector<const char*> patterns;
};
// llama.cpp's pre-tokenizer names for the families we support. The first name of a pattern
// list is the one guess_name() reports.
const std::vector<NamedSteps>& named_steps() {
  static const std::vector<NamedSteps> t = {
      {"qwen2", {pretok::kQwen2}},
      {"llama-bpe", {pretok::kLlama3}},
      {"llama3", {pretok::kLlama3}},
      {"smollm", {pretok::kDigit, pretok::kGpt2}},
      {"starcoder", {pretok::kDigit, pretok::kGpt2}},
      {"gpt2", {pretok::kGpt2}},
      {"default", {pretok::kGpt2}},
  };
  return t;
}
}  // namespace

#ifdef LMFUSE_HAVE_PCRE2
class Regex {
 public:
  explicit Regex(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      LMF_FAIL("tokenizer: cannot compile pre-tokenizer regex '", pattern, "' at offset ", off,
               ": ", reinterpret_cast<const char*>(msg));
    }
    // JIT is a large speed-up; without it pcre2_match interprets (slower, same result).
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code_); }

  // Calls f(start, end, is_match) over text: matches and the gaps between them.
  template <class F>
  void scan(std::string_view text, F&& f) const {
    struct Ctx {  // per thread: match data and a JIT stack big enough for long runs
      pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
      pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
      pcre2_match_context* mc = pcre2_match_context_create(nullptr);
      Ctx() { pcre2_jit_stack_assign(mc, nullptr, stack); }
      ~Ctx() {
        pcre2_match_context_free(mc);
        pcre2_jit_stack_free(stack);
        pcre2_match_data_free(md);
      }
    };
    thread_local Ctx ctx;
    const auto* subj = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, last = 0;
    while (pos <= text.size()) {
      int rc = jit_ ? pcre2_jit_match(code_, subj, text.size(), pos, 0, ctx.md, ctx.mc)
                    : pcre2_match(code_, subj, text.size(), pos, PCRE2_NO_UTF_CHECK, ctx.md, ctx.mc);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        LMF_FAIL("tokenizer: regex match failed: ", reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ctx.md);
      size_t s = ov[0], e = ov[1];
      if (s > last) f(last, s, false);
      if (e > s) {
        f(s, e, true);
        pos = last = e;
      } else {  // empty match: step over one code point
        last = s;
        pos = s + 1;
        while (pos < text.size() && (uint8_t(text[pos]) & 0xC0) == 0x80) ++pos;
        if (s >= text.size()) break;
      }
    }
    if (last < text.size()) f(last, text.size(), false);
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};
#else
class Regex {
 public:
  explicit Regex(const std::string& pattern) {
    LMF_FAIL("tokenizer: lmfuse was built without PCRE2; cannot use pre-tokenizer regex '",
             pattern, "'");
  }
  template <class F>
  void scan(std::string_view, F&&) const {}
};
#endif

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::add_split(const std::string& pattern) {
  steps_.push_back(Step{std::make_unique<Regex>(pattern)});
  patterns_.push_back(pattern);
}

void PreTokenizer::add_prefix_space() {
  Step s;
  s.rewrite = Step::Rewrite::PrefixSpace;
  steps_.push_back(std::move(s));
  patterns_.push_back("<prefix space>");
  only_regex_ = false;
}

void PreTokenizer::add_metaspace(const std::string& replacement, Prepend prepend, bool split) {
  Step s;
  s.rewrite = Step::Rewrite::Metaspace;
  s.replacement = replacement;
  s.prepend = prepend;
  // MergedWithNext on the replacement: a run without it, or it followed by such a run.
  if (split) s.re = std::make_unique<Regex>("(?s)(?:\\Q" + replacement + "\\E)?(?:(?!\\Q" + replacement + "\\E).)*");
  steps_.push_back(std::move(s));
  patterns_.push_back("<metaspace " + replacement + ">");
  only_regex_ = false;
}

bool PreTokenizer::set_named(const std::string& pre_name) {
  for (const auto& n : named_steps()) {
    if (pre_name != n.name) continue;
    steps_.clear();
    patterns_.clear();
    only_regex_ = true;
    for (const char* p : n.patterns) add_split(p);
    return true;
  }
  return false;
}

std::string PreTokenizer::guess_name() const {
  for (const auto& n : named_steps()) {
    if (n.patterns.size() != patterns_.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < patterns_.size(); ++i) eq = eq && patterns_[i] == n.patterns[i];
    if (eq) return n.name;
  }
  return "";
}

void PreTokenizer::split_from(size_t step, std::string_view text, bool at_start,
                              const std::function<void(std::string_view)>& f) const {
  if (text.empty()) return;
  if (step == steps_.size()) {
    f(text);
    return;
  }
  const Step& st = steps_[step];
  std::string rewritten;
  if (st.rewrite == Step::Rewrite::PrefixSpace) {
    if (text[0] != ' ') {
      rewritten = " ";
      rewritten += text;
      text = rewritten;
    }
  } else if (st.rewrite == Step::Rewrite::Metaspace) {
    for (char c : text) {
      if (c == ' ') rewritten += st.replacement;
      else rewritten += c;
    }
    const bool add = st.prepend == Prepend::Always || (st.prepend == Prepend::First && at_start);
    if (add && !std::string_view(rewritten).starts_with(st.replacement)) rewritten.insert(0, st.replacement);
    text = rewritten;
  }
  if (!st.re) {
    split_from(step + 1, text, at_start, f);
    return;
  }
  st.re->scan(text, [&](size_t s, size_t e, bool) {
    split_from(step + 1, text.substr(s, e - s), at_start && s == 0, f);
  });
}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& f,
                         bool at_start) const {
  split_from(0, text, at_start, f);
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string> out;
  split(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

}  // namespace lmf

#include "tokenizer/hf_parts.h"

#include "tokenizer/bpe.h"
#include "tokenizer/utf8.h"
#include "util/status.h"

#ifdef LMFUSE_HAVE_UTF8PROC
#include <utf8proc.h>
#endif

namespace lmf {

namespace {
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size())
    out.append(s, at, hit - at).append(to);
  if (at == 0) return;
  out.append(s, at, std::string::npos);
  s = std::move(out);
}

// Code points of a valid UTF-8 string, as (offset, length).
template <class F>
void each_char(std::string_view s, F&& f) {
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    utf8::decode_at(s, i, &len);
    f(i, len);
    i += len;
  }
}
}  // namespace

bool Normalizer::only_nfc() const {
  for (const auto& s : steps_)
    if (s.kind != Step::Kind::Nfc) return false;
  return true;
}

bool Normalizer::has(Step::Kind k) const {
  for (const auto& s : steps_)
    if (s.kind == k) return true;
  return false;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const auto& st : steps_) {
    switch (st.kind) {
      case Step::Kind::Nfc: s = utf8::nfc(s); break;
      case Step::Kind::Prepend:
        if (!s.empty()) s.insert(0, st.a);  // HF prepends to non-empty text only
        break;
      case Step::Kind::Replace: replace_all(s, st.a, st.b); break;
    }
  }
  return s;
}

bool Decoder::is_byte_level_only() const {
  return set_ && steps_.size() == 1 && steps_[0].kind == Step::Kind::ByteLevel;
}

bool Decoder::has(Step::Kind k) const {
  for (const auto& s : steps_)
    if (s.kind == k) return true;
  return false;
}

std::string Decoder::decode(std::vector<std::string> toks) const {
  if (!set_) {
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) out += (i ? " " : "") + toks[i];
    return out;
  }
  for (const auto& st : steps_) {
    switch (st.kind) {
      case Step::Kind::ByteLevel: {
        std::string bytes;
        for (const auto& t : toks) {
          std::string b;
          bytes += ByteLevel::to_bytes(t, b) ? b : t;  // a character outside the map: all of t
        }
        toks.assign(1, utf8::sanitize(bytes));
        break;
      }
      case Step::Kind::ByteFallback: {
        std::vector<std::string> out;
        std::string run;
        auto flush = [&] {
          if (run.empty()) return;
          if (utf8::is_valid(run)) out.push_back(run);
          else out.insert(out.end(), run.size(), "\xEF\xBF\xBD");
          run.clear();
        };
        for (auto& t : toks) {
          int b = hf::byte_token(t);
          if (b >= 0) {
            run += char(b);
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        toks = std::move(out);
        break;
      }
      case Step::Kind::Fuse: {
        std::string all;
        for (const auto& t : toks) all += t;
        toks.assign(1, all);
        break;
      }
      case Step::Kind::Strip:
        for (auto& t : toks) {
          std::vector<std::pair<size_t, size_t>> cs;
          each_char(t, [&](size_t at, size_t len) { cs.emplace_back(at, len); });
          auto is_c = [&](size_t i) { return t.compare(cs[i].first, cs[i].second, st.a) == 0; };
          size_t a = 0, z = 0;
          while (a < st.start && a < cs.size() && is_c(a)) ++a;
          while (z < st.stop && z < cs.size() && is_c(cs.size() - 1 - z)) ++z;
          if (a + z > cs.size())  // HF panics here (slice start past its end)
            LMF_FAIL("tokenizer: decoder Strip cuts token '", t, "' past its end");
          size_t from = a < cs.size() ? cs[a].first : t.size();
          size_t to = z ? cs[cs.size() - z].first : t.size();
          t = t.substr(from, to - from);
        }
        break;
      case Step::Kind::Replace:
        for (auto& t : toks) replace_all(t, st.a, st.b);
        break;
      case Step::Kind::Metaspace:
        for (size_t i = 0; i < toks.size(); ++i) replace_all(toks[i], st.a, i == 0 && st.strip_first ? "" : " ");
        break;
    }
  }
  std::string out;
  for (const auto& t : toks) out += t;
  return out;
}

std::string Decoder::piece(const std::string& token) const {
  std::string t = token;
  for (const auto& st : steps_) {
    switch (st.kind) {
      case Step::Kind::ByteLevel: {
        std::string b;
        if (ByteLevel::to_bytes(t, b)) t = std::move(b);
        return t;  // bytes from here on
      }
      case Step::Kind::ByteFallback: {
        int b = hf::byte_token(t);
        if (b >= 0) return std::string(1, char(b));
        break;
      }
      case Step::Kind::Replace: replace_all(t, st.a, st.b); break;
      case Step::Kind::Metaspace: replace_all(t, st.a, " "); break;
      case Step::Kind::Fuse:
      case Step::Kind::Strip: break;
    }
  }
  return t;
}

namespace hf {

bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_word_char(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
  // Other_Alphabetic outside the mark categories: the circled and squared Latin letters.
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
      (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
    return true;
#ifdef LMFUSE_HAVE_UTF8PROC
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
#else
  return false;
#endif
}

int byte_token(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int h = hex(t[3]), l = hex(t[4]);
  if (t[3] == '+' && l >= 0) return l;
  return h >= 0 && l >= 0 ? h * 16 + l : -1;
}

}  // namespace hf
}  // namespace lmf

#include "tokenizer/utf8.h"

#include <cstdio>
#include <cstdlib>

#include "util/status.h"
#ifdef LMFUSE_HAVE_UTF8PROC
#include <utf8proc.h>
#endif

namespace lmf::utf8 {

size_t seq_len(std::string_view s, size_t i, size_t* bad_len, bool* truncated) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  uint8_t b = p[i];
  *truncated = false;
  if (b < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 3;
    if (b == 0xE0) lo = 0xA0;  // no overlongs
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    *bad_len = 1;
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= n) {
      *bad_len = k;
      *truncated = true;
      return 0;
    }
    uint8_t c = p[i + k];
    bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) {
      *bad_len = k;
      return 0;
    }
  }
  return need;
}

size_t first_invalid(std::string_view s) {
  size_t i = 0, bad;
  bool tr;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) { ++i; continue; }
    size_t l = seq_len(s, i, &bad, &tr);
    if (!l) return i;
    i += l;
  }
  return std::string_view::npos;
}

bool is_valid(std::string_view s) { return first_invalid(s) == std::string_view::npos; }

std::string invalid_message(std::string_view s, std::string_view what) {
  const size_t at = first_invalid(s);
  if (at == std::string_view::npos) return {};
  char b[8];
  std::snprintf(b, sizeof b, "0x%02X", unsigned(uint8_t(s[at])));
  return std::string(what) + " is not valid UTF-8 (byte " + b + " at offset " + std::to_string(at) + ")";
}

std::string sanitize(std::string_view s) {
  if (is_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0, bad;
  bool tr;
  while (i < s.size()) {
    size_t l = seq_len(s, i, &bad, &tr);
    if (l) {
      out.append(s.substr(i, l));
      i += l;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

uint32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + i;
  if (p[0] < 0x80) { *len = 1; return p[0]; }
  if (p[0] < 0xE0) { *len = 2; return (uint32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F); }
  if (p[0] < 0xF0) {
    *len = 3;
    return (uint32_t(p[0] & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  *len = 4;
  return (uint32_t(p[0] & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) |
         (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string nfc(std::string_view s) {
  bool ascii = true;
  for (char c : s)
    if (uint8_t(c) >= 0x80) { ascii = false; break; }
  if (ascii) return std::string(s);
#ifdef LMFUSE_HAVE_UTF8PROC
  utf8proc_uint8_t* out = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                        utf8proc_ssize_t(s.size()), &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) LMF_FAIL("tokenizer: NFC normalization failed: ", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<char*>(out), size_t(n));
  std::free(out);
  return r;
#else
  LMF_FAIL("tokenizer: this tokenizer asks for NFC normalization, but lmfuse was built without utf8proc");
#endif
}

Unit unit_at(std::string_view s, size_t i) {
  size_t bad = 0, len = 0;
  bool cut = false;
  if (seq_len(s, i, &bad, &cut) == 0) return {bad, kNotUtf8};
  const uint32_t cp = decode_at(s, i, &len);
  return {len, cp};
}

std::string change_case(std::string_view s, Case c) {
  std::string r;
  r.reserve(s.size());
  bool prev_cased = false;  // title(): the previous character is a cased letter
  for (size_t i = 0; i < s.size();) {
    const auto [len, cp] = unit_at(s, i);
    if (cp == kNotUtf8) {  // not UTF-8: kept, and not a cased letter
      r.append(s.substr(i, len));
      i += len;
      prev_cased = false;
      continue;
    }
    const bool first = i == 0;
    i += len;
    const bool titled = (c == Case::Title && !prev_cased) || (c == Case::Capitalize && first);
    if (cp == 0xdf && (c == Case::Upper || titled)) {  // sharp s: Python's full mapping
      r += c == Case::Upper ? "SS" : "Ss";
      prev_cased = true;
      continue;
    }
    uint32_t out = cp;
    bool cased = false;
    if (cp < 0x80) {
      const bool up = cp >= 'A' && cp <= 'Z', lo = cp >= 'a' && cp <= 'z';
      cased = up || lo;
      const bool to_up = c == Case::Upper || titled;
      if (to_up && lo) out = cp - 32;
      if (!to_up && up) out = cp + 32;
    } else {
#ifdef LMFUSE_HAVE_UTF8PROC
      const auto u = utf8proc_int32_t(cp);
      const auto cat = utf8proc_category(u);
      cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
              utf8proc_toupper(u) != u || utf8proc_tolower(u) != u;
      out = uint32_t(c == Case::Upper ? utf8proc_toupper(u) : titled ? utf8proc_totitle(u) : utf8proc_tolower(u));
#else
      LMF_FAIL("chat template: changing the case of non-ASCII text needs utf8proc, which this build lacks");
#endif
    }
    append(r, out);
    prev_cased = cased;
  }
  return r;
}

bool is_space(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20);
#ifdef LMFUSE_HAVE_UTF8PROC
  if (cp > 0x10ffff) return false;
  const utf8proc_property_t* p = utf8proc_get_property(utf8proc_int32_t(cp));
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
#else
  return false;
#endif
}

bool is_printable(uint32_t cp) {
  if (cp < 0x80) return cp >= 0x20 && cp < 0x7f;
#ifdef LMFUSE_HAVE_UTF8PROC
  if (cp > 0x10ffff) return false;
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
#else
  return true;
#endif
}

}  // namespace lmf::utf8

// UTF-8 helpers shared by the tokenizer: validation with the Unicode "maximal subpart"
// replacement (what Python's bytes.decode('utf-8', 'replace') and Rust's from_utf8_lossy do),
// code point iteration and NFC normalization.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace lmf::utf8 {

// Length of the well-formed sequence starting at s[i] (1..4), or 0 if s[i..] starts with an
// ill-formed sequence; then *bad_len is the length of its maximal subpart (bytes replaced by
// one U+FFFD), and *truncated tells whether it was only cut short by the end of s.
size_t seq_len(std::string_view s, size_t i, size_t* bad_len, bool* truncated);

// Replaces every ill-formed subsequence with U+FFFD. Returns s unchanged when it is valid.
std::string sanitize(std::string_view s);
bool is_valid(std::string_view s);
// Offset of the first byte of the first ill-formed sequence, or npos when s is valid.
size_t first_invalid(std::string_view s);
// "" when s is valid, else "WHAT is not valid UTF-8 (byte 0xNN at offset K)": the one-line error
// for text that must be UTF-8 (a prompt), where replacing bytes would answer another text.
std::string invalid_message(std::string_view s, std::string_view what);

// Decodes one code point from a valid sequence (caller guarantees validity).
uint32_t decode_at(std::string_view s, size_t i, size_t* len);
void append(std::string& out, uint32_t cp);

// Unicode NFC of valid UTF-8 (utf8proc). Fast path: ASCII-only text is returned as is.
std::string nfc(std::string_view s);

// Python's str.upper(), lower(), title() and capitalize() with Unicode's one-to-one case mappings
// (utf8proc), and the German sharp s's one-to-many "SS" / "Ss"; the other one-to-many mappings of
// SpecialCasing (ligatures, a few Greek and Armenian letters) keep utf8proc's one-to-one result.
// title(): a cased letter after a cased letter is lowercased, others titlecased. Bytes that are
// not UTF-8 are kept. Without utf8proc, ASCII text only (else an error).
enum class Case { Upper, Lower, Title, Capitalize };
std::string change_case(std::string_view s, Case c);
// Python's str.isspace() of one code point: general category Zs, or bidirectional class WS, B or
// S (utf8proc); without utf8proc, the ASCII ones only.
bool is_space(uint32_t cp);
// Python's str.isprintable() of one code point: not in the categories Cc, Cf, Cs, Co, Cn, Zl, Zp
// or Zs (the ASCII space excepted) (utf8proc); without utf8proc every non-ASCII one is printable.
bool is_printable(uint32_t cp);
// The code point of s starting at byte i, with its length: an ill-formed sequence is one unit
// (its maximal subpart) with cp = kNotUtf8 (never a space, never equal to a code point). Loops
// step through s with it, holding nothing per character.
inline constexpr uint32_t kNotUtf8 = 0xffffffffu;
struct Unit {
  size_t len;
  uint32_t cp;
};
Unit unit_at(std::string_view s, size_t i);

}  // namespace lmf::utf8

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

}  // namespace lmf::utf8

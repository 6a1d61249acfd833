// Robustness: arbitrary bytes never crash encode(), and decoding is lossless up to the
// documented transformations (invalid UTF-8 -> U+FFFD, NFC for Qwen); streaming decode equals
// one-shot decode for any id sequence; concurrent encode() gives the same ids.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <thread>

#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace lmf {
namespace {

// Random strings biased toward UTF-8 edge cases: lead bytes, continuation bytes, ASCII
// punctuation/space, pieces of special tokens.
std::string random_text(std::mt19937& rng, size_t n) {
  static const std::vector<std::string> atoms = {
      " ", "  ", "\n", "\r\n", "\t", "a", "Z", "'s", "'LL", "1", "23", "é", "e\xCC\x81", "中", "😀",
      "\xF0\x9F", "\x98\x80", "\xE4", "\xB8\xAD", "\xFF", "\xC0", "\xED\xA0\x80", "<|im_end|>",
      "<|im_", "<think>", "!", "...", "\xC2\xA0", "\xE2\x80\x8D"};
  std::string s;
  std::uniform_int_distribution<size_t> pick(0, atoms.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255), coin(0, 9);
  while (s.size() < n) s += coin(rng) == 0 ? std::string(1, char(byte(rng))) : atoms[pick(rng)];
  return s;
}

TEST(TokenizerRobust, RandomBytesRoundTrip) {
  const Tokenizer& t = test::qwen3();
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    std::string s = random_text(rng, size_t(1 + i % 97));
    std::vector<int32_t> ids;
    ASSERT_NO_THROW(ids = t.encode(s, false, false));
    // With parse_special=false, special-token text is plain text, so decoding restores it.
    EXPECT_EQ(t.decode(ids), utf8::nfc(utf8::sanitize(s)));
    auto ids2 = t.encode(s, false, true);
    EXPECT_EQ(t.decode(ids2), utf8::nfc(utf8::sanitize(s)));
  }
}

TEST(TokenizerRobust, StreamDecoderEqualsDecodeOnRandomIds) {
  const Tokenizer& t = test::qwen3();
  std::mt19937 rng(99);
  std::uniform_int_distribution<int32_t> id(0, t.n_vocab() - 1);
  for (int i = 0; i < 200; ++i) {
    std::vector<int32_t> ids(size_t(1 + i % 13));
    for (auto& x : ids) x = id(rng);
    // Byte tokens (single bytes >= 0x80) make broken sequences likely.
    if (i % 2) ids.push_back(t.token_id(ByteLevel::to_unicode(uint8_t(0xE4 + i % 8))));
    for (bool skip : {false, true}) {
      StreamDecoder sd(t, skip);
      std::string s;
      for (int32_t x : ids) {
        std::string part = sd.push(x);
        EXPECT_TRUE(utf8::is_valid(part));
        s += part;
      }
      s += sd.flush();
      EXPECT_EQ(s, t.decode(ids, skip));
    }
  }
}

// first_invalid: the valid prefix ends exactly there (sanitize keeps it byte for byte and
// replaces what follows); invalid_message names that byte and offset, and is empty iff valid.
TEST(TokenizerRobust, FirstInvalidByte) {
  std::mt19937 rng(11);
  int invalid = 0;
  for (int it = 0; it < 3000; ++it) {
    const std::string s = random_text(rng, 1 + it % 40);
    const size_t at = utf8::first_invalid(s);
    const std::string msg = utf8::invalid_message(s, "x");
    ASSERT_EQ(at == std::string::npos, utf8::is_valid(s));
    ASSERT_EQ(msg.empty(), utf8::is_valid(s));
    if (at == std::string::npos) continue;
    ++invalid;
    ASSERT_TRUE(utf8::is_valid(s.substr(0, at)));
    const std::string clean = utf8::sanitize(s);
    ASSERT_EQ(clean.compare(0, at, s, 0, at), 0);
    ASSERT_EQ(clean.compare(at, 3, "\xEF\xBF\xBD"), 0) << "U+FFFD where the first bad byte was";
    char b[8];
    std::snprintf(b, sizeof b, "0x%02X", unsigned(uint8_t(s[at])));
    ASSERT_EQ(msg, "x is not valid UTF-8 (byte " + std::string(b) + " at offset " + std::to_string(at) + ")");
  }
  EXPECT_GT(invalid, 500);
  EXPECT_EQ(utf8::first_invalid("\xED\xA0\x80"), 0u);   // a surrogate
  EXPECT_EQ(utf8::first_invalid("ab\xF0\x9F"), 2u);       // cut short at the end
  EXPECT_EQ(utf8::first_invalid("\xC0\xAF"), 0u);         // overlong
  EXPECT_EQ(utf8::first_invalid("é中😀"), std::string::npos);
}

TEST(TokenizerRobust, StreamDecoderHoldsSplitCharacters) {
  const Tokenizer& t = test::qwen3();
  // "😀" is F0 9F 98 80: feed it as four single-byte tokens.
  StreamDecoder sd(t);
  std::string emoji = "\xF0\x9F\x98\x80";
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(sd.push(t.token_id(ByteLevel::to_unicode(uint8_t(emoji[k])))), "");
  EXPECT_EQ(sd.push(t.token_id(ByteLevel::to_unicode(uint8_t(emoji[3])))), emoji);
  EXPECT_EQ(sd.push(t.token_id(ByteLevel::to_unicode(0xE4))), "");
  EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");  // an unfinished character at the end is replaced
}

TEST(TokenizerRobust, ConcurrentEncodeIsConsistent) {
  const Tokenizer& t = test::qwen3();
  auto refs = test::load_json("qwen3_refs.json");
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    th.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep)
        for (const auto& c : refs["cases"])
          if (t.encode(c["text"].get<std::string>(), false, true) != c["ids"].get<std::vector<int32_t>>()) ++bad;
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace lmf

// tokenizer.json files that HF `tokenizers` 0.23 loads (issue 55): an added token that is also a
// merge result, HF's added-token ids, merges as lists, byte_fallback (SentencePiece-style) BPE.
// The expected ids and text are what tokenizers 0.23.3 gives for the same files; the random
// version of these checks is scripts/tokenizer_differential.py.
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "format/gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace lmf {
namespace {
using json = nlohmann::json;

json added(const std::string& content, int id, bool special) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

json byte_level(json vocab, json merges, json added_tokens) {
  json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return {{"version", "1.0"}, {"added_tokens", added_tokens}, {"normalizer", nullptr}, {"pre_tokenizer", bl},
          {"decoder", bl}, {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::vector<int32_t> enc(const Tokenizer& t, const std::string& s, bool special = true) {
  return t.encode(s, false, special);
}

TEST(TokenizerHfLoad, AddedTokenThatIsAMergeResultLoads) {
  // "ab" is a merge result and an added token (special, with a stale id): HF gives it the
  // vocabulary's id 2; the merge still produces it inside words.
  json j = byte_level({{"a", 0}, {"b", 1}, {"ab", 2}, {"c", 3}, {"Ġ", 4}}, {"a b"}, {added("ab", 7, true)});
  auto t = Tokenizer::from_hf(j.dump(), "");
  EXPECT_EQ(t->n_vocab(), 5);
  EXPECT_EQ(enc(*t, "cab c"), (std::vector<int32_t>{3, 2, 4, 3}));
  EXPECT_EQ(enc(*t, "ab", false), (std::vector<int32_t>{2}));  // BPE's merge, not the match
  EXPECT_EQ(t->decode(std::vector<int32_t>{3, 2}, true), "c");  // skipped: "ab" is special
}

TEST(TokenizerHfLoad, AddedTokenIdsAreHfsNotTheFilesIds) {
  json j = byte_level({{"a", 0}, {"b", 1}, {"ab", 2}, {"c", 3}}, json::array({json::array({"a", "b"})}),
                      {added("zz", 100, false), added("yy", 50, false)});
  auto t = Tokenizer::from_hf(j.dump(), "");
  EXPECT_EQ(enc(*t, "zzyy"), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(t->token_id("yy"), 5);
}

TEST(TokenizerHfLoad, MergeResultOnlyInAddedTokensIsRefused) {
  // HF refuses this file too (it panics): the merge result must be in model.vocab.
  json j = byte_level({{"a", 0}, {"b", 1}}, {"a b"}, {added("ab", 2, false)});
  try {
    Tokenizer::from_hf(j.dump(), "");
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("merge #0 'a b' uses 'ab'"), std::string::npos) << e.what();
  }
}

TEST(TokenizerHfLoad, DuplicateMergeTakesItsLastRank) {
  json j = byte_level({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}}, {"a b", "b c", "a b"}, json::array());
  EXPECT_EQ(enc(*Tokenizer::from_hf(j.dump(), ""), "abc"), (std::vector<int32_t>{0, 4}));
}

// Llama 2 style: Prepend + Replace normalizer, byte_fallback, the Replace/ByteFallback/Fuse/Strip
// decoder; ids from tokenizers 0.23.3 (scripts/tokenizer_differential.py's sp_case layout).
TEST(TokenizerHfLoad, SentencePieceStyleByteFallback) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int n = 259;
  for (const char* s : {"\u2581", "a", "b", "\u2581a", "ab", "\u2581ab", "X"}) vocab[s] = n++;
  json j = {{"version", "1.0"},
            {"added_tokens", {added("<unk>", 0, true), added("<s>", 1, true), added("</s>", 2, true),
                              added("X", 0, false), added("<tag>", 0, true)}},
            {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                            {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
            {"pre_tokenizer", nullptr},
            {"decoder", {{"type", "Sequence"}, {"decoders", {
                {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
            {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
                       {"vocab", vocab}, {"merges", {"\u2581 a", "a b", "\u2581a b"}}}}};
  auto t = Tokenizer::from_hf(j.dump(), "");
  EXPECT_EQ(enc(*t, "ab ab"), (std::vector<int32_t>{264, 264}));
  EXPECT_EQ(enc(*t, "ab<tag> ab"), (std::vector<int32_t>{264, 266, 259, 264}));
  EXPECT_EQ(enc(*t, "a\u00e9\u4e2db"), (std::vector<int32_t>{262, 198, 172, 231, 187, 176, 261}));
  EXPECT_EQ(t->decode(std::vector<int32_t>{262, 198, 172, 231, 187, 176, 261}), "a\u00e9\u4e2db");
  EXPECT_EQ(t->decode(std::vector<int32_t>{231, 260, 231, 187, 176}), "\xEF\xBF\xBD" "a\u4e2d");
  EXPECT_EQ(t->decode(std::vector<int32_t>{259, 259, 260}), " a");
  // llama.cpp's gpt2 GGUF model cannot hold it: to_gguf must refuse rather than change ids.
  gguf::Writer w;
  EXPECT_THROW(t->to_gguf(w), Error);
}

TEST(TokenizerHfLoad, UnsupportedPartsAreNamed) {
  json j = byte_level({{"a", 0}}, json::array(), json::array());
  j["normalizer"] = {{"type", "Lowercase"}};
  try {
    Tokenizer::from_hf(j.dump(), "");
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported normalizer 'Lowercase'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmf

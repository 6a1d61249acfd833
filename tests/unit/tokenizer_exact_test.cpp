// Token ids must equal Hugging Face `tokenizers` on tests/data/tokenizer/corpus.json
// (references made by scripts/make_tokenizer_refs.py).
#include <gtest/gtest.h>

#include "format/gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace lmf {
namespace {

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += char(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

// Checks every reference case of refs against t: ids with and without special-token parsing,
// decode, skip-special decode, streaming decode, invalid UTF-8 input.
void check_refs(const Tokenizer& t, const nlohmann::json& refs, bool nfc) {
  int n = 0;
  for (const auto& c : refs["cases"]) {
    std::string text = c["text"];
    SCOPED_TRACE("text: " + text);
    auto ids = t.encode(text, false, true);
    EXPECT_EQ(ids, ids_of(c["ids"]));
    EXPECT_EQ(t.encode(text, false, false), ids_of(c["ids_no_special"]));
    std::string dec = t.decode(ids);
    EXPECT_EQ(dec, c["decoded"].get<std::string>());
    EXPECT_EQ(dec, nfc ? utf8::nfc(text) : text);  // round trip (modulo the normalizer)
    EXPECT_EQ(t.decode(ids, true), c["decoded_skip_special"].get<std::string>());
    StreamDecoder sd(t);
    std::string streamed;
    for (int32_t id : ids) {
      std::string part = sd.push(id);
      EXPECT_TRUE(utf8::is_valid(part));
      streamed += part;
    }
    streamed += sd.flush();
    EXPECT_EQ(streamed, dec);
    ++n;
  }
  EXPECT_GT(n, 30);
  for (const auto& c : refs["invalid"]) {
    std::string raw = unhex(c["hex"]);
    SCOPED_TRACE("hex: " + c["hex"].get<std::string>());
    EXPECT_EQ(t.encode(raw, false, true), ids_of(c["ids"]));
  }
}

TEST(TokenizerExact, Qwen3MatchesHfTokenizers) {
  ASSERT_FALSE(test::qwen3_dir().empty()) << "models/qwen3-tokenizer not found (CMake unpacks it from tests/data/tokenizer)";
  const Tokenizer& t = test::qwen3();
  EXPECT_EQ(t.n_vocab(), 151669);
  EXPECT_EQ(t.pre_name(), "qwen2");
  check_refs(t, test::load_json("qwen3_refs.json"), true);
}

TEST(TokenizerExact, Qwen3SpecialIds) {
  const Tokenizer& t = test::qwen3();
  EXPECT_EQ(t.eos(), 151645);  // <|im_end|>
  EXPECT_EQ(t.bos(), -1);
  EXPECT_FALSE(t.add_bos());
  EXPECT_TRUE(t.is_eog(151645));
  EXPECT_TRUE(t.is_eog(151643));  // <|endoftext|>
  EXPECT_FALSE(t.is_eog(151667));  // <think>
  EXPECT_EQ(t.piece(151667), "<think>");
  EXPECT_FALSE(t.chat_template().empty());
}

TEST(TokenizerExact, SmolLM2FromGgufMatchesHfTokenizers) {
  std::string path = test::smollm2_gguf();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not fetched (scripts/get-demo-model.sh)";
  auto f = gguf::File::open(path);
  auto t = Tokenizer::from_gguf(*f);
  EXPECT_EQ(t->n_vocab(), 49152);
  EXPECT_EQ(t->pre_name(), "smollm");
  EXPECT_EQ(t->eos(), 2);
  EXPECT_TRUE(t->is_eog(2));
  check_refs(*t, test::load_json("smollm2_refs.json"), false);
}

// SmolLM2's vocabulary lacks 21 of the 256 byte tokens (0x04, 0x06, ..., 0xF1-0xFF). Found by
// tests/fuzz/fuzz_tokenizer.cpp: such bytes are dropped, and the ids are HF tokenizers' own
// (0.23.3, the tokenizer rebuilt from the GGUF as scripts/make_tokenizer_refs.py does).
TEST(TokenizerExact, SmolLM2DropsBytesWithoutATokenAsHfDoes) {
  std::string path = test::smollm2_gguf();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not fetched (scripts/get-demo-model.sh)";
  auto t = Tokenizer::from_gguf(*gguf::File::open(path));
  const std::string a("  leadi\x06\x01\x00``\x01#Y`riialng  ", 25);
  EXPECT_EQ(t->encode(a, false, false), (std::vector<int32_t>{216, 1022, 89, 191, 190, 1969, 191, 19, 73, 80, 431, 409, 863, 256}));
  EXPECT_EQ(t->decode(t->encode(a, false, false)), std::string("  leadi\x01\x00``\x01#Y`riialng  ", 24));
  const std::string b = "Mi\xE7\x95\x9D\xF2\x9D\x8C\x9D";  // U+755D U+9D31D: 0xF2 has no token
  EXPECT_EQ(t->encode(b, false, false), (std::vector<int32_t>{42300, 178, 239, 247, 247, 230, 247}));
}

// Qwen3 loaded from tokenizer.json, written with llama.cpp's keys, read back: same ids.
TEST(TokenizerExact, Qwen3GgufRoundTrip) {
  const Tokenizer& t = test::qwen3();
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::str("qwen3"));
  t.to_gguf(w, 151936);
  std::string path = std::string(LMFUSE_BINARY_DIR) + "/tokenizer_roundtrip_test.gguf";
  w.write(path);
  auto f = gguf::File::open(path);
  EXPECT_EQ(f->get_str("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->get_str("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(f->get("tokenizer.ggml.tokens").as_arr().items.size(), 151936u);
  auto t2 = Tokenizer::from_gguf(*f);
  EXPECT_EQ(t2->n_vocab(), 151936);
  EXPECT_EQ(t2->eos(), t.eos());
  EXPECT_EQ(t2->chat_template(), t.chat_template());
  check_refs(*t2, test::load_json("qwen3_refs.json"), true);
  std::filesystem::remove(path);
}

TEST(TokenizerErrors, GgufWithoutTokenizer) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::str("qwen3"));
  std::string path = std::string(LMFUSE_BINARY_DIR) + "/tokenizer_missing_test.gguf";
  w.write(path);
  auto f = gguf::File::open(path);
  try {
    Tokenizer::from_gguf(*f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer in this GGUF (tokenizer.ggml.model missing)"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  w.set("tokenizer.ggml.model", gguf::Value::str("llama"));
  w.write(path);
  f = gguf::File::open(path);
  try {
    Tokenizer::from_gguf(*f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported tokenizer.ggml.model 'llama'"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(TokenizerErrors, UnsupportedHfModel) {
  EXPECT_THROW(Tokenizer::from_hf(R"({"model": {"type": "Unigram", "vocab": []}})", ""), Error);
  EXPECT_THROW(Tokenizer::from_hf("not json", ""), Error);
  try {
    Tokenizer::from_hf(R"({"model": {"type": "WordPiece"}})", "");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("WordPiece"), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, BadIdsThrowNotCrash) {
  const Tokenizer& t = test::qwen3();
  std::vector<int32_t> bad = {1, -5};
  EXPECT_THROW(t.decode(bad), Error);
  EXPECT_THROW(t.piece(t.n_vocab()), Error);
}

}  // namespace
}  // namespace lmf

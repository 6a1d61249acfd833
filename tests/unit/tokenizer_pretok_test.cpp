// Pre-tokenizer splits must equal HF tokenizers' Split(Regex, "isolated") piece for piece, for
// Qwen2/3, Llama 3 and GPT-2's regexes (the Llama 3 one has no tokenizer here to test end to
// end, so its splitting is checked on its own).
#include <gtest/gtest.h>

#include <map>

#include "tokenizer/pretokenize.h"
#include "tokenizer_test_util.h"

namespace lmf {
namespace {

TEST(TokenizerPretok, SplitsMatchHf) {
  auto refs = test::load_json("pretok_refs.json");
  const std::map<std::string, const char*> ours = {
      {"qwen2", pretok::kQwen2}, {"llama3", pretok::kLlama3}, {"gpt2", pretok::kGpt2}};
  for (const auto& [name, r] : refs["splits"].items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(ours.count(name));
    EXPECT_EQ(r["pattern"].get<std::string>(), ours.at(name));  // the script's copy is ours
    PreTokenizer p;
    p.add_split(ours.at(name));
    const auto& corpus = refs["corpus"];
    for (size_t i = 0; i < corpus.size(); ++i) {
      std::string text = corpus[i];
      SCOPED_TRACE(text);
      EXPECT_EQ(p.split(text), r["pieces"][i].get<std::vector<std::string>>());
    }
  }
}

TEST(TokenizerPretok, QwenRegexIsTheOneInTokenizerJson) {
  auto j = nlohmann::json::parse(test::slurp(test::qwen3_dir() + "/tokenizer.json"));
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].get<std::string>(),
            pretok::kQwen2);
}

TEST(TokenizerPretok, NamesMapToSteps) {
  PreTokenizer p;
  EXPECT_TRUE(p.set_named("smollm"));
  EXPECT_EQ(p.patterns().size(), 2u);
  EXPECT_EQ(p.guess_name(), "smollm");
  EXPECT_TRUE(p.set_named("llama-bpe"));
  EXPECT_EQ(p.guess_name(), "llama-bpe");
  EXPECT_FALSE(p.set_named("no-such-pre"));
}

TEST(TokenizerPretok, LongRunsDoNotBlowUp) {
  PreTokenizer p;
  p.add_split(pretok::kQwen2);
  std::string s(200000, ' ');
  s += "x";
  auto pieces = p.split(s);
  ASSERT_EQ(pieces.size(), 2u);  // "   ...  " (minus one) and " x"
  EXPECT_EQ(pieces[0].size() + pieces[1].size(), s.size());
}

}  // namespace
}  // namespace lmf

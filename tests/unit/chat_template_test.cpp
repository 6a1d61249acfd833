// Chat templates must render exactly as transformers' apply_chat_template(tokenize=False)
// (references in tests/data/tokenizer/chat_refs.json, made by scripts/make_tokenizer_refs.py).
#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"
#include "tokenizer_test_util.h"

namespace lmf {
namespace {

TEST(ChatTemplate, MatchesTransformers) {
  auto refs = test::load_json("chat_refs.json");
  std::map<std::string, int> per_template;
  for (const auto& c : refs["cases"]) {
    std::string name = c["template"];
    SCOPED_TRACE(name + " / " + c["conversation"].get<std::string>() +
                 " agp=" + std::to_string(c["add_generation_prompt"].get<bool>()) +
                 " think=" + std::to_string(c["enable_thinking"].get<bool>()));
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"]) msgs.push_back({m["role"], m["content"]});
    std::string got = render_chat(refs["templates"][name], msgs, c["add_generation_prompt"], c["bos"],
                                  c["eos"], c["enable_thinking"]);
    EXPECT_EQ(got, c["expected"].get<std::string>());
    ++per_template[name];
  }
  EXPECT_GT(per_template["qwen3"], 20);
  EXPECT_GT(per_template["llama3"], 5);
  EXPECT_GT(per_template["smollm2"], 5);
  EXPECT_GT(per_template["llama4"], 5);
}

TEST(ChatTemplate, Qwen3TemplateFromTokenizerConfig) {
  // The template the tokenizer loader picked up is the one the references were made from.
  auto refs = test::load_json("chat_refs.json");
  EXPECT_EQ(test::qwen3().chat_template(), refs["templates"]["qwen3"].get<std::string>());
}

TEST(ChatTemplate, JinjaSemanticsMatchJinja2) {
  auto refs = test::load_json("chat_refs.json");
  ASSERT_GT(refs["jinja"].size(), 10u);
  for (const auto& c : refs["jinja"]) {
    std::string src = c["template"];
    SCOPED_TRACE(src);
    try {
      jinja::Template t(src);
      EXPECT_EQ(t.render(jinja::Value::dict()), c["expected"].get<std::string>());
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

void expect_error(const std::string& tmpl, const std::string& needle) {
  try {
    render_chat(tmpl, {{"user", "hi"}}, true, "", "", true);
    ADD_FAILURE() << "no error for: " << tmpl;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, UnsupportedConstructsAreNamed) {
  expect_error("{% macro f() %}x{% endmacro %}", "{% macro %}");
  expect_error("{{ messages | wordcount }}", "filter wordcount");
  expect_error("{{ 'a'.zfill(3) }}", "string.zfill()");
  expect_error("{{ cycler(1) }}", "function cycler()");
  expect_error("{% if x %}", "without {% endif %}");
  expect_error("{{ 'abc' ", "unclosed");
  expect_error("{{ raise_exception('Only user and assistant roles are supported!') }}",
               "Only user and assistant roles are supported!");
  expect_error("", "no chat template");
}

}  // namespace
}  // namespace lmf

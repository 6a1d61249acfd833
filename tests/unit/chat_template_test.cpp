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
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "wanted: " << needle << "\ngot: " << e.what();
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

// A chat template comes from the model file: one built to overflow the stack, loop for ever or
// fill memory is refused with one error naming the limit (the step budget is about a second).
TEST(ChatTemplate, HostileTemplatesAreRefusedNotRun) {
  const std::string deep_parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  std::string deep_ifs;
  for (int i = 0; i < 100000; ++i) deep_ifs += "{% if true %}";
  for (int i = 0; i < 100000; ++i) deep_ifs += "{% endif %}";
  std::string long_chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) long_chain += " + 1";
  long_chain += " }}";
  std::string nots = "{{ ";
  for (int i = 0; i < 1000; ++i) nots += "not ";
  nots += "true }}";
  expect_error(deep_parens, "a tag of more than 2048 tokens");
  expect_error("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}", "expression nested deeper than 64 levels");
  expect_error(nots, "expression nested deeper than 64 levels");
  expect_error(long_chain, "a tag of more than 2048 tokens");
  expect_error(deep_ifs, "blocks nested deeper than 64 levels");
  expect_error("{% for i in range(1000000000000) %}x{% endfor %}", "range() of more than 1048576 items");
  expect_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
               "rendering takes more than 2000000 steps");
  expect_error("{{ 'x' * 100000000000 }}", "a string longer than 64 MiB");
  expect_error("{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "a string longer than 64 MiB");
  expect_error("{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s.replace('a', 'aa') %}{% endfor %}",
               "a string longer than 64 MiB");
  expect_error("{% set s = 'x' * 60000000 %}{{ [1, 2, 3] | join(s) }}", "a string longer than 64 MiB");
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               "a list of more than 1048576 items");
  expect_error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}",
               "values nested more than 64 levels deep");
  expect_error("{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x} %}{% endfor %}",
               "values nested more than 64 levels deep");
  expect_error("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns | tojson }}", "holding itself");
  expect_error("{% set a = namespace(o=0) %}{% set b = namespace(o=0) %}{% set a.o = b %}{% set b.o = a %}{{ a == b }}",
               "holding itself");
  expect_error("{{ 99999999999999999999999 }}", "number '99999999999999999999999' out of range");
  expect_error("{% raw %}abc{% endraw", "unclosed {% raw %}");
  // found by tests/fuzz/fuzz_jinja.cpp: a null subscript, stoul's own exception, signed overflow
  expect_error("{{ [1, 2][ ] }}", "empty subscript []");
  expect_error("{{ '\\u{\"name\"' }}", "bad \\u escape");
  expect_error("{{ '\\U00110000' }}", "bad \\U escape");
  expect_error("{{ -72 * 3743906242624487424 }}", "integer overflow in *");
  expect_error("{{ 9223372036854775807 + 1 }}", "integer overflow in +");
  expect_error("{{ 3 ** 40 }}", "integer overflow in **");
  expect_error("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow in //");
  expect_error("{{ -(-9223372036854775807 - 1) }}", "integer overflow in unary -");
  expect_error("{{ 1e300 | int }}", "does not fit 64 bits");
  // found by fuzz_jinja (out of memory): a huge tojson indent, and printed containers of large
  // strings, are refused by size before they are built
  expect_error("{{ {'a': [1, 2.5, 'x\"y', none, true],} | tojson(indent=888888888888888883) }}", "a string longer than 64 MiB");
  expect_error("{{ [[[1]]] | tojson(indent=60000000) }}", "a printed value longer than 64 MiB");
  expect_error("{% set s = 'x' * 30000000 %}{{ [s, s, s] | tojson }}", "a printed value longer than 64 MiB");
  expect_error("{% set s = 'x' * 30000000 %}{{ [s, s, s] }}", "a printed value longer than 64 MiB");
  expect_error("{% set s = 'x' * 30000000 %}{{ {'a': s, 'b': s, 'c': s} }}", "a printed value longer than 64 MiB");
  expect_error("{{ [1] | tojson(indent=1.5) }}", "tojson indent of type float");
  expect_error("{{ [1] | tojson(foo=1) }}", "tojson: unexpected argument foo");
  expect_error("{{ [1] | tojson(false, none, none, false, 1) }}", "tojson takes at most 4 arguments");
  expect_error("{{ [1] | tojson(separators=[',']) }}", "tojson separators: expected two strings");
  // as Jinja2 (UndefinedError) and Python (TypeError) refuse them, found by a differential run
  expect_error("{{ x.y }}", "'x' is undefined");
  expect_error("{% set x = {} %}{% if x.y.z is defined %}{% endif %}", "'x.y' is undefined");
  expect_error("{{ x['k'] }}", "'x' is undefined");
  expect_error("{{ {'a': {}}.a.b.c }}", "an attribute or item of an undefined value");
  expect_error("{{ [1] + (2,) }}", "can only concatenate list (not tuple) to one");
  expect_error("{{ 'a' | abs }}", "abs of string");
  expect_error("{{ 'a' is odd }}", "test odd of string");
  expect_error("{{ x | int }}", "int of an undefined value");
  expect_error("{{ 3 | join }}", "join of int");
  expect_error("{{ [] in {'a': 1} }}", "unhashable type: list");
  // strings are indexed, sliced and counted without a string per character (64 MiB would take 2 GB)
  expect_error("{% for c in 'ab' * 600000 %}{% endfor %}", "iterating over more than 1048576 characters");
  expect_error("{{ ('ab' * 600000) | join(',') }}", "join over more than 1048576 characters");
  EXPECT_EQ(render_chat("{% set s = '\u00e9' * 3000000 %}{{ s | length }} {{ s[1:] | length }} {{ s[-1] }} {{ (s | reverse) | length }}",
                        {{"user", "hi"}}, true, "", "", true),
            "3000000 2999999 \u00e9 3000000");
  EXPECT_EQ(render_chat("{{ 3 ** 39 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ '\\u00e9' }}", {{"user", "hi"}}, true, "", "", true),
            "4052555153018976267 -4 2 \u00e9");
  // the limits leave room: 60 levels of parentheses and of blocks, a loop of 100,000 iterations
  EXPECT_EQ(render_chat("{{ " + std::string(60, '(') + "7" + std::string(60, ')') + " }}", {{"user", "hi"}}, true, "", "", true), "7");
  std::string ifs60;
  for (int i = 0; i < 60; ++i) ifs60 += "{% if true %}";
  ifs60 += "y";
  for (int i = 0; i < 60; ++i) ifs60 += "{% endif %}";
  EXPECT_EQ(render_chat(ifs60, {{"user", "hi"}}, true, "", "", true), "y");
  EXPECT_EQ(render_chat("{% set ns = namespace(n=0) %}{% for i in range(100000) %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
                        {{"user", "hi"}}, true, "", "", true),
            "100000");
}

// A namespace may hold itself, directly or through another (Jinja2 renders these), as long as
// nothing prints it; the render frees the cycle when it ends. The fuzzer's LeakSanitizer run checks
// the freeing on the input that found the leak (tests/fuzz/jinja_regressions).
TEST(ChatTemplate, SelfHoldingNamespacesRender) {
  jinja::Template one("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns %}{% endfor %}"
                      "{{ ns.n is defined }}");
  EXPECT_EQ(one.render(jinja::Value::dict()), "True");
  jinja::Template two("{% set a = namespace(o=0) %}{% set b = namespace(o=a) %}{% set a.o = b %}{{ a.o.o.o.o is defined }}");
  EXPECT_EQ(two.render(jinja::Value::dict()), "True");
}

// The evaluator refuses values nested past 64, but a value built through the API (or around a
// stale depth) may be deeper: releasing it must not recurse once per level.
TEST(ChatTemplate, DeepValuesAreFreedWithoutRecursion) {
  jinja::Value v = jinja::Value::list();
  for (int i = 0; i < 1000000; ++i)
    v = i % 2 ? jinja::Value::list({std::move(v)}) : jinja::Value::dict({{"k", std::move(v)}});
  EXPECT_EQ(v.depth, 1000001);
  jinja::Value shared = v;  // a second handle: releasing the first frees nothing
  v = jinja::Value();
  ASSERT_EQ(shared.t, jinja::Value::T::List);
  EXPECT_EQ(shared.l->size(), 1u);
  shared = jinja::Value();  // the last handle: a million levels, freed iteratively
}

}  // namespace
}  // namespace lmf

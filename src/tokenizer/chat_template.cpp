#include "tokenizer/chat_template.h"

#include "tokenizer/jinja.h"
#include "util/status.h"

namespace lmf {

std::string render_chat(const std::string& tmpl, const std::vector<ChatMessage>& msgs,
                        bool add_generation_prompt, const std::string& bos,
                        const std::string& eos, bool enable_thinking) {
  using jinja::Value;
  if (tmpl.empty()) LMF_FAIL("chat template: the model has no chat template (tokenizer.chat_template)");
  jinja::List m;
  for (const auto& msg : msgs)
    m.push_back(Value::dict({{"role", Value::str(msg.role)}, {"content", Value::str(msg.content)}}));
  auto tok = [](const std::string& s) { return s.empty() ? Value::none() : Value::str(s); };
  // The variables transformers passes: messages, tools, documents, add_generation_prompt, the
  // special tokens, and extra keyword arguments (enable_thinking).
  Value ctx = Value::dict({{"messages", Value::list(std::move(m))},
                           {"tools", Value::none()},
                           {"documents", Value::none()},
                           {"add_generation_prompt", Value::boolean(add_generation_prompt)},
                           {"bos_token", tok(bos)},
                           {"eos_token", tok(eos)},
                           {"enable_thinking", Value::boolean(enable_thinking)}});
  jinja::Template t(tmpl);
  return t.render(ctx);
}

}  // namespace lmf

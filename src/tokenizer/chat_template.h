// Chat templates: renders a model's Jinja chat template (tokenizer.chat_template) the way
// transformers' apply_chat_template(..., tokenize=False) does.
#pragma once
#include <string>
#include <vector>

namespace lmf {

struct ChatMessage {
  std::string role, content;
};

// bos / eos: the tokenizer's special token texts ("" renders as Python None, as transformers
// passes a missing token). enable_thinking is Qwen3's switch (false appends an empty
// <think></think> block to the generation prompt). Throws lmf::Error naming any construct the
// interpreter does not support, and when the template calls raise_exception().
std::string render_chat(const std::string& tmpl, const std::vector<ChatMessage>& msgs,
                        bool add_generation_prompt, const std::string& bos,
                        const std::string& eos, bool enable_thinking = true);

}  // namespace lmf

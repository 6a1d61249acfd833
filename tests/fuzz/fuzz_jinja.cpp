// libFuzzer target for the chat-template interpreter: a template comes from the model file, so any
// input must either render or throw lmf::Error. Anything else (a crash, a sanitizer report, a
// stack overflow, another exception type, libFuzzer's out-of-memory or timeout) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "util/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<lmf::ChatMessage> msgs = {
      {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "<think>\nok\n</think>\n\nHello."}, {"user", "Why?"}};
  const std::string tmpl(reinterpret_cast<const char*>(data), size);
  try {
    (void)lmf::render_chat(tmpl, msgs, true, "<s>", "</s>", size % 2 == 0);
  } catch (const lmf::Error&) {
  }
  return 0;
}

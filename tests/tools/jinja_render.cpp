// Renders chat-template sources for scripts/jinja_differential.py: reads templates separated by
// NUL bytes from stdin, writes one result per template, each "ok\n" + the output or "error\n" +
// the message, NUL-separated. Each template renders with an empty context.
#include <iostream>
#include <iterator>
#include <string>

#include "tokenizer/jinja.h"
#include "util/status.h"

int main() {
  const std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  size_t at = 0;
  while (at < in.size()) {
    size_t end = in.find('\0', at);
    if (end == std::string::npos) end = in.size();
    try {
      const lmf::jinja::Template t(in.substr(at, end - at));
      const std::string out = t.render(lmf::jinja::Value::dict());
      std::cout << "ok\n" << out;
    } catch (const lmf::Error& e) {
      std::cout << "error\n" << e.what();
    }
    std::cout << '\0';
    at = end + 1;
  }
}

// A small Jinja2 interpreter: the subset that model chat templates use (Qwen2/3, Llama 3,
// SmolLM2 and similar): if/elif/else, for (loop.*, else, inline if), set (incl. namespace
// attributes), break/continue, expressions with Python semantics, common filters, tests,
// string/dict methods, namespace(), range(), raise_exception(), strftime_now().
// Whitespace: trim_blocks + lstrip_blocks, as transformers configures Jinja.
// Anything else fails with lmf::Error naming the construct.
#pragma once
#include <memory>
#include <string>

#include "tokenizer/jinja_value.h"

namespace lmf::jinja {

struct Program;

class Template {
 public:
  explicit Template(const std::string& source);  // parses; throws lmf::Error
  ~Template();
  // ctx must be a dict: the template's global variables.
  std::string render(const Value& ctx) const;

 private:
  std::shared_ptr<const Program> prog_;
};

}  // namespace lmf::jinja

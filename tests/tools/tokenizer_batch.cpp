// Encodes and decodes for scripts/tokenizer_differential.py: reads NUL-separated requests from
// stdin and answers each with "ok <n>\n" + the result or "error <n>\n" + the message, n its
// length in bytes (decoded text may hold NUL).
// Requests: "T<path>" loads a tokenizer.json (the tokenizer for the requests after it);
// "e<text>" / "E<text>" encode with / without matching special tokens (comma-separated ids);
// "d<ids>" / "D<ids>" decode comma-separated ids, keeping / skipping special tokens.
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace {
std::string answer(std::unique_ptr<lmf::Tokenizer>& tok, char op, const std::string& arg) {
  if (op == 'T') {
    tok = lmf::Tokenizer::from_hf_path(arg);
    return "";
  }
  if (!tok) LMF_FAIL("no tokenizer loaded");
  if (op == 'e' || op == 'E') {
    std::string out;
    for (int32_t id : tok->encode(arg, false, op == 'e')) out += (out.empty() ? "" : ",") + std::to_string(id);
    return out;
  }
  if (op == 'd' || op == 'D') {
    std::vector<int32_t> ids;
    for (size_t at = 0; at < arg.size();) {
      size_t end = arg.find(',', at);
      if (end == std::string::npos) end = arg.size();
      ids.push_back(int32_t(std::stol(arg.substr(at, end - at))));
      at = end + 1;
    }
    return tok->decode(ids, op == 'D');
  }
  LMF_FAIL("unknown request '", std::string(1, op), "'");
}
}  // namespace

int main() {
  const std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::unique_ptr<lmf::Tokenizer> tok;
  for (size_t at = 0; at < in.size();) {
    size_t end = in.find('\0', at);
    if (end == std::string::npos) end = in.size();
    const std::string req = in.substr(at, end - at);
    at = end + 1;
    try {
      if (req.empty()) LMF_FAIL("empty request");
      std::string out = answer(tok, req[0], req.substr(1));
      std::cout << "ok " << out.size() << "\n" << out;
    } catch (const std::exception& e) {
      if (!req.empty() && req[0] == 'T') tok.reset();
      const std::string msg = e.what();
      std::cout << "error " << msg.size() << "\n" << msg;
    }
  }
}

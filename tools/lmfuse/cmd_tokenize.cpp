// lmfuse tokenize / detokenize.
#include <cstdio>

#include "cli_common.h"
#include "format/gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace lmf::cli {
namespace {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model, const std::string& tok_json) {
  if (!tok_json.empty()) return Tokenizer::from_hf_path(tok_json);
  if (model.empty()) LMF_FAIL("give -m MODEL.gguf or --tokenizer tokenizer.json");
  auto f = gguf::File::open(model);
  return Tokenizer::from_gguf(*f);
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Print the token ids (or pieces) of a text.\n\n"
               "examples:\n"
               "  lmfuse tokenize -m model.gguf \"Hello world\"\n"
               "  lmfuse tokenize --tokenizer tokenizer.json --pieces \"Hello world\"",
               "lmfuse tokenize"};
  std::string model, tok_json, text;
  bool ids = false, pieces = false, no_special = false, bos = false;
  app.add_option("-m,--model", model, "GGUF model (its tokenizer is used)");
  app.add_option("--tokenizer", tok_json, "a Hugging Face tokenizer.json, or the folder holding it, instead of a model");
  app.add_flag("--ids", ids, "print ids only (default)");
  app.add_flag("--pieces", pieces, "print id and piece per line");
  app.add_flag("--no-special", no_special, "treat special-token text as plain text");
  app.add_flag("--bos", bos, "add the BOS token if the tokenizer uses one");
  app.add_option("text", text, "text to tokenize")->required();
  CLI11_PARSE(app, argc, argv);
  require_utf8(text, "the text");
  auto tok = load_tokenizer(model, tok_json);
  auto out = tok->encode(text, bos, !no_special);
  if (pieces) {
    for (int32_t id : out) std::printf("%d\t%s\n", id, tok->piece(id).c_str());
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? "," : "", out[i]);
    std::printf("\n");
  }
  return 0;
}

int cmd_detokenize(int argc, char** argv) {
  CLI::App app{"Print the text of token ids (what `lmfuse tokenize` prints).\n\n"
               "examples:\n  lmfuse detokenize -m model.gguf 9707,1879\n  lmfuse detokenize -m model.gguf 9707 1879",
               "lmfuse detokenize"};
  std::string model, tok_json;
  std::vector<std::string> ids;
  app.add_option("-m,--model", model, "GGUF model (its tokenizer is used)");
  app.add_option("--tokenizer", tok_json, "a Hugging Face tokenizer.json, or the folder holding it, instead of a model");
  app.add_option("ids", ids, "token ids, separated by commas or spaces")->required();
  CLI11_PARSE(app, argc, argv);
  auto tok = load_tokenizer(model, tok_json);
  std::string joined;
  for (const auto& a : ids) joined += a + " ";
  auto v = parse_token_list(joined, "ids");
  for (int32_t id : v)
    if (id < 0 || id >= tok->n_vocab()) LMF_FAIL("token id ", id, " is outside the vocabulary (0..", tok->n_vocab() - 1, ")");
  std::printf("%s\n", tok->decode(v).c_str());
  return 0;
}

}  // namespace lmf::cli

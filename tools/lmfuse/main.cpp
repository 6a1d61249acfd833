// lmfuse: the command-line entry point. Each subcommand lives in cmd_<name>.cpp.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli_common.h"
#include "util/status.h"

using namespace lmf::cli;

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive multi-turn chat in the terminal"},
    {"bench", cmd_bench, "prompt-processing and generation speed (llama-bench style)"},
    {"logits", cmd_logits, "write float32 logits for a token sequence (test contract)"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata and tensors"},
    {"random-model", cmd_random_model, "write a GGUF with seeded random weights of real shapes"},
    {"tokenize", cmd_tokenize, "text to token ids"},
    {"detokenize", cmd_detokenize, "token ids to text"},
    {"convert", cmd_convert, "convert a Hugging Face checkpoint to GGUF"},
    {"quantize", cmd_quantize, "quantize a float GGUF to a type or a K-quant mix (q4_k_m, q6_k, ...)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching and a chat page"},
};

void usage(FILE* f) {
  std::fprintf(f,
               "lmfuse: fast exact LLM inference (Qwen3, Qwen2, Llama) from GGUF\n\n"
               "usage: lmfuse <command> [options]   (lmfuse <command> --help for details)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(f, "  %-13s %s\n", c.name, c.help);
  std::fprintf(f,
               "\nexamples:\n"
               "  lmfuse run -m models/smollm2-135m-instruct-q4_1.gguf -p \"The capital of France is\" -n 32\n"
               "  lmfuse random-model --preset qwen3-0.6b --type q4_0 -o /tmp/q.gguf && lmfuse bench -m /tmp/q.gguf\n"
               "  lmfuse serve -m models/smollm2-135m-instruct-q4_1.gguf --port 8080   # then open http://127.0.0.1:8080/\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  // llama.cpp spells them -ngl, -mg, -ub, -np; CLI11 takes only single-letter short options.
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-ngl")) argv[i] = const_cast<char*>("--ngl");
    if (!std::strcmp(argv[i], "-mg")) argv[i] = const_cast<char*>("--mg");
    if (!std::strcmp(argv[i], "-ub")) argv[i] = const_cast<char*>("--ubatch-size");
    if (!std::strcmp(argv[i], "-np")) argv[i] = const_cast<char*>("--parallel");
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.fn(argc - 1, argv + 1);
    } catch (const lmf::Error& e) {
      std::fprintf(stderr, "lmfuse %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "lmfuse %s: error: out of memory\n", c.name);
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lmfuse %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "lmfuse: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 1;
}

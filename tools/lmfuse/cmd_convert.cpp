// lmfuse convert: a Hugging Face checkpoint folder -> one GGUF file (llama.cpp-compatible).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>

#include "cli_common.h"
#include "model/convert.h"
#include "model/quant_mix.h"
#include "util/status.h"

namespace lmf::cli {
namespace {

// The writer removes "<out>.tmp" when a conversion fails with an error; an interrupt (Ctrl-C,
// SIGTERM) would skip that cleanup, so the handler removes it (unlink is async-signal-safe).
char g_tmp_path[4096];
extern "C" void on_interrupt(int sig) {
  if (g_tmp_path[0]) ::unlink(g_tmp_path);
  ::_exit(128 + sig);
}

DType parse_type_flag(const std::string& flag, const std::string& s) {
  auto t = parse_dtype(s);
  if (!t) LMF_FAIL(flag, ": expected one of ", mix_names(), ", got '", s, "'");
  return *t;
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  CLI::App app{"Convert a Hugging Face checkpoint (Qwen3, Qwen2, Llama) to GGUF.\n"
               "Reads config.json, model.safetensors (or shards + model.safetensors.index.json),\n"
               "tokenizer.json, tokenizer_config.json and generation_config.json. 1-D tensors stay f32.\n\n"
               "examples:\n"
               "  lmfuse convert ./Qwen3-0.6B -o qwen3-0.6b-q4_1.gguf --type q4_1\n"
               "  lmfuse convert ./Qwen3-0.6B -o qwen3-0.6b-q4_k_m.gguf --type q4_k_m\n"
               "  lmfuse convert ./SmolLM2-135M-Instruct -o s.gguf --type q4_0 --better-rounding --output-type q8_0 -t 8",
               "lmfuse convert"};
  std::string in_dir, out, type_s = "f16", out_type_s, embed_type_s;
  ConvertOptions o;
  bool quiet = false;
  app.add_option("HF_DIR", in_dir, "Hugging Face checkpoint folder")->required();
  app.add_option("-o,--output", out, "output GGUF file")->required();
  app.add_option("--type", type_s,
                 "weight type of 2-D tensors, or a K-quant mix as llama-quantize makes it: " + mix_names() +
                     " (default f16, as llama.cpp)");
  app.add_option("--output-type", out_type_s, "type of output.weight (default: --type)");
  app.add_option("--embed-type", embed_type_s, "type of token_embd.weight (default: --type)");
  add_threads_flag(app, o.threads);
  app.add_flag("--force", o.force, "overwrite the output file if it exists");
  app.add_flag("--better-rounding", o.better_rounding,
               "4-bit types: search each block's scale (and minimum) for the least squared error "
               "(slower; same format)");
  app.add_flag("-q,--quiet", quiet, "no progress output");
  CLI11_PARSE(app, argc, argv);

  o.in_dir = in_dir;
  o.out = out;
  o.progress = !quiet;
  if (auto mix = parse_mix(type_s); mix && mix->k_rules) {  // q4_k_m, q6_k, iq4_xs, ...
    o.types.mix = *mix;
    o.types.type = mix->base;
  } else {
    o.types.type = parse_type_flag("--type", type_s);
  }
  if (!out_type_s.empty()) o.types.output_type = parse_type_flag("--output-type", out_type_s);
  if (!embed_type_s.empty()) o.types.embed_type = parse_type_flag("--embed-type", embed_type_s);

  const std::string tmp = out + ".tmp";
  if (tmp.size() < sizeof(g_tmp_path)) {
    std::memcpy(g_tmp_path, tmp.c_str(), tmp.size() + 1);
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    std::signal(SIGHUP, on_interrupt);
  }
  ConvertResult r;
  try {
    r = convert_hf(o);
  } catch (...) {
    g_tmp_path[0] = 0;
    throw;
  }
  g_tmp_path[0] = 0;
  for (const auto& n : r.notes) std::fprintf(stderr, "%s\n", n.c_str());
  std::fprintf(stderr, "wrote %s: %zu tensors, %.1f MiB, %s%s\n", out.c_str(), r.n_tensors,
               double(r.bytes) / double(1 << 20), o.types.mix ? o.types.mix->name.c_str() : dtype_name(o.types.type),
               r.tokenizer ? ", with tokenizer" : "");
  return 0;
}

}  // namespace lmf::cli

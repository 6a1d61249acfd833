// lmfuse quantize: a float GGUF (F32/F16/BF16 weights) -> a quantization mix (llama-quantize's
// job): lmfuse quantize IN.gguf OUT.gguf TYPE.
#include <cstdio>

#include "cli_common.h"
#include "model/quantize_gguf.h"
#include "util/status.h"

namespace lmf::cli {

int cmd_quantize(int argc, char** argv) {
  CLI::App app{"Quantize a GGUF file with float weights (F32, F16, BF16) to a type or a K-quant mix.\n"
               "Mixes follow llama-quantize's per-tensor rules (output.weight Q6_K; attn_v and ffn_down\n"
               "promoted on some layers). Metadata and 1-D tensors are copied unchanged.\n\n"
               "types: " + mix_names() + "\n\n"
               "examples:\n"
               "  lmfuse quantize qwen3-0.6b-f16.gguf qwen3-0.6b-q4_k_m.gguf q4_k_m\n"
               "  lmfuse quantize model-bf16.gguf model-q6_k.gguf q6_k -t 8\n"
               "  lmfuse quantize model-f16.gguf m.gguf q4_0 --output-type q6_k",
               "lmfuse quantize"};
  std::string type_s, out_type_s, embed_type_s;
  QuantizeOptions o;
  bool quiet = false;
  app.add_option("IN", o.in, "input GGUF file (float weights)")->required()->check(CLI::ExistingFile);
  app.add_option("OUT", o.out, "output GGUF file")->required();
  app.add_option("TYPE", type_s, "type or mix, e.g. q4_k_m, q6_k, iq4_xs, q4_0")->required();
  app.add_option("--output-type", out_type_s, "type of output.weight (default: the mix's)");
  app.add_option("--embed-type", embed_type_s, "type of token_embd.weight (default: the mix's)");
  add_threads_flag(app, o.threads);
  app.add_flag("--force", o.force, "overwrite OUT if it exists");
  app.add_flag("--allow-requantize", o.allow_requantize, "accept tensors that are already quantized (loses quality)");
  app.add_flag("-q,--quiet", quiet, "no progress output");
  CLI11_PARSE(app, argc, argv);

  auto mix = parse_mix(type_s);
  if (!mix) LMF_FAIL("TYPE: unknown type '", type_s, "' (expected one of: ", mix_names(), ")");
  o.mix = *mix;
  auto one = [](const char* flag, const std::string& s) {
    auto t = parse_dtype(s);
    if (!t) LMF_FAIL(flag, ": unknown type '", s, "'");
    return *t;
  };
  if (!out_type_s.empty()) o.output_type = one("--output-type", out_type_s);
  if (!embed_type_s.empty()) o.embed_type = one("--embed-type", embed_type_s);
  o.progress = !quiet;
  const QuantizeResult r = quantize_gguf(o);
  for (const auto& n : r.notes) std::fprintf(stderr, "%s\n", n.c_str());
  std::string mixs;
  for (const auto& [name, c] : r.by_type)
    mixs += cat(mixs.empty() ? "" : ", ", name, " ", c.first, " (", double(c.second) / double(1 << 20), " MiB)");
  std::fprintf(stderr, "wrote %s: %s, %zu tensors, %.1f -> %.1f MiB: %s\n", o.out.c_str(), o.mix.name.c_str(),
               r.n_tensors, double(r.bytes_in) / double(1 << 20), double(r.bytes_out) / double(1 << 20), mixs.c_str());
  return 0;
}

}  // namespace lmf::cli

// lmfuse logits: the test contract. Writes little-endian float32 logits [n, vocab].
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "cli_common.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "sampling/sampler.h"
#include "util/status.h"

namespace lmf::cli {

int cmd_logits(int argc, char** argv) {
  CLI::App app{"Write float32 logits [n, vocab] (little-endian) for a token sequence.\n\n"
               "examples:\n"
               "  lmfuse logits -m model.gguf --tokens 1,2,3 -o last.bin          # last position\n"
               "  lmfuse logits -m model.gguf --tokens 1,2,3,4 --all -o all.bin   # every position\n"
               "  lmfuse logits -m model.gguf --tokens 1,2,3,4 --all --prefill 2 -o all.bin\n"
               "      # 2 tokens in one batched pass, then one decode step per token",
               "lmfuse logits"};
  EngineFlags ef;
  add_engine_flags(app, ef);
  std::string tokens_s, out;
  bool all = false;
  int64_t prefill = -1;
  app.add_option("--tokens", tokens_s, "token ids, separated by commas or spaces")->required();
  app.add_flag("--all", all, "logits for every position, not only the last");
  app.add_option("--prefill", prefill, "evaluate the first N tokens as one batch, then one at a time (default: all in one)")
      ->check(at_least(1));
  app.add_option("-o,--output", out, "output file")->required();
  int64_t ubatch = 0;
  app.add_option("--ubatch-size,--ub", ubatch, "most tokens per backend run (longer prompts run in chunks)")
      ->check(in_range(1, int64_t(1) << 20));
  int64_t generate = 0;
  app.add_option("--generate", generate,
                 "then decode N tokens greedily and print their ids to stdout (CPU/GPU agreement checks)")
      ->check(at_least(0));
  CLI11_PARSE(app, argc, argv);

  auto tokens = parse_token_list(tokens_s, "--tokens");
  Loaded e = load_engine(ef, int64_t(tokens.size()) + generate);
  Session s(*e.model, *e.backend);
  if (ubatch > 0) s.set_max_batch(ubatch);
  const int64_t n = int64_t(tokens.size());
  const int64_t V = e.model->hp.n_vocab;
  std::vector<float> result;
  if (prefill < 0 || prefill >= n) {
    result = s.eval(tokens, all);
  } else {
    const auto& l = s.eval(std::span(tokens).first(size_t(prefill)), all);
    if (all) result = l;
    for (int64_t i = prefill; i < n; ++i) {
      const auto& li = s.eval(std::span(tokens).subspan(size_t(i), 1), false);
      if (all || i == n - 1) result.insert(result.end(), li.begin(), li.end());
    }
    if (!all) result.erase(result.begin(), result.end() - V);
  }
  if (generate > 0) {
    // The first token from the logits above, then greedy generation as `lmfuse run` does it
    // (runtime/generator.h: chained steps where the backend can), so the CPU/GPU agreement
    // checks cover the chained decode too.
    int32_t next = int32_t(std::max_element(result.end() - V, result.end()) - (result.end() - V));
    std::printf("%d%c", next, generate == 1 ? '\n' : ' ');
    SamplingParams greedy_params;
    greedy_params.temperature = 0;
    Sampler greedy(greedy_params);
    std::vector<int32_t> history(tokens.begin(), tokens.end());
    history.push_back(next);
    Generator gen(s, greedy, history, generate - 1);
    for (int64_t i = 1; i < generate; ++i) {
      next = i == 1 ? gen.first(std::span(&next, 1)) : gen.next();
      std::printf("%d%c", next, i + 1 == generate ? '\n' : ' ');
    }
    gen.finish();
  }
  std::ofstream f(out, std::ios::binary);
  if (!f) LMF_FAIL(out, ": cannot open for writing");
  f.write(reinterpret_cast<const char*>(result.data()), std::streamsize(result.size() * sizeof(float)));
  if (!f) LMF_FAIL(out, ": write failed");
  std::fprintf(stderr, "wrote %lld x %lld logits to %s\n", (long long)(result.size() / size_t(V)), (long long)V,
               out.c_str());
  return 0;
}

}  // namespace lmf::cli

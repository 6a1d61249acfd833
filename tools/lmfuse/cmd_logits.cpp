// lmfuse logits: the test contract. Writes little-endian float32 logits [n, vocab].
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "cli_common.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "runtime/tp_sim.h"
#include "sampling/sampler.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmf::cli {

namespace {

void write_logits(const std::string& out, const std::vector<float>& result, int64_t V) {
  std::ofstream f(out, std::ios::binary);
  if (!f) LMF_FAIL(out, ": cannot open for writing");
  f.write(reinterpret_cast<const char*>(result.data()), std::streamsize(result.size() * sizeof(float)));
  if (!f) LMF_FAIL(out, ": write failed");
  std::fprintf(stderr, "wrote %lld x %lld logits to %s\n", (long long)(result.size() / size_t(V)), (long long)V,
               out.c_str());
}

// --tp-sim N: the same contract (prefill, then one step per token, then greedy ids) on N
// simulated tensor-parallel ranks (runtime/tp_sim.h). Greedy generation takes each step's
// argmax on the host (no chained decode: the ranks' logits are gathered every step).
int logits_tp_sim(const EngineFlags& ef, int n_ranks, const TpOptions& split, const std::vector<int32_t>& tokens,
                  bool all, int64_t prefill, int64_t generate, int64_t ubatch, const std::string& out) {
  if (ef.device == "cuda" || ef.ngl > 0 || ef.main_gpu >= 0)
    LMF_FAIL("--tp-sim runs on the CPU backend; CUDA tensor parallelism is not implemented yet (docs/SCALING.md)");
  if (ubatch > 0) LMF_FAIL("--tp-sim evaluates the prompt in one pass; it takes no --ubatch-size");
  auto model = Model::load(ef.model);
  const int64_t n = int64_t(tokens.size()), V = model->hp.n_vocab;
  BackendOptions o;
  o.n_ctx = ef.n_ctx > 0 ? ef.n_ctx : n + generate;
  o.knobs = knobs_from(ef);
  o.n_threads = std::max(1, (ef.threads > 0 ? ef.threads : ThreadPool::default_threads()) / n_ranks);
  TpSim tp(*model, n_ranks, o, split);
  std::fprintf(stderr, "tensor-parallel simulation: %d ranks x %d threads, %s\n", n_ranks, o.n_threads,
               tp.rank_backend(0).description().c_str());
  std::vector<float> result;
  if (prefill < 0 || prefill >= n) {
    result = tp.eval(tokens, all);
  } else {
    const auto& l = tp.eval(std::span(tokens).first(size_t(prefill)), all);
    if (all) result = l;
    for (int64_t i = prefill; i < n; ++i) {
      const auto& li = tp.eval(std::span(tokens).subspan(size_t(i), 1), false);
      if (all || i == n - 1) result.insert(result.end(), li.begin(), li.end());
    }
    if (!all) result.erase(result.begin(), result.end() - V);
  }
  if (generate > 0) {
    std::vector<float> last(result.end() - V, result.end());
    for (int64_t i = 0; i < generate; ++i) {
      const int32_t next = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
      std::printf("%d%c", next, i + 1 == generate ? '\n' : ' ');
      if (i + 1 < generate) last = tp.eval(std::span(&next, 1), false);
    }
  }
  write_logits(out, result, V);
  return 0;
}

}  // namespace

int cmd_logits(int argc, char** argv) {
  CLI::App app{"Write float32 logits [n, vocab] (little-endian) for a token sequence.\n\n"
               "examples:\n"
               "  lmfuse logits -m model.gguf --tokens 1,2,3 -o last.bin          # last position\n"
               "  lmfuse logits -m model.gguf --tokens 1,2,3,4 --all -o all.bin   # every position\n"
               "  lmfuse logits -m model.gguf --tokens 1,2,3,4 --all --prefill 2 -o all.bin\n"
               "      # 2 tokens in one batched pass, then one decode step per token\n"
               "  lmfuse logits -m model.gguf --tokens 1,2,3,4 --all --tp-sim 2 -o tp2.bin\n"
               "      # the model split over 2 simulated tensor-parallel ranks (CPU threads)",
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
  int tp_sim = 0;
  app.add_option("--tp-sim", tp_sim,
                 "split the model over N simulated tensor-parallel ranks (threads of this process, the CPU "
                 "backend; -t threads shared among them) and gather their logits")
      ->check(in_range(1, 64));
  TpOptions split;
  app.add_flag("--tp-vocab-embedding", split.vocab_parallel_embedding,
               "with --tp-sim: split the token embedding by vocabulary rows as the logits are (default: replicated)");
  CLI11_PARSE(app, argc, argv);
  if (split.vocab_parallel_embedding && tp_sim == 0) LMF_FAIL("--tp-vocab-embedding needs --tp-sim N");

  auto tokens = parse_token_list(tokens_s, "--tokens");
  const int64_t n = int64_t(tokens.size());
  if (tp_sim > 0) return logits_tp_sim(ef, tp_sim, split, tokens, all, prefill, generate, ubatch, out);
  Loaded e = load_engine(ef, int64_t(tokens.size()) + generate);
  Session s(*e.model, *e.backend);
  if (ubatch > 0) s.set_max_batch(ubatch);
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
  write_logits(out, result, V);
  return 0;
}

}  // namespace lmf::cli

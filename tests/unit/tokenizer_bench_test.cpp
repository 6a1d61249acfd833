// Encoding throughput, single thread. Disabled by default; scripts/bench_tokenizer.py runs it
// next to HF tokenizers on the same text:
//   test_tokenizer --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Bench*'
// Text: tests/data/tokenizer/corpus.json joined by "\n", repeated $LMFUSE_BENCH_REPEAT times
// (default 200). Prints one line "lmfuse_bench tokenizer=<name> bytes=... tokens=... best_s=...".
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "format/gguf/gguf.h"
#include "tokenizer_test_util.h"

namespace lmf {
namespace {

std::string bench_text() {
  auto corpus = test::load_json("corpus.json");
  std::string one;
  for (const auto& s : corpus) one += s.get<std::string>() + "\n";
  int rep = 200;
  if (const char* e = std::getenv("LMFUSE_BENCH_REPEAT")) rep = std::atoi(e);
  std::string text;
  for (int i = 0; i < rep; ++i) text += one;
  return text;
}

void bench(const char* name, const Tokenizer& t) {
  std::string text = bench_text();
  double best = 1e9;
  size_t ntok = 0;
  for (int run = 0; run < 5; ++run) {
    auto t0 = std::chrono::steady_clock::now();
    auto ids = t.encode(text, false, true);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    ntok = ids.size();
  }
  std::printf("lmfuse_bench tokenizer=%s bytes=%zu tokens=%zu best_s=%.6f MB_per_s=%.2f\n", name,
              text.size(), ntok, best, text.size() / best / 1e6);
}

TEST(TokenizerBench, DISABLED_Bench) {
  bench("qwen3", test::qwen3());
  std::string g = test::smollm2_gguf();
  if (!g.empty()) {
    auto f = gguf::File::open(g);
    bench("smollm2", *Tokenizer::from_gguf(*f));
  }
}

}  // namespace
}  // namespace lmf

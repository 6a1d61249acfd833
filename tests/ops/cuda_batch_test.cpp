// Batch steps on the CUDA backend (runtime/engine.h over the paged pools, paged.h): on golden
// tiny models, three sequences of different lengths through steps that mix prefill chunks and
// decode rows give each sequence the logits it gets alone through the same engine (rel-L2
// <= 1e-5: the rows are computed independently, but a matrix product's arithmetic may depend on
// how many rows it has) and close to the one-sequence path of the backend's own cache (a
// different set of kernels: fused decode GEMVs, the flash prefill attention); greedy decoding of
// four sequences together, one a fork, gives each its tokens alone; a batch step refuses what
// the engine would not run.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_test.h"
#include "cuda_test_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/session.h"

using lmfct_cuda::rel_l2;

namespace {

const std::string kGolden = cuda_test_golden_dir();

std::unique_ptr<lmf::Backend> cuda_backend(const lmf::Model& m, int64_t n_ctx) {
  lmf::BackendOptions bo;
  bo.n_ctx = n_ctx;
  auto be = lmf::make_backend("cuda", bo);
  be->load(m);
  return be;
}

std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 12345;
  for (auto& v : t) v = int32_t((x = x * 1664525u + 1013904223u) >> 8) % int32_t(vocab);
  return t;
}

lmf::EngineConfig config(int64_t n_ctx, int64_t seqs, int64_t block) {
  lmf::EngineConfig c;
  c.n_ctx = n_ctx;
  c.kv_positions = seqs * n_ctx;
  c.block_size = block;
  return c;
}

// Every row's logits of one step of `seq` with `toks`.
std::vector<float> step_one(lmf::Engine& e, int32_t seq, std::span<const int32_t> toks, int64_t V) {
  std::vector<float> out(toks.size() * size_t(V));
  lmf::StepItem it;
  it.seq = seq;
  it.tokens = toks;
  it.all_logits = true;
  it.logits = out.data();
  EXPECT_EQ(e.step({&it, 1}), 1);
  EXPECT_TRUE(it.error.empty()) << it.error;
  return out;
}

const char* kModels[] = {"qwen3-tiny-q4_0", "qwen3-tiny-f16", "llama-tiny-q8_0", "llama31-tiny-q4_0", "qwen2-tiny-q4_1",
                         "qwen3-tiny256-q4_k_m"};

}  // namespace

// Steps [A 7, B 3], [A 1, B 5, C 4], [A 1, B 1, C 1] x 2 (C's rows start mid-step); block size 4,
// so every sequence spans several interleaved blocks.
TEST(CudaBatch, MixedStepsEqualEachSequenceAlone) {
  for (const char* name : kModels) {
    auto m = lmf::Model::load(kGolden + std::string(name) + ".gguf");
    const int64_t V = m->hp.n_vocab;
    const std::vector<std::vector<int64_t>> plan = {{7, 1, 1, 1}, {3, 5, 1, 1}, {0, 4, 1, 1}};
    std::vector<std::vector<int32_t>> toks;
    std::vector<std::vector<std::vector<float>>> alone(3), own(3);
    {
      auto be = cuda_backend(*m, 96);
      lmf::Engine solo(*m, *be, config(96, 1, 4));
      for (int s = 0; s < 3; ++s) {
        int64_t total = 0;
        for (int64_t n : plan[size_t(s)]) total += n;
        toks.push_back(tokens(total, V, uint32_t(s + 1)));
        const int32_t q = solo.kv().create();
        lmf::Session own_s(*m, *be);  // the backend's own cache: its decode and prefill kernels
        size_t at = 0;
        for (int64_t n : plan[size_t(s)]) {
          if (n == 0) continue;
          const auto part = std::span(toks.back()).subspan(at, size_t(n));
          alone[size_t(s)].push_back(step_one(solo, q, part, V));
          own[size_t(s)].push_back(own_s.eval(part, true));
          at += size_t(n);
        }
        solo.kv().free(q);
      }
    }
    auto be = cuda_backend(*m, 96);
    lmf::Engine e(*m, *be, config(96, 3, 4));
    std::vector<int32_t> seq = {e.kv().create(), e.kv().create(), e.kv().create()};
    std::vector<size_t> at(3, 0), chunk(3, 0);
    for (int step = 0; step < 4; ++step) {
      std::vector<lmf::StepItem> items;
      std::vector<std::vector<float>> out(3);
      std::vector<int> who;
      for (int s = 0; s < 3; ++s) {
        const int64_t n = plan[size_t(s)][size_t(step)];
        if (n == 0) continue;
        out[size_t(s)].resize(size_t(n * V));
        lmf::StepItem it;
        it.seq = seq[size_t(s)];
        it.tokens = std::span(toks[size_t(s)]).subspan(at[size_t(s)], size_t(n));
        it.all_logits = true;
        it.logits = out[size_t(s)].data();
        items.push_back(it);
        who.push_back(s);
        at[size_t(s)] += size_t(n);
      }
      ASSERT_TRUE(e.step(items) == int64_t(items.size()));
      for (size_t i = 0; i < who.size(); ++i) {
        const int s = who[i];
        EXPECT_TRUE(items[i].error.empty()) << items[i].error;
        const auto& got = out[size_t(s)];
        const double alone_err = rel_l2(got, alone[size_t(s)][chunk[size_t(s)]]);
        const double own_err = rel_l2(got, own[size_t(s)][chunk[size_t(s)]]);
        EXPECT_LE(alone_err, 1e-5) << name << " step " << step << " sequence " << s;
        // Float weights: the same products in another order; quantized ones: the prefill routes'
        // documented distance from the decode arithmetic (prefill.h, ~1e-2 on these models).
        EXPECT_LE(own_err, 3e-2) << name << " step " << step << " sequence " << s;
        ++chunk[size_t(s)];
      }
    }
    for (int s = 0; s < 3; ++s) EXPECT_EQ(e.kv().length(seq[size_t(s)]), int64_t(toks[size_t(s)].size()));
    e.kv().check();
  }
}

// Greedy decoding of four sequences together for 48 steps, the fourth a fork of the first that
// takes another token after the fork, gives each the tokens it gets alone (through the engine,
// one sequence per step).
TEST(CudaBatch, GreedyTogetherEqualsAloneWithAFork) {
  constexpr int kSteps = 48;
  auto argmax = [](const float* l, int64_t V) { return int32_t(std::max_element(l, l + V) - l); };
  for (const char* name : {"qwen3-tiny-q4_0", "llama-tiny-f16"}) {
    auto m = lmf::Model::load(kGolden + std::string(name) + ".gguf");
    const int64_t V = m->hp.n_vocab;
    auto be = cuda_backend(*m, 128);
    lmf::Engine e(*m, *be, config(128, 5, 8));
    const std::vector<std::vector<int32_t>> prompts = {tokens(5, V, 11), tokens(9, V, 12), tokens(2, V, 13)};
    auto greedy_alone = [&](const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced) {
      const int32_t q = e.kv().create();
      std::vector<int32_t> out;
      auto last = [&](std::span<const int32_t> t) {
        const auto l = step_one(e, q, t, V);
        return argmax(l.data() + (t.size() - 1) * size_t(V), V);
      };
      int32_t next = last(prompt);
      for (int32_t f : forced) next = last(std::span(&f, 1));
      for (int i = 0; i < kSteps; ++i) {
        out.push_back(next);
        next = last(std::span(&next, 1));
      }
      e.kv().free(q);
      return out;
    };
    std::vector<std::vector<int32_t>> want;
    for (const auto& p : prompts) want.push_back(greedy_alone(p, {}));
    const int32_t other = (want[0][0] + 1) % int32_t(V);
    want.push_back(greedy_alone(prompts[0], {other}));

    std::vector<float> logits(static_cast<size_t>(4 * V));
    std::vector<int32_t> seq, next;
    for (const auto& p : prompts) {
      seq.push_back(e.kv().create());
      lmf::StepItem it;
      it.seq = seq.back();
      it.tokens = p;
      it.logits = logits.data();
      ASSERT_TRUE(e.step({&it, 1}) == 1);
      next.push_back(argmax(logits.data(), V));
    }
    seq.push_back(e.kv().fork(seq[0]));
    next.push_back(other);
    std::vector<std::vector<int32_t>> got(4);
    for (int i = 0; i <= kSteps; ++i) {
      std::vector<lmf::StepItem> items(4);
      std::vector<int32_t> ids(4, -1);
      for (size_t s = 0; s < 4; ++s) {
        if (s < 3 || i > 0) got[s].push_back(next[s]);
        items[s].seq = seq[s];
        items[s].tokens = std::span(&next[s], 1);
        items[s].logits = logits.data() + s * size_t(V);
        items[s].argmax = &ids[s];  // the device's argmax of the same rows
      }
      ASSERT_TRUE(e.step(items) == 4);
      for (size_t s = 0; s < 4; ++s) {
        next[s] = argmax(logits.data() + s * size_t(V), V);
        EXPECT_EQ(ids[s], next[s]) << name << " step " << i << " sequence " << s;
      }
    }
    for (auto& g : got) g.resize(kSteps);
    for (size_t s = 0; s < 4; ++s) EXPECT_TRUE(got[s] == want[s]) << name << " sequence " << s;
    e.kv().check();
  }
}

// What the engine refuses (a token outside the vocabulary, a full cache) fails that item alone;
// the others' logits are what they get alone.
TEST(CudaBatch, OneBadItemDoesNotDisturbTheOthers) {
  auto m = lmf::Model::load(kGolden + "qwen3-tiny-q4_0.gguf");
  const int64_t V = m->hp.n_vocab;
  auto be = cuda_backend(*m, 16);
  lmf::Engine e(*m, *be, config(16, 2, 8));  // 4 blocks of 8
  const int32_t a = e.kv().create(), b = e.kv().create(), c = e.kv().create();
  const std::vector<int32_t> ok = tokens(8, V, 1), bad = {1, int32_t(V) + 5}, big = tokens(16, V, 3);
  std::vector<float> la(static_cast<size_t>(V)), lc(static_cast<size_t>(V));
  std::vector<lmf::StepItem> items(3);
  items[0].seq = a, items[0].tokens = ok, items[0].logits = la.data();
  items[1].seq = b, items[1].tokens = bad;
  items[2].seq = c, items[2].tokens = big, items[2].logits = lc.data();
  EXPECT_EQ(e.step(items), 2);
  EXPECT_TRUE(items[1].error.find("outside the vocabulary") != std::string::npos) << items[1].error;
  std::vector<lmf::StepItem> full(1);
  full[0].seq = b, full[0].tokens = std::span(ok).first(3);  // 3 of 4 blocks are used
  EXPECT_EQ(e.step(full), 1);
  full[0].tokens = std::span(big).first(9);
  EXPECT_EQ(e.step(full), 0);
  EXPECT_TRUE(full[0].error.find("KV cache is full") != std::string::npos) << full[0].error;
  e.kv().check();
  auto be2 = cuda_backend(*m, 16);
  lmf::Engine solo(*m, *be2, config(16, 1, 8));
  const int32_t q = solo.kv().create();
  const auto ref = step_one(solo, q, ok, V);
  EXPECT_LE(rel_l2(la, std::vector<float>(ref.end() - V, ref.end())), 1e-5);
}

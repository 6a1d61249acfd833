// Batch steps (runtime/engine.h) on the golden models: each sequence's logits in a batch equal
// what it gets alone, with sequences of different lengths and positions in one step, prefill
// chunks mixed with decode rows, a forked sequence, and 64 greedy steps of several sequences
// together giving each one's tokens alone. The CPU backend computes every row on its own (its
// quantized activations, norms, RoPE and attention are per row), so the bits must be equal; the
// issue's bound for other backends is rel-L2 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/session.h"

namespace lmf {
namespace {

const std::string kDir = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

std::vector<std::string> models() {
  std::ifstream f(kDir + "manifest.json");
  std::vector<std::string> out;
  const auto j = nlohmann::json::parse(f);
  for (const auto& c : j["cases"]) out.push_back(c["gguf"]);
  return out;
}

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  explicit Loaded(const std::string& gguf, int64_t n_ctx = 96) {
    model = Model::load(kDir + gguf);
    BackendOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    backend = make_cpu_backend(o);
    backend->load(*model);
  }
};

std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 12345;
  for (auto& v : t) v = int32_t((x = x * 1664525u + 1013904223u) >> 8) % int32_t(vocab);
  return t;
}

// The logits of `toks` evaluated alone, chunk by chunk as `chunks` says (all rows each).
std::vector<std::vector<float>> alone(const std::string& gguf, const std::vector<int32_t>& toks,
                                      const std::vector<int64_t>& chunks) {
  Loaded l(gguf);
  Session s(*l.model, *l.backend);
  std::vector<std::vector<float>> out;
  size_t at = 0;
  for (int64_t n : chunks) {
    out.push_back(s.eval(std::span(toks).subspan(at, size_t(n)), true));
    at += size_t(n);
  }
  return out;
}

class Batch : public ::testing::TestWithParam<std::string> {};

// Three sequences through four steps: [A prefill 7, B prefill 3], [A decode, B prefill 5,
// C prefill 4], [A decode, B decode, C decode] twice. Every row's logits equal the alone run's.
TEST_P(Batch, MixedStepsEqualEachSequenceAlone) {
  const std::string& gguf = GetParam();
  Loaded l(gguf);
  const int64_t V = l.model->hp.n_vocab;
  EngineConfig cfg;
  cfg.n_ctx = 96;
  cfg.kv_positions = 3 * 96;
  cfg.block_size = 4;  // many blocks per sequence, interleaved in the pool
  Engine e(*l.model, *l.backend, cfg);
  const std::vector<std::vector<int64_t>> plan = {{7, 1, 1, 1}, {3, 5, 1, 1}, {0, 4, 1, 1}};
  std::vector<std::vector<int32_t>> toks;
  std::vector<std::vector<std::vector<float>>> want;
  for (int s = 0; s < 3; ++s) {
    std::vector<int64_t> chunks;
    for (int64_t n : plan[size_t(s)])
      if (n > 0) chunks.push_back(n);
    int64_t total = 0;
    for (int64_t n : chunks) total += n;
    toks.push_back(tokens(total, V, uint32_t(s + 1)));
    want.push_back(alone(gguf, toks.back(), chunks));
  }
  std::vector<int32_t> seq = {e.kv().create(), e.kv().create(), e.kv().create()};
  std::vector<size_t> at(3, 0), chunk(3, 0);
  for (int step = 0; step < 4; ++step) {
    std::vector<StepItem> items;
    std::vector<std::vector<float>> out(3);
    std::vector<int> who;
    for (int s = 0; s < 3; ++s) {
      const int64_t n = plan[size_t(s)][size_t(step)];
      if (n == 0) continue;
      out[size_t(s)].resize(size_t(n * V));
      StepItem it;
      it.seq = seq[size_t(s)];
      it.tokens = std::span(toks[size_t(s)]).subspan(at[size_t(s)], size_t(n));
      it.all_logits = true;
      it.logits = out[size_t(s)].data();
      items.push_back(it);
      who.push_back(s);
      at[size_t(s)] += size_t(n);
    }
    ASSERT_EQ(e.step(items), int64_t(items.size()));
    for (size_t i = 0; i < who.size(); ++i) {
      const int s = who[i];
      EXPECT_TRUE(items[i].error.empty()) << items[i].error;
      EXPECT_EQ(out[size_t(s)], want[size_t(s)][chunk[size_t(s)]]) << gguf << " step " << step << " sequence " << s;
      ++chunk[size_t(s)];
    }
  }
  for (int s = 0; s < 3; ++s) EXPECT_EQ(e.kv().length(seq[size_t(s)]), int64_t(toks[size_t(s)].size()));
  e.kv().check();
}

// Greedy decoding of 4 sequences together for 64 steps gives each the tokens (and last-row
// logits) it gets alone; one of them is a fork of another, diverging after the fork.
TEST_P(Batch, GreedyTogetherEqualsAloneWithAFork) {
  const std::string& gguf = GetParam();
  constexpr int kSteps = 64;
  auto argmax = [](const float* l, int64_t V) { return int32_t(std::max_element(l, l + V) - l); };
  // Alone: each prompt, then kSteps greedy tokens.
  Loaded ref(gguf, 128);
  const int64_t V = ref.model->hp.n_vocab;
  std::vector<std::vector<int32_t>> prompts = {tokens(5, V, 11), tokens(9, V, 12), tokens(2, V, 13)};
  auto greedy_alone = [&](const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced) {
    Session s(*ref.model, *ref.backend);
    std::vector<int32_t> out;
    int32_t next = argmax(s.eval(prompt).data(), V);
    for (size_t i = 0; i < forced.size(); ++i) next = argmax(s.eval(std::span(&forced[i], 1)).data(), V);
    for (int i = 0; i < kSteps; ++i) {
      out.push_back(next);
      next = argmax(s.eval(std::span(&next, 1)).data(), V);
    }
    return out;
  };
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(greedy_alone(p, {}));
  // The fork: sequence 0's prompt, then a different token forced, then greedy.
  const int32_t other = (want[0][0] + 1) % int32_t(V);
  want.push_back(greedy_alone(prompts[0], {other}));

  Loaded l(gguf, 128);
  EngineConfig cfg;
  cfg.n_ctx = 128;
  cfg.kv_positions = 4 * 128;
  cfg.block_size = 8;
  Engine e(*l.model, *l.backend, cfg);
  std::vector<float> logits(size_t(4 * V));
  std::vector<int32_t> seq, next;
  for (const auto& p : prompts) {
    seq.push_back(e.kv().create());
    StepItem it;
    it.seq = seq.back();
    it.tokens = p;
    it.logits = logits.data();
    ASSERT_EQ(e.step({&it, 1}), 1);
    next.push_back(argmax(logits.data(), V));
  }
  seq.push_back(e.kv().fork(seq[0]));  // shares sequence 0's blocks; its first write copies the partial one
  next.push_back(other);
  std::vector<std::vector<int32_t>> got(4);
  for (int i = 0; i <= kSteps; ++i) {
    std::vector<StepItem> items(4);
    for (size_t s = 0; s < 4; ++s) {
      if (s < 3 || i > 0) got[s].push_back(next[s]);
      items[s].seq = seq[s];
      items[s].tokens = std::span(&next[s], 1);
      items[s].logits = logits.data() + s * size_t(V);
    }
    ASSERT_EQ(e.step(items), 4);
    for (size_t s = 0; s < 4; ++s) next[s] = argmax(logits.data() + s * size_t(V), V);
  }
  for (size_t s = 0; s < 3; ++s) got[s].resize(kSteps);
  got[3].resize(kSteps);
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(got[s], want[s]) << gguf << " sequence " << s;
  e.kv().check();
}

INSTANTIATE_TEST_SUITE_P(Golden, Batch, ::testing::ValuesIn(models()), [](const auto& info) {
  std::string n = info.param.substr(0, info.param.size() - 5);
  std::replace(n.begin(), n.end(), '-', '_');
  std::replace(n.begin(), n.end(), '.', '_');
  return n;
});

// One item that cannot run fails alone with its reason; the others run and its sequence is
// unchanged.
TEST(BatchErrors, OneBadItemDoesNotDisturbTheOthers) {
  Loaded l("qwen3-tiny-q4_0.gguf");
  const int64_t V = l.model->hp.n_vocab;
  EngineConfig cfg;
  cfg.n_ctx = 16;
  cfg.kv_positions = 40;  // 5 blocks of 8
  cfg.block_size = 8;
  Engine e(*l.model, *l.backend, cfg);
  const int32_t a = e.kv().create(), b = e.kv().create(), c = e.kv().create(), d = e.kv().create();
  std::vector<int32_t> ok = tokens(8, V, 1), bad = {1, int32_t(V) + 5}, too_long = tokens(17, V, 2),
                       big = tokens(16, V, 3);
  std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
  std::vector<StepItem> items(4);
  items[0].seq = a, items[0].tokens = ok, items[0].logits = la.data();
  items[1].seq = b, items[1].tokens = bad;
  items[2].seq = c, items[2].tokens = too_long;
  items[3].seq = d, items[3].tokens = big, items[3].logits = lb.data();
  EXPECT_EQ(e.step(items), 2);
  EXPECT_TRUE(items[0].error.empty());
  EXPECT_NE(items[1].error.find("outside the vocabulary"), std::string::npos) << items[1].error;
  EXPECT_NE(items[2].error.find("context holds 16"), std::string::npos) << items[2].error;
  EXPECT_TRUE(items[3].error.empty());
  EXPECT_EQ(e.kv().length(b), 0);
  EXPECT_EQ(e.kv().length(c), 0);
  // 3 of 5 blocks used; two more fill the pool, then a sequence needing one is refused as the
  // cache being full.
  std::vector<StepItem> more(2);
  more[0].seq = b, more[0].tokens = ok;
  more[1].seq = a, more[1].tokens = std::span(ok).first(1);
  EXPECT_EQ(e.step(more), 2);
  EXPECT_TRUE(more[0].error.empty());
  std::vector<StepItem> full(1);
  full[0].seq = c, full[0].tokens = std::span(big).first(3);
  EXPECT_EQ(e.step(full), 0);
  EXPECT_NE(full[0].error.find("KV cache is full"), std::string::npos) << full[0].error;
  EXPECT_EQ(e.kv().length(c), 0);
  e.kv().check();
  // The logits of a ran alone.
  Loaded r("qwen3-tiny-q4_0.gguf");
  Session s(*r.model, *r.backend);
  EXPECT_EQ(s.eval(ok), la);
}

// StepItem::argmax: each row's greedy id from the backend, with or without its logits, equal to
// the argmax of those logits; a step where no item asks for logits brings none to the host.
TEST(BatchErrors, ArgmaxIdsEqualTheLogitsArgmax) {
  Loaded l("qwen3-tiny-q4_0.gguf");
  const int64_t V = l.model->hp.n_vocab;
  EngineConfig cfg;
  cfg.n_ctx = 32;
  cfg.kv_positions = 96;
  cfg.block_size = 8;
  Engine e(*l.model, *l.backend, cfg);
  const int32_t a = e.kv().create(), b = e.kv().create();
  const std::vector<int32_t> ta = tokens(6, V, 4), tb = tokens(3, V, 5);
  std::vector<float> la(static_cast<size_t>(6 * V));
  std::vector<int32_t> ia(6, -1), ib(1, -1);
  std::vector<StepItem> items(2);
  items[0].seq = a, items[0].tokens = ta, items[0].all_logits = true, items[0].logits = la.data(), items[0].argmax = ia.data();
  items[1].seq = b, items[1].tokens = tb, items[1].argmax = ib.data();  // ids only
  ASSERT_EQ(e.step(items), 2);
  for (int r = 0; r < 6; ++r) {
    const float* row = la.data() + size_t(r) * size_t(V);
    EXPECT_EQ(ia[size_t(r)], int32_t(std::max_element(row, row + V) - row)) << "row " << r;
  }
  Loaded r("qwen3-tiny-q4_0.gguf");
  Session s(*r.model, *r.backend);
  const auto lb = s.eval(tb);
  EXPECT_EQ(ib[0], int32_t(std::max_element(lb.begin(), lb.end()) - lb.begin()));
  // Ids only, for both: the same ids as with logits.
  std::vector<int32_t> ja(1, -1), jb(1, -1);
  const int32_t na = ia[5], nb = ib[0];
  std::vector<StepItem> more(2);
  more[0].seq = a, more[0].tokens = std::span(&na, 1), more[0].argmax = ja.data();
  more[1].seq = b, more[1].tokens = std::span(&nb, 1), more[1].argmax = jb.data();
  ASSERT_EQ(e.step(more), 2);
  const auto lb2 = s.eval(std::span(&nb, 1));
  EXPECT_EQ(jb[0], int32_t(std::max_element(lb2.begin(), lb2.end()) - lb2.begin()));
  EXPECT_GE(ja[0], 0);
}

// A backend that runs at most 8 rows per step (as CUDA runs at most its 2048-row chunk): an item
// that would take the step past it is refused with the reason, before any block is reserved; the
// items that fit run, and the refused one runs in the next step.
class RowCapped final : public Backend {
 public:
  explicit RowCapped(std::unique_ptr<Backend> b) : inner_(std::move(b)) {}
  std::string name() const override { return "row-capped-cpu"; }
  std::string description() const override { return "CPU, 8 rows per step (test)"; }
  void load(const Model& m) override { inner_->load(m); }
  bool paged_kv() const override { return true; }
  int64_t max_batch_rows() const override { return 8; }
  void alloc_kv(int64_t n, int64_t bs) override { inner_->alloc_kv(n, bs); }
  void copy_kv_block(int32_t s, int32_t d) override { inner_->copy_kv_block(s, d); }
  void prepare(Graph& g) override { inner_->prepare(g); }
  void finalize(Graph& g) override { inner_->finalize(g); }
  void run(Graph& g, const StepInput& in) override {
    EXPECT_LE(in.n_tokens, 8);
    inner_->run(g, in);
  }
  const BackendOptions& options() const override { return inner_->options(); }

 private:
  std::unique_ptr<Backend> inner_;
};

TEST(BatchErrors, AStepPastTheBackendsRowsRefusesTheItemThatDoesNotFit) {
  Loaded l("qwen3-tiny-q4_0.gguf");
  RowCapped b(std::move(l.backend));
  const int64_t V = l.model->hp.n_vocab;
  EngineConfig cfg;
  cfg.n_ctx = 32;
  cfg.kv_positions = 96;
  cfg.block_size = 8;
  Engine e(*l.model, b, cfg);
  const int32_t a = e.kv().create(), c = e.kv().create(), d = e.kv().create();
  const std::vector<int32_t> five = tokens(5, V, 1), four = tokens(4, V, 2), three = tokens(3, V, 3);
  std::vector<float> la(static_cast<size_t>(V)), lc(static_cast<size_t>(V)), ld(static_cast<size_t>(V));
  std::vector<StepItem> items(3);
  items[0].seq = a, items[0].tokens = five, items[0].logits = la.data();
  items[1].seq = c, items[1].tokens = four, items[1].logits = lc.data();  // 5 + 4 > 8
  items[2].seq = d, items[2].tokens = three, items[2].logits = ld.data();  // 5 + 3 fits
  EXPECT_EQ(e.step(items), 2);
  EXPECT_TRUE(items[0].error.empty()) << items[0].error;
  EXPECT_NE(items[1].error.find("at most 8 per step"), std::string::npos) << items[1].error;
  EXPECT_TRUE(items[2].error.empty()) << items[2].error;
  EXPECT_EQ(e.kv().length(c), 0);
  EXPECT_EQ(e.kv().free_blocks(), e.kv().n_blocks() - 2);  // nothing reserved for the refused item
  std::vector<StepItem> next(1);
  next[0].seq = c, next[0].tokens = four, next[0].logits = lc.data();
  EXPECT_EQ(e.step(next), 1);
  EXPECT_EQ(e.kv().length(c), 4);
  e.kv().check();
  Loaded r("qwen3-tiny-q4_0.gguf");
  Session s(*r.model, *r.backend);
  EXPECT_EQ(s.eval(four), lc);
}

}  // namespace
}  // namespace lmf

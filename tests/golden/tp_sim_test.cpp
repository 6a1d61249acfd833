// Simulated tensor parallelism (runtime/tp_sim.h, issue 57): the golden models split over N
// ranks on CPU threads give the single-rank CPU logits, for a 16-token prefill and 8 decode
// steps (each rank's KV cache holding its own KV heads); splits that cannot be made are refused
// with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "backend/backend.h"
#include "model/model.h"
#include "model/tp_split.h"
#include "runtime/session.h"
#include "runtime/tp_sim.h"
#include "util/status.h"

namespace lmf {
namespace {

const std::string kDir = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";
// The golden manifest's tokens of every case are in [0, 128), under each model's vocabulary.
const std::vector<int32_t> kTokens = {1, 22, 75, 17, 18, 31, 30, 68, 28, 30, 14, 0, 32, 21, 17, 16,
                                      23, 24, 63, 17, 45, 29, 19, 52};
constexpr size_t kPrefill = 16;

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

int64_t argmax_mismatches(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  int64_t bad = 0;
  for (size_t r = 0; r < a.size() / size_t(V); ++r) {
    auto row = [&](const std::vector<float>& x) { return x.begin() + long(r) * V; };
    bad += std::max_element(row(a), row(a) + V) - row(a) != std::max_element(row(b), row(b) + V) - row(b);
  }
  return bad;
}

BackendOptions options(const Knobs& k, int threads) {
  BackendOptions o;
  o.n_threads = threads;
  o.n_ctx = 64;
  o.knobs = k;
  return o;
}

// The prefill's logits at every position, then one row per decode step.
template <class Eval>
std::vector<float> prefill_then_decode(Eval&& eval) {
  std::vector<float> out = eval(std::span(kTokens).first(kPrefill), true);
  for (size_t i = kPrefill; i < kTokens.size(); ++i) {
    const auto& l = eval(std::span(kTokens).subspan(i, 1), false);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

std::vector<float> single_rank(const Model& m, const Knobs& k = {}) {
  auto b = make_cpu_backend(options(k, 1));
  b->load(m);
  Session s(m, *b);
  return prefill_then_decode([&](std::span<const int32_t> t, bool all) { return s.eval(t, all); });
}

std::vector<float> tensor_parallel(const Model& m, int n, const Knobs& k = {}, const TpOptions& split = {}) {
  TpSim tp(m, n, options(k, 1), split);
  return prefill_then_decode([&](std::span<const int32_t> t, bool all) { return tp.eval(t, all); });
}

struct TpCase {
  const char* model;
  int n;
  // rel-L2 bound: what the split meets with a margin (the issue asks <= 1e-3). Measured on the
  // 2-core AVX2 box, 16-bit activations: float weights 2e-7..2.3e-6; Q5_0 / IQ4_NL 0 at N=2 (the
  // same bits) and 5e-6 at N=4: float addition order only. The quantized bound is wider as a
  // last-bit change of the residual can move a 16-bit activation code of the next matmul.
  double tol;
};

class TpSimGolden : public ::testing::TestWithParam<TpCase> {};

TEST_P(TpSimGolden, MatchesSingleRank) {
  const TpCase& c = GetParam();
  auto m = Model::load(kDir + c.model + ".gguf");
  const auto want = single_rank(*m);
  const auto got = tensor_parallel(*m, c.n);
  ASSERT_EQ(got.size(), want.size());
  for (float x : got) ASSERT_TRUE(std::isfinite(x));
  const double e = rel_l2(got, want);
  EXPECT_LE(e, c.tol) << c.model << " tp " << c.n;
  EXPECT_EQ(argmax_mismatches(got, want, m->hp.n_vocab), 0) << c.model << " tp " << c.n;
  std::printf("[tp-sim] %-22s N=%d rel_l2 %.3e (bound %.0e)\n", c.model, c.n, e, c.tol);
}

// 8-bit activation blocks (cpu_act16 off): a rank's o_proj / down input is cut at block
// boundaries, so its activation codes are the single rank's codes of those blocks.
TEST_P(TpSimGolden, EightBitActivationsMatchSingleRank) {
  const TpCase& c = GetParam();
  auto m = Model::load(kDir + c.model + ".gguf");
  Knobs k8;
  k8.cpu_act16 = Tri::Off;
  const auto want = single_rank(*m, k8);
  const auto got = tensor_parallel(*m, c.n, k8);
  ASSERT_EQ(got.size(), want.size());
  const double e = rel_l2(got, want);
  EXPECT_LE(e, c.tol) << c.model << " tp " << c.n;
  EXPECT_EQ(argmax_mismatches(got, want, m->hp.n_vocab), 0) << c.model << " tp " << c.n;
  std::printf("[tp-sim 8-bit] %-22s N=%d rel_l2 %.3e (bound %.0e)\n", c.model, c.n, e, c.tol);
}

// Forced fusions: the Q/K/V group folds the residual add that reads the all-reduced sum.
TEST_P(TpSimGolden, ForcedFusionsMatchUnfused) {
  const TpCase& c = GetParam();
  auto m = Model::load(kDir + c.model + ".gguf");
  Knobs off, forced;
  off.fusion = Tri::Off;
  forced.ln_fusion = forced.qkv_fusion = forced.gateup_fusion = Tri::On;
  const auto a = tensor_parallel(*m, c.n, off);
  const auto b = tensor_parallel(*m, c.n, forced);
  EXPECT_LE(rel_l2(b, a), 1e-6) << c.model << " tp " << c.n;
}

// The vocab-parallel embedding (each rank looks up its own ids, zero rows for the others, an
// all-reduce after the lookup) gives the replicated table's bits: x + 0 is x.
TEST_P(TpSimGolden, VocabParallelEmbeddingGivesTheReplicatedBits) {
  const TpCase& c = GetParam();
  auto m = Model::load(kDir + c.model + ".gguf");
  TpOptions vp;
  vp.vocab_parallel_embedding = true;
  const auto a = tensor_parallel(*m, c.n), b = tensor_parallel(*m, c.n, {}, vp);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << c.model;
}

// Two runs of the same split give the same bits: the all-reduce adds in rank order whatever the
// threads' timing.
TEST_P(TpSimGolden, Deterministic) {
  const TpCase& c = GetParam();
  auto m = Model::load(kDir + c.model + ".gguf");
  const auto a = tensor_parallel(*m, c.n), b = tensor_parallel(*m, c.n);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << c.model;
}

INSTANTIATE_TEST_SUITE_P(
    All, TpSimGolden,
    ::testing::Values(TpCase{"qwen3-tiny-f32", 2, 1e-5}, TpCase{"qwen2-tiny-f32", 2, 1e-5},
                      TpCase{"llama-tiny-f32", 2, 1e-5}, TpCase{"qwen3-tiny-bf16", 2, 1e-5},
                      TpCase{"llama-tiny-f16", 2, 1e-5}, TpCase{"llama-tiny256-q5_0", 2, 5e-5},
                      TpCase{"llama-tiny256-q5_0", 4, 5e-5}, TpCase{"llama-tiny256-iq4_nl", 2, 5e-5},
                      TpCase{"llama-tiny256-iq4_nl", 4, 5e-5}),
    [](const auto& info) {
      std::string n = std::string(info.param.model) + "_tp" + std::to_string(info.param.n);
      for (auto& ch : n)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

// The error a split that cannot be made gives: from tp_refusal, from tp_split and from TpSim
// alike, one line.
std::string refusal(const std::string& model, int n) {
  auto m = Model::load(kDir + model + ".gguf");
  const std::string why = tp_refusal(*m, n);
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  try {
    TpSim tp(*m, n, options({}, 1));
    ADD_FAILURE() << model << " split " << n << " ways was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), why);
  }
  EXPECT_THROW(tp_split(*m, 0, n), Error);
  return why;
}

TEST(TpSimErrors, HeadsThatDoNotDivide) {
  EXPECT_EQ(refusal("llama31-tiny-f32", 2), "tensor parallel 2: the model's 1 KV heads do not divide by 2");
  EXPECT_EQ(refusal("llama-tiny-f32", 3), "tensor parallel 3: the model's 8 attention heads do not divide by 3");
  EXPECT_EQ(refusal("llama-tiny-f32", 4), "tensor parallel 4: the model's 2 KV heads do not divide by 4");
  EXPECT_EQ(refusal("qwen3-tiny256-q4_k_m", 2), "tensor parallel 2: the model's 1 KV heads do not divide by 2");
  EXPECT_EQ(refusal("qwen3-tiny-f32", 0), "tensor parallel 0: the number of ranks must be at least 1");
}

TEST(TpSimErrors, SliceInsideABlock) {
  // qwen3-tiny: 96 FFN rows, 48 per rank: down's 96 columns in blocks of 32 cannot be cut at 48.
  EXPECT_EQ(refusal("qwen3-tiny-q4_0", 2),
            "tensor parallel 2: tensor 'blk.0.ffn_down.weight' (q4_0) would be cut every 48 of its 96 columns, "
            "inside its blocks of 32 (a rank needs whole blocks)");
  // llama-tiny256-q4_k_m: o_proj is Q4_K (blocks of 256), 4 of 8 heads = 128 columns per rank.
  EXPECT_EQ(refusal("llama-tiny256-q4_k_m", 2),
            "tensor parallel 2: tensor 'blk.0.attn_output.weight' (q4_K) would be cut every 128 of its 256 columns, "
            "inside its blocks of 256 (a rank needs whole blocks)");
  // The float types have no blocks: the same shapes split.
  auto m = Model::load(kDir + "qwen3-tiny-f32.gguf");
  EXPECT_EQ(tp_refusal(*m, 2), "");
}

TEST(TpSimErrors, BadTokensAndFullContextAreRefusedAndNothingAdvances) {
  auto m = Model::load(kDir + "llama-tiny-f32.gguf");
  TpSim tp(*m, 2, options({}, 1));
  const int32_t bad[] = {1, int32_t(m->hp.n_vocab)};
  EXPECT_THROW(tp.eval(bad), Error);
  EXPECT_EQ(tp.pos(), 0);
  std::vector<int32_t> many(65, 1);
  EXPECT_THROW(tp.eval(many), Error);
  EXPECT_EQ(tp.pos(), 0);
  const auto& l = tp.eval(std::span(kTokens).first(4));
  EXPECT_EQ(int64_t(l.size()), m->hp.n_vocab);
  EXPECT_EQ(tp.pos(), 4);
}

// A rank graph on a backend made without a communicator is refused at prepare, not run.
TEST(TpSimErrors, BackendWithoutCommunicatorRefusesARankGraph) {
  auto m = Model::load(kDir + "llama-tiny-f32.gguf");
  auto r = tp_split(*m, 0, 2);
  auto b = make_cpu_backend(options({}, 1));
  b->load(*r);
  try {
    Session s(*r, *b);
    s.eval(std::span(kTokens).first(2));
    ADD_FAILURE() << "ran a rank graph without a communicator";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no communicator"), std::string::npos) << e.what();
  }
}

// The split's layout: row slices are views into the file, column slices copies of whole blocks.
TEST(TpSplit, RowSlicesPointIntoTheFileColumnSlicesAreBlockCopies) {
  auto m = Model::load(kDir + "llama-tiny256-q5_0.gguf");
  const int n = 4;
  for (int r = 0; r < n; ++r) {
    auto k = tp_split(*m, r, n);
    EXPECT_EQ(k->tp.rank, r);
    EXPECT_EQ(k->tp.size, n);
    EXPECT_EQ(k->hp.n_head, m->hp.n_head / n);
    EXPECT_EQ(k->hp.n_head_kv, m->hp.n_head_kv / n);
    EXPECT_EQ(k->hp.n_ff, m->hp.n_ff / n);
    EXPECT_EQ(k->hp.n_vocab, m->hp.n_vocab);
    const int64_t v0 = m->hp.n_vocab * r / n, v1 = m->hp.n_vocab * (r + 1) / n;
    EXPECT_EQ(k->tp.vocab_begin, v0);
    EXPECT_EQ(k->tp.vocab_end, v1);
    EXPECT_EQ(k->output.rows, v1 - v0);
    EXPECT_EQ(k->output.data, m->output.data + v0 * m->output.row_stride());
    EXPECT_EQ(k->tok_embd.data, m->tok_embd.data);  // replicated
    const auto &L = m->layers[0], &K = k->layers[0];
    const int64_t hd = m->hp.head_dim;
    EXPECT_EQ(K.wq.data, L.wq.data + r * K.wq.rows * L.wq.row_stride());
    EXPECT_EQ(K.wq.rows, m->hp.n_head / n * hd);
    EXPECT_EQ(K.wk.data, L.wk.data + r * K.wk.rows * L.wk.row_stride());
    EXPECT_EQ(K.w_up.data, L.w_up.data + r * K.w_up.rows * L.w_up.row_stride());
    // o_proj: columns [r*q_dim/n, ...) of every row, copied block by block.
    ASSERT_EQ(K.wo.rows, L.wo.rows);
    ASSERT_EQ(K.wo.cols, L.wo.cols / n);
    const size_t off = row_bytes(L.wo.type, r * K.wo.cols), len = K.wo.row_stride();
    for (int64_t row = 0; row < L.wo.rows; ++row)
      ASSERT_EQ(std::memcmp(K.wo.data + row * len, L.wo.data + row * L.wo.row_stride() + off, len), 0) << row;
    EXPECT_EQ(K.w_down.cols, m->hp.n_ff / n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(K.w_down.data) % 64, 0u);
    EXPECT_GT(k->weight_bytes(), 0u);
  }
  // Vocab-parallel embedding: the table's rows of the rank's vocabulary slice, a view.
  TpOptions vp;
  vp.vocab_parallel_embedding = true;
  auto k = tp_split(*m, 1, 2, vp);
  EXPECT_TRUE(k->tp.vocab_parallel_embedding);
  EXPECT_EQ(k->tok_embd.rows, k->tp.vocab_end - k->tp.vocab_begin);
  EXPECT_EQ(k->tok_embd.data, m->tok_embd.data + k->tp.vocab_begin * m->tok_embd.row_stride());
  // A tied model's rank: its embedding and its output are one slice.
  auto tied = Model::load(kDir + "llama-tiny-f32.gguf");
  ASSERT_TRUE(tied->hp.tied_output);
  auto t = tp_split(*tied, 1, 2, vp);
  EXPECT_EQ(t->tok_embd.data, t->output.data);
  EXPECT_EQ(t->tok_embd.rows, t->output.rows);
}

// One rank is the whole model: every weight a view (nothing copied), no all-reduce, the same bits.
TEST(TpSplit, OneRankIsTheWholeModelUncopied) {
  auto m = Model::load(kDir + "llama-tiny256-q5_0.gguf");
  auto k = tp_split(*m, 0, 1);
  EXPECT_TRUE(k->owned.empty());
  EXPECT_EQ(k->layers[0].wo.data, m->layers[0].wo.data);
  EXPECT_EQ(k->layers[0].w_down.data, m->layers[0].w_down.data);
  EXPECT_EQ(k->output.data, m->output.data);
  EXPECT_EQ(k->output.rows, m->output.rows);
  const auto want = single_rank(*m), got = tensor_parallel(*m, 1);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace lmf

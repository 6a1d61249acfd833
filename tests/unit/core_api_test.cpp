// The public API (include/lmfuse/lmfuse.h) against the internal Session, and its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "backend/backend.h"
#include "lmfuse/lmfuse.h"
#include "model/model.h"
#include "runtime/session.h"
#include "sampling/sampler.h"

namespace {

const std::string kGolden = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

// The golden tiny Qwen3 on the CPU backend (2 threads, 64 positions), for Sessions.
struct TinyCpu {
  std::unique_ptr<lmf::Model> model = lmf::Model::load(kGolden + "qwen3-tiny-q4_0.gguf");
  std::unique_ptr<lmf::Backend> be;
  TinyCpu() {
    lmf::BackendOptions bo;
    bo.n_threads = 2;
    bo.n_ctx = 64;
    be = lmf::make_cpu_backend(bo);
    be->load(*model);
  }
};

// A backend's description names the activation codes its quantized matmuls use, and says float
// activations for a model whose projections are all float (no codes are made for them).
TEST(Backend, DescriptionNamesTheActivationCodes) {
  auto desc = [](const std::string& file, lmf::Tri act16) {
    auto m = lmf::Model::load(kGolden + file);
    lmf::BackendOptions bo;
    bo.n_threads = 1;
    bo.n_ctx = 16;
    bo.knobs.cpu_act16 = act16;
    auto be = lmf::make_cpu_backend(bo);
    be->load(*m);
    return std::make_pair(m->quantized_matmuls(), be->description());
  };
  for (const char* f : {"qwen3-tiny-f32.gguf", "qwen3-tiny-f16.gguf", "llama-tiny-bf16.gguf"}) {
    const auto [q, d] = desc(f, lmf::Tri::Auto);
    EXPECT_FALSE(q) << f;
    EXPECT_NE(d.find("float activations"), std::string::npos) << f << ": " << d;
  }
  for (const char* f : {"qwen3-tiny-q4_0.gguf", "qwen2-tiny-q4_1.gguf", "llama-tiny-q8_0.gguf"}) {
    const auto [q, d] = desc(f, lmf::Tri::Auto);
    EXPECT_TRUE(q) << f;
    EXPECT_NE(d.find("16-bit activations"), std::string::npos) << f << ": " << d;
    const auto [q8, d8] = desc(f, lmf::Tri::Off);
    EXPECT_NE(d8.find("8-bit activations"), std::string::npos) << f << ": " << d8;
    EXPECT_EQ(d8.find("16-bit"), std::string::npos) << f << ": " << d8;
  }
}

TEST(PublicApi, EvalMatchesSessionAndKeepsTheConversation) {
  lmfuse::EngineOptions o;
  o.device = "cpu";
  o.threads = 2;
  o.context = 64;
  auto m = lmfuse::Model::open(kGolden + "qwen3-tiny-q4_0.gguf", o);
  EXPECT_EQ(m->n_vocab(), 320);
  std::vector<int32_t> a = {1, 5, 9, 12}, b = {3, 4};
  auto l1 = m->eval(a);
  auto l2 = m->eval(b, true);
  EXPECT_EQ(m->position(), 6);

  const TinyCpu t;
  lmf::Session s(*t.model, *t.be);
  std::vector<int32_t> all = {1, 5, 9, 12, 3, 4};
  auto ref = s.eval(all, true);
  ASSERT_EQ(l2.size(), 2u * 320);
  for (size_t i = 0; i < l2.size(); ++i) EXPECT_EQ(l2[i], ref[4 * 320 + i]);
  m->reset();
  EXPECT_EQ(m->position(), 0);
}

// Session::eval_next (what run, chat and generate() call: argmax or sampling where the logits
// are) picks the same tokens as eval() followed by Sampler::sample, for greedy, greedy with the
// repetition penalty, and seeded sampling with and without top-k / min-p / penalty.
TEST(Session, EvalNextIsEvalThenSample) {
  const TinyCpu t;
  std::vector<lmf::SamplingParams> cases(5);
  cases[0].temperature = 0;
  cases[1].temperature = 0;
  cases[1].repeat_penalty = 8.f;  // strong enough to change the greedy sequence (asserted below)
  cases[2].seed = 7;  // defaults: T 0.8, top-k 40, top-p 0.95, min-p 0.05
  cases[3] = {.temperature = 1.5f, .top_k = 0, .top_p = 0.9f, .min_p = 0.f,
              .repeat_penalty = 1.2f, .repeat_last_n = 16, .seed = 11};
  cases[4] = {.temperature = 2.0f, .top_k = 0, .top_p = 1.f, .min_p = 0.f,
              .repeat_penalty = 1.f, .repeat_last_n = 64, .seed = 3};  // every token a candidate
  std::vector<std::vector<int32_t>> results;
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::vector<int32_t> prompt = {1, 5, 9, 12, 3, 4};
    std::vector<int32_t> seq[2];
    for (int way = 0; way < 2; ++way) {
      lmf::Session s(*t.model, *t.be);
      lmf::Sampler sampler(cases[c]);
      std::vector<int32_t> hist = prompt;
      int32_t next = way ? s.eval_next(prompt, sampler, hist) : sampler.sample(s.eval(prompt), hist);
      for (int i = 0; i < 24; ++i) {
        seq[way].push_back(next);
        hist.push_back(next);
        const std::span<const int32_t> t(&hist.back(), 1);
        next = way ? s.eval_next(t, sampler, hist) : sampler.sample(s.eval(t), hist);
      }
    }
    EXPECT_EQ(seq[0], seq[1]) << "case " << c;
    results.push_back(seq[1]);
    if (c >= 2) {
      EXPECT_GT(std::set<int32_t>(seq[1].begin(), seq[1].end()).size(), 2u) << "case " << c << " sampled";
    }
  }
  EXPECT_NE(results[0], results[1]) << "the penalty case must differ from plain greedy";
}

TEST(PublicApi, ErrorsAreLmfuseErrors) {
  EXPECT_THROW(lmfuse::Model::open("/nonexistent/model.gguf"), lmfuse::Error);
  lmfuse::EngineOptions o;
  o.device = "cpu";
  o.context = 4;
  auto m = lmfuse::Model::open(kGolden + "llama-tiny-q8_0.gguf", o);
  std::vector<int32_t> five = {1, 2, 3, 4, 5};
  try {
    m->eval(five);
    FAIL() << "no error";
  } catch (const lmfuse::Error& e) {
    EXPECT_NE(std::string(e.what()).find("context holds 4"), std::string::npos) << e.what();
  }
  // A prompt that is not UTF-8 is refused, not answered as its U+FFFD replacement.
  try {
    m->generate("caf\xC3 au lait", 1);
    FAIL() << "no error";
  } catch (const lmfuse::Error& e) {
    EXPECT_STREQ(e.what(), "the prompt is not valid UTF-8 (byte 0xC3 at offset 3)");
  }
  o.device = "tpu";
  EXPECT_THROW(lmfuse::Model::open(kGolden + "llama-tiny-q8_0.gguf", o), lmfuse::Error);
}

TEST(PublicApi, GeneratesWithTheDemoModel) {
  const std::string path = std::string(LMFUSE_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "demo model not fetched (scripts/get-demo-model.sh)";
  lmfuse::EngineOptions o;
  o.device = "cpu";
  auto m = lmfuse::Model::open(path, o);
  lmfuse::SamplingOptions greedy;
  greedy.temperature = 0;
  std::string streamed;
  std::string prompt = m->apply_chat_template({{"system", "You are a helpful assistant."}, {"user", "What is the capital of France?"}});
  std::string out = m->generate(prompt, 16, greedy, [&](std::string_view p) {
    streamed += p;
    return true;
  });
  EXPECT_NE(out.find("Paris"), std::string::npos) << out;
  EXPECT_EQ(out, streamed);
}

}  // namespace

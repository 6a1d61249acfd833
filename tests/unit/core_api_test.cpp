// The public API (include/lmfuse/lmfuse.h) against the internal Session, and its errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/backend.h"
#include "lmfuse/lmfuse.h"
#include "model/model.h"
#include "runtime/session.h"

namespace {

const std::string kGolden = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

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

  auto model = lmf::Model::load(kGolden + "qwen3-tiny-q4_0.gguf");
  lmf::BackendOptions bo;
  bo.n_threads = 2;
  bo.n_ctx = 64;
  auto be = lmf::make_cpu_backend(bo);
  be->load(*model);
  lmf::Session s(*model, *be);
  std::vector<int32_t> all = {1, 5, 9, 12, 3, 4};
  auto ref = s.eval(all, true);
  ASSERT_EQ(l2.size(), 2u * 320);
  for (size_t i = 0; i < l2.size(); ++i) EXPECT_EQ(l2[i], ref[4 * 320 + i]);
  m->reset();
  EXPECT_EQ(m->position(), 0);
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

// Chained decode on the CUDA backend (runtime/generator.h, StepInput::token_on_device /
// chain_next / queue): the pipelined loop gives the same tokens and position as the step-by-step
// eval_next loop (knob decode_pipeline=0) for greedy and seeded sampling on golden tiny models;
// two steps queued back to back; a stop drops the step queued ahead so decoding continues where
// the step-by-step loop would; more than two queued steps, and a chained step whose predecessor
// left nothing on the device, are errors.
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_test.h"
#include "cuda_test_util.h"
#include "model/model.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "sampling/sampler.h"
#include "util/status.h"

using lmfct_cuda::throws_error;

namespace {

const std::string kGolden = cuda_test_golden_dir();

std::string str(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

std::unique_ptr<lmf::Backend> cuda_backend(const lmf::Model& m, lmf::Tri pipeline) {
  lmf::BackendOptions bo;
  bo.n_ctx = 64;
  bo.knobs.decode_pipeline = pipeline;
  auto be = lmf::make_backend("cuda", bo);
  be->load(m);
  return be;
}

// The step-by-step loop (what lmfuse run did before the generator): max tokens.
std::vector<int32_t> stepwise(lmf::Backend& be, const lmf::Model& m, const lmf::SamplingParams& p,
                              const std::vector<int32_t>& prompt, int max, int64_t* pos) {
  lmf::Session s(m, be);
  lmf::Sampler sampler(p);
  std::vector<int32_t> hist = prompt, out;
  int32_t next = s.eval_next(prompt, sampler, hist);
  for (;;) {
    out.push_back(next);
    if (int(out.size()) == max || s.pos() >= s.n_ctx()) break;
    hist.push_back(next);
    next = s.eval_next(std::span(&hist.back(), 1), sampler, hist);
  }
  *pos = s.pos();
  return out;
}

std::vector<lmf::SamplingParams> params() {
  std::vector<lmf::SamplingParams> c(3);
  c[0].temperature = 0;                   // argmax steps
  c[1].seed = 5;                          // T 0.8, top-k 40, top-p 0.95, min-p 0.05
  c[2] = {.temperature = 2.0f, .top_k = 0, .top_p = 1.f, .min_p = 0.f,
              .repeat_penalty = 1.f, .repeat_last_n = 64, .seed = 9};  // k = 0: the full-sort path
  return c;
}

}  // namespace

TEST(CudaGenerator, SameTokensAsStepByStep) {
  const std::vector<int32_t> prompt = {1, 5, 9, 12, 3, 4};
  for (const char* name : {"qwen3-tiny-q4_0", "llama-tiny-f16"}) {
    auto m = lmf::Model::load(kGolden + name + ".gguf");
    auto plain = cuda_backend(*m, lmf::Tri::Off);
    auto piped = cuda_backend(*m, lmf::Tri::Auto);
    const auto cs = params();
    for (size_t c = 0; c < cs.size(); ++c)
      for (int max : {2, 40, 100}) {  // 100: bounded by the 64-position context
        int64_t ref_pos = 0;
        const auto ref = stepwise(*plain, *m, cs[c], prompt, max, &ref_pos);
        lmf::Session s(*m, *piped);
        lmf::Sampler sampler(cs[c]);
        std::vector<int32_t> hist = prompt, got;
        lmf::Generator gen(s, sampler, hist, max);
        got.push_back(gen.first(prompt));
        while (gen.more()) got.push_back(gen.next());
        gen.finish();
        EXPECT_TRUE(gen.chained()) << name << " case " << c;
        EXPECT_TRUE(got == ref) << name << " case " << c << " max " << max << "\n  chained: " << str(got)
                                << "\n  stepwise: " << str(ref);
        EXPECT_EQ(s.pos(), ref_pos);
        EXPECT_EQ(hist.size(), prompt.size() + got.size() - 1);
      }
  }
}

TEST(CudaGenerator, QueuedStepsStopsAndErrors) {
  const std::vector<int32_t> prompt = {1, 5, 9, 12, 3, 4};
  auto m = lmf::Model::load(kGolden + std::string("qwen3-tiny-q4_0.gguf"));
  auto plain = cuda_backend(*m, lmf::Tri::Off);
  auto piped = cuda_backend(*m, lmf::Tri::Auto);
  lmf::SamplingParams greedy;
  greedy.temperature = 0;
  int64_t ref_pos = 0;
  const auto ref = stepwise(*plain, *m, greedy, prompt, 8, &ref_pos);
  {  // two steps queued back to back, a third refused
    lmf::Session s(*m, *piped);
    lmf::Sampler sampler(greedy);
    std::vector<int32_t> got = {s.eval_next_chained(prompt, sampler)};
    s.queue_next(sampler);
    s.queue_next(sampler);
    EXPECT_TRUE(throws_error([&] { s.queue_next(sampler); }, "queued")) << "a third queued step must be refused";
    got.push_back(s.take_queued());
    got.push_back(s.take_queued());
    EXPECT_TRUE(got == std::vector<int32_t>(ref.begin(), ref.begin() + 3)) << str(got) << " vs " << str(ref);
  }
  {  // a stop after three tokens drops the queued step; step by step continues from there
    lmf::Session s(*m, *piped);
    lmf::Sampler sampler(greedy);
    std::vector<int32_t> hist = prompt;
    lmf::Generator gen(s, sampler, hist, 50);
    std::vector<int32_t> got = {gen.first(prompt)};
    got.push_back(gen.next());
    got.push_back(gen.next());
    gen.finish();
    EXPECT_EQ(s.pos(), int64_t(prompt.size()) + 2);
    for (int i = 0; i < 3; ++i) {
      hist.push_back(got.back());
      got.push_back(s.eval_next(std::span(&hist.back(), 1), sampler, hist));
    }
    EXPECT_TRUE(got == std::vector<int32_t>(ref.begin(), ref.begin() + 6)) << str(got) << " vs " << str(ref);
  }
  {  // a chained step after a step that did not leave its token on the device
    lmf::Session s(*m, *piped);
    lmf::Sampler sampler(greedy);
    std::vector<int32_t> hist = prompt;
    s.eval_next(prompt, sampler, hist);
    EXPECT_TRUE(throws_error([&] { s.queue_next(sampler); }, "chained decode step"))
        << "a chained step without its token on the device must be refused";
  }
}

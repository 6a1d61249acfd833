// runtime/generator.h: the pipelined generation loop gives the tokens, positions and history of
// the step-by-step eval_next loop, chained or not, and drops the step it queued ahead. The
// chained protocol (StepInput::token_on_device / chain_next / queue, Backend::take_queued) runs
// here on a CPU backend wrapped to honor it the way the CUDA backend does: the id stays "on the
// device" (in the wrapper) for the next step and queued ids wait in a queue. The CUDA backend
// itself is checked against the same loop on the GPU (tests/ops/cuda_generator_test.cpp).
#include <gtest/gtest.h>

#include <deque>

#include "backend/backend.h"
#include "model/model.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "sampling/sampler.h"
#include "util/status.h"

namespace {

const std::string kGolden = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

// The CPU backend, plus chained decode: a step's picked id is kept as the next step's input
// (token_on_device), and a queued step's id is held until take_queued().
class ChainingCpu final : public lmf::Backend {
 public:
  explicit ChainingCpu(const lmf::BackendOptions& o) : inner_(lmf::make_cpu_backend(o)) {}
  std::string name() const override { return "chaining-cpu"; }
  std::string description() const override { return "CPU with chained decode (test)"; }
  void load(const lmf::Model& m) override {
    inner_->load(m);
    n_vocab_ = m.hp.n_vocab;
  }
  void prepare(lmf::Graph& g) override { inner_->prepare(g); }
  void finalize(lmf::Graph& g) override { inner_->finalize(g); }
  const lmf::BackendOptions& options() const override { return inner_->options(); }
  bool can_sample(const lmf::SamplingParams&, int64_t) const override { return true; }
  bool can_chain(const lmf::SamplingParams& p, int64_t) const override { return p.repeat_penalty == 1.0f; }
  int32_t take_queued() override {
    if (queued_.empty()) LMF_FAIL("nothing queued");
    const int32_t id = queued_.front();
    queued_.pop_front();
    ++taken;
    return id;
  }
  void run(lmf::Graph& g, const lmf::StepInput& in) override {
    if (!in.argmax && !in.sampled) {
      EXPECT_FALSE(in.token_on_device || in.chain_next || in.queue);
      return inner_->run(g, in);
    }
    lmf::StepInput x = in;
    int32_t tok = -1;
    if (in.token_on_device) {
      EXPECT_EQ(in.n_tokens, 1);
      if (chain_pos_ != in.pos0) LMF_FAIL("chained step at ", in.pos0, ", device holds ", chain_pos_);
      tok = chain_tok_;
      x.tokens = &tok;
      ++on_device;
    }
    std::vector<float> logits(static_cast<size_t>(n_vocab_));
    x.logits = logits.data();
    x.argmax = nullptr;
    x.sampled = nullptr;
    x.sample = nullptr;
    x.token_on_device = x.chain_next = x.queue = false;
    inner_->run(g, x);
    const int32_t id = in.argmax ? lmf::argmax(logits)
                                 : lmf::sample_with_uniform(*in.sample, logits,
                                                            std::span(in.penalty_ids, size_t(in.n_penalty_ids)),
                                                            in.sample_u01);
    chain_pos_ = in.chain_next ? in.pos0 + in.n_tokens : -1;
    chain_tok_ = id;
    if (in.queue) {
      if (int(queued_.size()) >= kMaxQueued) LMF_FAIL("more than ", kMaxQueued, " queued");
      queued_.push_back(id);
      return;
    }
    if (in.argmax) *in.argmax = id;
    if (in.sampled) *in.sampled = id;
  }
  int on_device = 0, taken = 0;
  size_t queued() const { return queued_.size(); }

 private:
  std::unique_ptr<lmf::Backend> inner_;
  int64_t n_vocab_ = 0, chain_pos_ = -1;
  int32_t chain_tok_ = -1;
  std::deque<int32_t> queued_;
};

struct Tiny {
  std::unique_ptr<lmf::Model> model = lmf::Model::load(kGolden + "qwen3-tiny-q4_0.gguf");
  std::unique_ptr<lmf::Backend> cpu;
  std::unique_ptr<ChainingCpu> chaining;
  explicit Tiny(lmf::Tri pipeline = lmf::Tri::Auto) {
    lmf::BackendOptions bo;
    bo.n_threads = 2;
    bo.n_ctx = 64;
    bo.knobs.decode_pipeline = pipeline;
    cpu = lmf::make_cpu_backend(bo);
    cpu->load(*model);
    chaining = std::make_unique<ChainingCpu>(bo);
    chaining->load(*model);
  }
};

// The loop of lmfuse run before the generator: eval_next step by step, at most max tokens, while
// the position is inside the context. Returns the tokens; *pos and *hist the session's state.
std::vector<int32_t> reference(lmf::Backend& be, const lmf::Model& m, const lmf::SamplingParams& p,
                               const std::vector<int32_t>& prompt, int64_t max, int64_t* pos,
                               std::vector<int32_t>* hist) {
  lmf::Session s(m, be);
  lmf::Sampler sampler(p);
  *hist = prompt;
  std::vector<int32_t> out;
  int32_t next = s.eval_next(prompt, sampler, *hist);
  while (int64_t(out.size()) < max) {
    out.push_back(next);
    if (int64_t(out.size()) == max || s.pos() >= s.n_ctx()) break;
    hist->push_back(next);
    next = s.eval_next(std::span(&hist->back(), 1), sampler, *hist);
  }
  *pos = s.pos();
  return out;
}

std::vector<lmf::SamplingParams> cases() {
  std::vector<lmf::SamplingParams> c(4);
  c[0].temperature = 0;  // greedy: argmax steps
  c[1].seed = 7;         // sampled (T 0.8, top-k 40, top-p 0.95, min-p 0.05): one uniform per step
  c[2] = {.temperature = 2.0f, .top_k = 0, .top_p = 1.f, .min_p = 0.f,
              .repeat_penalty = 1.f, .repeat_last_n = 64, .seed = 3};
  c[3].temperature = 0;  // a repetition penalty: step by step (its ids need the token on the host)
  c[3].repeat_penalty = 8.f;
  return c;
}

TEST(Generator, SameTokensPositionAndHistoryChainedOrNot) {
  Tiny t;
  const std::vector<int32_t> prompt = {1, 5, 9, 12, 3, 4};
  const auto cs = cases();
  for (size_t c = 0; c < cs.size(); ++c)
    for (int64_t max : {1, 2, 3, 24}) {
      int64_t ref_pos = 0;
      std::vector<int32_t> ref_hist;
      const auto ref = reference(*t.cpu, *t.model, cs[c], prompt, max, &ref_pos, &ref_hist);
      for (lmf::Backend* be : {static_cast<lmf::Backend*>(t.cpu.get()), static_cast<lmf::Backend*>(t.chaining.get())}) {
        const bool chaining = be == t.chaining.get();
        t.chaining->on_device = 0;
        lmf::Session s(*t.model, *be);
        lmf::Sampler sampler(cs[c]);
        std::vector<int32_t> hist = prompt;
        std::vector<int32_t> got;
        {
          lmf::Generator gen(s, sampler, hist, max);
          got.push_back(gen.first(prompt));
          while (gen.more()) got.push_back(gen.next());
          EXPECT_EQ(gen.chained(), chaining && max > 1 && c != 3) << "case " << c;
          EXPECT_EQ(gen.pos(), ref_pos);
        }  // the destructor finishes
        const std::string what = "case " + std::to_string(c) + " max " + std::to_string(max) + (chaining ? " chained" : "");
        EXPECT_EQ(got, ref) << what;
        EXPECT_EQ(s.pos(), ref_pos) << what;
        EXPECT_EQ(hist, ref_hist) << what;
        if (chaining) {
          EXPECT_EQ(t.chaining->queued(), 0u) << what;
          // every step after the prompt took its token on the device when chained
          EXPECT_EQ(t.chaining->on_device, (c != 3 && max > 1) ? int(max - 1) : 0) << what;
        }
      }
    }
}

// Stopping early (a stop token, a callback that says stop): the step queued ahead is dropped, so
// the session, and a sampler that lives on (chat keeps one across turns), continue exactly where
// the step-by-step loop would.
TEST(Generator, StoppingEarlyDropsTheQueuedStep) {
  Tiny t;
  const std::vector<int32_t> prompt = {1, 5, 9, 12, 3, 4};
  const auto cs = cases();
  for (size_t c : {size_t(0), size_t(1), size_t(2)}) {
    int64_t ref_pos = 0;
    std::vector<int32_t> ref_hist;
    const auto ref = reference(*t.cpu, *t.model, cs[c], prompt, 8, &ref_pos, &ref_hist);
    lmf::Session s(*t.model, *t.chaining);
    lmf::Sampler sampler(cs[c]);
    std::vector<int32_t> hist = prompt;
    lmf::Generator gen(s, sampler, hist, 100);
    std::vector<int32_t> got = {gen.first(prompt)};
    for (int i = 0; i < 2; ++i) got.push_back(gen.next());
    EXPECT_EQ(s.pos(), int64_t(prompt.size()) + 3);  // the step consuming the third token is queued
    gen.finish();
    gen.finish();  // idempotent
    EXPECT_EQ(s.pos(), int64_t(prompt.size()) + 2);
    EXPECT_EQ(t.chaining->queued(), 0u);
    EXPECT_EQ(hist, std::vector<int32_t>(ref_hist.begin(), ref_hist.begin() + long(prompt.size()) + 2));
    // Continue step by step from the third token, with the same sampler: the reference's 4th-6th.
    for (int i = 0; i < 3; ++i) {
      hist.push_back(got.back());
      got.push_back(s.eval_next(std::span(&hist.back(), 1), sampler, hist));
    }
    EXPECT_EQ(got, std::vector<int32_t>(ref.begin(), ref.begin() + 6)) << "case " << c;
  }
}

// The context bounds generation as in the step-by-step loop; next() past the end is an error;
// the knob turns chaining off; a session that cannot chain refuses queue_next.
TEST(Generator, ContextKnobAndErrors) {
  lmf::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> prompt(60);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(1 + i * 5 % 300);
  {
    Tiny t;
    int64_t ref_pos = 0;
    std::vector<int32_t> ref_hist;
    const auto ref = reference(*t.cpu, *t.model, greedy, prompt, 100, &ref_pos, &ref_hist);
    EXPECT_EQ(ref.size(), 5u);  // tokens at positions 60..63 consumed, the fifth returned
    lmf::Session s(*t.model, *t.chaining);
    lmf::Sampler sampler(greedy);
    std::vector<int32_t> hist = prompt;
    lmf::Generator gen(s, sampler, hist, 100);
    std::vector<int32_t> got = {gen.first(prompt)};
    while (gen.more()) got.push_back(gen.next());
    EXPECT_EQ(got, ref);
    EXPECT_EQ(s.pos(), 64);
    try {
      gen.next();
      FAIL() << "no error past the context";
    } catch (const lmf::Error& e) {
      EXPECT_NE(std::string(e.what()).find("no more tokens"), std::string::npos) << e.what();
    }
  }
  {
    Tiny t(lmf::Tri::Off);
    lmf::Session s(*t.model, *t.chaining);
    lmf::Sampler sampler(greedy);
    EXPECT_FALSE(s.can_chain(greedy));
    std::vector<int32_t> hist(prompt.begin(), prompt.begin() + 4);
    lmf::Generator gen(s, sampler, hist, 4);
    gen.first(std::span(prompt).first(4));
    EXPECT_FALSE(gen.chained());
    EXPECT_THROW(s.queue_next(sampler), lmf::Error);
    lmf::Session cpu_s(*t.model, *t.cpu);
    EXPECT_THROW(cpu_s.queue_next(sampler), lmf::Error);
    EXPECT_THROW(t.cpu->take_queued(), lmf::Error);
  }
}

}  // namespace

// The output norm folded into the decode logits GEMV (GroupKind::Logits, knob logits_norm_fusion):
// on golden tiny models, every decode step's logits are bit for bit those of the separate norm
// launch, with the norm alone folded (down's epilogue took the last residual add) and with the
// add folded too (resid_fusion=0), and those of the plain unfused graph; the group is accepted,
// folds what it should, and is rejected when its knob is off.
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_test.h"
#include "model/model.h"
#include "runtime/session.h"

namespace {

const std::string kGolden = cuda_test_golden_dir();

struct Steps {
  std::vector<float> logits;  // every decode step's, concatenated
  bool found = false, accepted = false, fold_add = false;
};

// Nine tokens, each a decode step (no prefill: its route choice is timed per process); knobs:
// NAME=0|1.
Steps decode_steps(const lmf::Model& m, std::vector<std::string> knobs) {
  lmf::BackendOptions bo;
  bo.n_ctx = 32;
  for (const auto& kv : knobs) bo.knobs.set(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
  auto be = lmf::make_backend("cuda", bo);
  be->load(m);
  lmf::Session s(m, *be);
  const std::vector<int32_t> toks = {1, 7, 30, 2, 11, 5, 19, 3, 8};
  Steps r;
  for (size_t i = 0; i < toks.size(); ++i) {
    const auto& l = s.eval(std::span(toks).subspan(i, 1));
    r.logits.insert(r.logits.end(), l.begin(), l.end());
  }
  for (const auto& grp : s.graph_for(1, false).groups)
    if (grp.kind == lmf::GroupKind::Logits) {
      r.found = true;
      r.accepted = grp.accepted;
      r.fold_add = grp.fold_add;
    }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(CudaLogitsNorm, FoldedEqualsSeparateBitwise) {
  for (const char* name : {"qwen3-tiny-q4_0", "qwen3-tiny-f16", "llama-tiny-q8_0", "qwen2-tiny-bf16"}) {
    auto m = lmf::Model::load(kGolden + name + ".gguf");
    const Steps folded = decode_steps(*m, {});
    const Steps separate = decode_steps(*m, {"logits_norm_fusion=0"});
    const Steps with_add = decode_steps(*m, {"resid_fusion=0"});
    const Steps with_add_separate = decode_steps(*m, {"resid_fusion=0", "logits_norm_fusion=0"});
    const Steps plain = decode_steps(*m, {"fusion=0"});
    EXPECT_TRUE(folded.found && folded.accepted && !folded.fold_add) << name << ": norm alone folded";
    EXPECT_TRUE(separate.found && !separate.accepted) << name << ": knob off rejects the group";
    EXPECT_TRUE(with_add.accepted && with_add.fold_add) << name << ": the last residual add folded too";
    EXPECT_TRUE(!plain.accepted) << name;
    EXPECT_TRUE(same_bits(folded.logits, separate.logits)) << name << ": folded norm vs separate";
    EXPECT_TRUE(same_bits(with_add.logits, with_add_separate.logits)) << name << ": folded add + norm vs separate";
    EXPECT_TRUE(same_bits(folded.logits, plain.logits)) << name << ": vs the unfused graph";
  }
}

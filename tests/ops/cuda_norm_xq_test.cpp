// The norm's hand-over (knob norm_xq, docs/PERF.md S26-4): o_proj and down write their output's
// int8 codes (times the next RMSNorm's weight) and sums of squares per 32-block, and gate/up, qkv
// and the logits GEMV copy them instead of normalizing and quantizing in every block. On golden
// tiny models of the three integer-dot types, every decode step's logits stay within 1e-4 rel-L2
// of the default path's (the norm's sum runs in another order and its scale multiplies the dot
// products, so not bit for bit), also with the residual adds unfused (no pairs then: bit for bit).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_test.h"
#include "model/model.h"
#include "runtime/session.h"

namespace {

const std::string kGolden = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

// Nine tokens, each a decode step; knobs NAME=0|1.
std::vector<float> decode_logits(const lmf::Model& m, std::vector<std::string> knobs) {
  lmf::BackendOptions bo;
  bo.n_ctx = 32;
  for (const auto& kv : knobs) bo.knobs.set(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
  auto be = lmf::make_backend("cuda", bo);
  be->load(m);
  lmf::Session s(m, *be);
  const std::vector<int32_t> toks = {1, 7, 30, 2, 11, 5, 19, 3, 8};
  std::vector<float> r;
  for (size_t i = 0; i < toks.size(); ++i) {
    const auto& l = s.eval(std::span(toks).subspan(i, 1));
    r.insert(r.end(), l.begin(), l.end());
  }
  return r;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST(CudaNormXq, HandOverWithinToleranceOfNormPrologue) {
  for (const char* name : {"qwen3-tiny-q4_0", "llama-tiny-q8_0", "qwen2-tiny-q4_1"}) {
    auto m = lmf::Model::load(kGolden + name + ".gguf");
    const auto base = decode_logits(*m, {"norm_xq=0"});
    const auto on = decode_logits(*m, {"norm_xq=1"});
    ASSERT_TRUE(!base.empty() && on.size() == base.size()) << name;
    bool finite = true;
    for (float v : on) finite = finite && std::isfinite(v);
    EXPECT_TRUE(finite) << name;
    EXPECT_LE(rel(on, base), 1e-4) << name << ": norm_xq=1 vs 0";
    // Without the residual adds in o_proj / down there is no writer: the same launches, same bits.
    const auto unf = decode_logits(*m, {"norm_xq=1", "resid_fusion=0"});
    const auto unf0 = decode_logits(*m, {"norm_xq=0", "resid_fusion=0"});
    EXPECT_TRUE(unf.size() == unf0.size() && std::memcmp(unf.data(), unf0.data(), unf.size() * sizeof(float)) == 0)
        << name << ": no pairs without the residual epilogues";
  }
}

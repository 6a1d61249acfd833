// Golden tests: lmfuse's logits against Hugging Face transformers (float64) on tiny random
// qwen3 / qwen2 / llama models in every weight type, the K-quant mixes, Q6_K, IQ4_XS / IQ4_NL and
// Q5_0 / Q5_1 included (tests/data/golden, made by scripts/make_golden.py). Each case: a 16-token
// prefill then 8 single-token decode steps.
#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/model.h"
#include "runtime/session.h"

namespace lmf {
namespace {

const std::string kDir = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

struct Case {
  std::string name, gguf, logits, weight_type;
  std::vector<int32_t> tokens;
  int64_t n_vocab = 0, n_prefill = 0, n_decode = 0;
  double rel_l2 = 0, argmax = 0;
};

std::vector<Case> load_cases() {
  std::ifstream f(kDir + "manifest.json");
  if (!f) return {};
  auto j = nlohmann::json::parse(f);
  std::vector<Case> out;
  for (const auto& c : j["cases"]) {
    Case k;
    k.name = c["name"];
    k.gguf = c["gguf"];
    k.logits = c["logits"];
    k.weight_type = c["weight_type"];
    k.tokens = c["tokens"].get<std::vector<int32_t>>();
    k.n_vocab = c["n_vocab"];
    k.n_prefill = c["n_prefill"];
    k.n_decode = c["n_decode"];
    k.rel_l2 = c["tolerance"]["rel_l2"];
    k.argmax = c["tolerance"].value("argmax_agreement", 0.0);
    out.push_back(k);
  }
  return out;
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(f) << path;
  std::vector<float> v(size_t(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

double argmax_agreement(const std::vector<float>& got, const std::vector<float>& want, int64_t V) {
  const int64_t n = int64_t(want.size()) / V;
  int64_t same = 0;
  for (int64_t r = 0; r < n; ++r) {
    auto g = std::max_element(got.begin() + r * V, got.begin() + (r + 1) * V) - (got.begin() + r * V);
    auto w = std::max_element(want.begin() + r * V, want.begin() + (r + 1) * V) - (want.begin() + r * V);
    same += g == w;
  }
  return double(same) / double(n);
}

struct Opened {
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
};

Opened open(const Case& c, const Knobs& k = {}, int threads = 2) {
  Opened r;
  r.model = Model::load(kDir + c.gguf);
  BackendOptions o;
  o.n_threads = threads;
  o.n_ctx = 64;
  o.knobs = k;
  r.backend = make_cpu_backend(o);
  r.backend->load(*r.model);
  return r;
}

// 16-token prefill (all logits), then 8 decode steps.
std::vector<float> prefill_then_decode(const Case& c, const Knobs& k = {}) {
  Opened r = open(c, k);
  Session s(*r.model, *r.backend);
  std::vector<float> out = s.eval(std::span(c.tokens).first(size_t(c.n_prefill)), true);
  for (int64_t i = 0; i < c.n_decode; ++i) {
    const auto& l = s.eval(std::span(c.tokens).subspan(size_t(c.n_prefill + i), 1));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, MatchesTransformers) {
  const Case& c = GetParam();
  auto want = read_floats(kDir + c.logits);
  ASSERT_EQ(int64_t(want.size()), (c.n_prefill + c.n_decode) * c.n_vocab);
  auto got = prefill_then_decode(c);
  ASSERT_EQ(got.size(), want.size());
  for (float x : got) ASSERT_TRUE(std::isfinite(x));
  const double e = rel_l2(got, want);
  // Default CPU path: 16-bit activation blocks. The reference runs the same dequantized weights
  // in float, so what is left is activation rounding (~1.5e-5 relative) and the fp16 KV cache, as
  // for the float types: the quantized cases must meet the float tolerance too (1e-3), not only
  // the manifest's 3e-2 written for 8-bit activations (EightBitActivationsMatchTransformers).
  const double tol = std::min(c.rel_l2, 1e-3);
  EXPECT_LE(e, tol) << c.name;
  if (c.argmax > 0) {
    EXPECT_GE(argmax_agreement(got, want, c.n_vocab), c.argmax) << c.name;
  }
  RecordProperty("rel_l2", std::to_string(e));
  std::printf("[golden] %-20s rel_l2 %.3e (tolerance %.0e) argmax %.3f\n", c.name.c_str(), e, tol,
              argmax_agreement(got, want, c.n_vocab));
}

// The 8-bit activation path (LMFUSE_CPU_ACT16=0: llama.cpp-style, the arithmetic the CUDA
// kernels share) against the same references and tolerance, and its prefill/decode consistency.
TEST_P(Golden, EightBitActivationsMatchTransformers) {
  const Case& c = GetParam();
  auto want = read_floats(kDir + c.logits);
  Knobs k8;
  k8.cpu_act16 = Tri::Off;
  auto got = prefill_then_decode(c, k8);
  ASSERT_EQ(got.size(), want.size());
  const double e = rel_l2(got, want);
  EXPECT_LE(e, c.rel_l2) << c.name;
  if (c.argmax > 0) {
    EXPECT_GE(argmax_agreement(got, want, c.n_vocab), c.argmax) << c.name;
  }
  Opened r = open(c, k8);
  Session s(*r.model, *r.backend);
  EXPECT_LE(rel_l2(got, s.eval(c.tokens, true)), 1e-4) << c.name;
  std::printf("[golden 8-bit] %-20s rel_l2 %.3e (tolerance %.0e) argmax %.3f (tolerance %.2f)\n", c.name.c_str(),
              e, c.rel_l2, argmax_agreement(got, want, c.n_vocab), c.argmax);
}

TEST_P(Golden, PrefillThenDecodeEqualsOneLongPrefill) {
  const Case& c = GetParam();
  auto stepped = prefill_then_decode(c);
  Opened r = open(c);
  Session s(*r.model, *r.backend);
  std::vector<float> whole = s.eval(c.tokens, true);
  EXPECT_LE(rel_l2(stepped, whole), 1e-4) << c.name;
}

TEST_P(Golden, FusedEqualsUnfused) {
  const Case& c = GetParam();
  Knobs off;
  off.fusion = Tri::Off;
  Knobs forced;
  forced.ln_fusion = forced.qkv_fusion = forced.gateup_fusion = Tri::On;
  auto a = prefill_then_decode(c, off);
  auto b = prefill_then_decode(c, forced);
  auto d = prefill_then_decode(c);
  EXPECT_LE(rel_l2(b, a), 1e-5) << c.name;
  EXPECT_LE(rel_l2(d, a), 1e-5) << c.name;
}

TEST_P(Golden, ThreadCountDoesNotChangeLogits) {
  const Case& c = GetParam();
  Opened r1 = open(c, {}, 1), r3 = open(c, {}, 3);
  Session s1(*r1.model, *r1.backend), s3(*r3.model, *r3.backend);
  std::vector<float> a = s1.eval(c.tokens, true);
  std::vector<float> b = s3.eval(c.tokens, true);
  EXPECT_LE(rel_l2(a, b), 1e-6) << c.name;
}

INSTANTIATE_TEST_SUITE_P(All, Golden, ::testing::ValuesIn(load_cases()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (auto& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(GoldenData, ManifestCoversAllArchitecturesAndTypes) {
  auto cases = load_cases();
  ASSERT_FALSE(cases.empty()) << "missing " << kDir << "manifest.json";
  for (std::string arch : {"qwen3", "qwen2", "llama"})
    for (std::string t : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"}) {
      bool found = false;
      for (const auto& c : cases) found |= c.name == arch + "-tiny-" + t;
      EXPECT_TRUE(found) << arch << " " << t;
    }
}

// The types lmfuse quantizes itself (scripts/make_golden.py's LMFUSE_TYPES, on the *-tiny256
// models): each in at least one case, with issue 54's tolerances (3e-2, argmax 0.90) or tighter.
TEST(GoldenData, ManifestCoversTheLmfuseQuantizedTypes) {
  const auto cases = load_cases();
  for (std::string t : {"q4_k_m", "q5_k_m", "q3_k_m", "q2_k", "q6_k", "iq4_xs", "iq4_nl", "q5_0", "q5_1"}) {
    int n = 0;
    for (const auto& c : cases)
      if (c.weight_type == t) {
        ++n;
        EXPECT_LE(c.rel_l2, 3e-2) << c.name;
        EXPECT_GE(c.argmax, 0.90) << c.name;
      }
    EXPECT_GE(n, 1) << t;
  }
  for (std::string arch : {"qwen3", "llama"}) {  // the mix most files use, on both layouts
    bool found = false;
    for (const auto& c : cases) found |= c.name == arch + "-tiny256-q4_k_m";
    EXPECT_TRUE(found) << arch;
  }
}

}  // namespace
}  // namespace lmf

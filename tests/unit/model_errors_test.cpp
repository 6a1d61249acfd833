// Bad models and bad requests fail with one clear error: unknown architecture, missing keys,
// wrong tensor shapes, unknown tensors, token ids outside the vocabulary, context overflow.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "format/gguf/gguf.h"
#include "model/model.h"
#include "runtime/session.h"
#include "util/status.h"

namespace lmf {
namespace {

const std::string kGolden = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

// A tensor to add: F32 [64] zeros unless told otherwise.
struct Extra {
  Extra(const char* n = "") : name(n) {}
  Extra(const char* n, DType t, std::vector<int64_t> shape, std::vector<uint8_t> bytes)
      : name(n), type(t), ne(std::move(shape)), data(std::move(bytes)) {}
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> ne{64};
  std::vector<uint8_t> data = std::vector<uint8_t>(64 * 4, 0);
};
std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Copies a golden model, letting the caller drop/replace metadata and tensors.
std::string remake(const std::string& src, const std::string& tag,
                   const std::function<bool(std::string&, gguf::Value&)>& kv_edit,
                   const std::function<bool(gguf::TensorInfo&)>& t_edit, const Extra& extra_tensor = {},
                   const std::vector<std::pair<std::string, gguf::Value>>& extra_kv = {}) {
  auto f = gguf::File::open(kGolden + src);
  gguf::Writer w;
  for (auto [k, v] : f->metadata())
    if (kv_edit(k, v)) w.set(k, v);
  for (const auto& [k, v] : extra_kv) w.set(k, v);
  static std::vector<std::vector<uint8_t>> keep;  // data for re-shaped tensors
  for (auto t : f->tensors()) {
    const uint8_t* data = t.data;
    if (!t_edit(t)) continue;
    size_t n = row_bytes(t.type, t.ne[0]) * size_t(t.rows());
    keep.emplace_back(n, 0);
    std::memcpy(keep.back().data(), data, std::min(n, t.nbytes));
    w.add_tensor(t.name, t.type, t.ne, keep.back().data());
  }
  if (!extra_tensor.name.empty()) {
    keep.push_back(extra_tensor.data);
    w.add_tensor(extra_tensor.name, extra_tensor.type, extra_tensor.ne, keep.back().data());
  }
  std::string out = testing::TempDir() + "/bad_" + tag + ".gguf";
  w.write(out);
  return out;
}

std::string load_error(const std::string& path) {
  try {
    Model::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

auto keep_all_kv = [](std::string&, gguf::Value&) { return true; };
auto keep_all_t = [](gguf::TensorInfo&) { return true; };

TEST(ModelErrors, UnknownArchitectureListsSupported) {
  auto p = remake("qwen3-tiny-f32.gguf", "arch", [](std::string& k, gguf::Value& v) {
    if (k == "general.architecture") v = gguf::Value::str("mamba");
    return true;
  }, keep_all_t);
  std::string e = load_error(p);
  EXPECT_NE(e.find("unsupported architecture 'mamba'"), std::string::npos) << e;
  EXPECT_NE(e.find("qwen3, qwen2, llama"), std::string::npos) << e;
}

TEST(ModelErrors, MissingRequiredKey) {
  auto p = remake("qwen3-tiny-f32.gguf", "key", [](std::string& k, gguf::Value&) { return k != "qwen3.block_count"; },
                  keep_all_t);
  std::string e = load_error(p);
  EXPECT_NE(e.find("missing required key 'qwen3.block_count'"), std::string::npos) << e;
  EXPECT_NE(e.find(p), std::string::npos) << "names the file: " << e;
}

TEST(ModelErrors, WrongTensorShapeSaysExpectedAndGot) {
  auto p = remake("qwen3-tiny-f32.gguf", "shape", keep_all_kv, [](gguf::TensorInfo& t) {
    if (t.name == "blk.1.attn_k.weight") t.ne = {64, 32};
    return true;
  });
  std::string e = load_error(p);
  EXPECT_NE(e.find("tensor 'blk.1.attn_k.weight': expected [64, 64], got [32, 64]"), std::string::npos) << e;
}

TEST(ModelErrors, MissingTensor) {
  auto p = remake("llama-tiny-f32.gguf", "missing", keep_all_kv,
                  [](gguf::TensorInfo& t) { return t.name != "blk.0.ffn_up.weight"; });
  std::string e = load_error(p);
  EXPECT_NE(e.find("missing tensor 'blk.0.ffn_up.weight'"), std::string::npos) << e;
}

TEST(ModelErrors, UnknownTensorIsReported) {
  auto p = remake("llama-tiny-f32.gguf", "extra", keep_all_kv, keep_all_t, "blk.0.mystery.weight");
  std::string e = load_error(p);
  EXPECT_NE(e.find("'blk.0.mystery.weight' is not part of architecture 'llama'"), std::string::npos) << e;
}

// Hyperparameters that would give NaN or silently different logits (a RoPE variant run as plain
// RoPE) are refused by name.
TEST(ModelErrors, BadNormAndRopeNumbers) {
  struct Case {
    const char* tag;
    const char* key;
    gguf::Value v;
    const char* phrase;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Case& c : {Case{"eps0", "qwen3.attention.layer_norm_rms_epsilon", gguf::Value::f32(0), "layer_norm_rms_epsilon: expected a small positive number, got 0"},
                        Case{"epsnan", "qwen3.attention.layer_norm_rms_epsilon", gguf::Value::f32(nan), "expected a small positive number, got nan"},
                        Case{"theta", "qwen3.rope.freq_base", gguf::Value::f32(-1), "qwen3.rope.freq_base: expected a positive number, got -1"}}) {
    auto p = remake("qwen3-tiny-f32.gguf", c.tag, [&](std::string& k, gguf::Value& v) {
      if (k == c.key) v = c.v;
      return true;
    }, keep_all_t);
    std::string e = load_error(p);
    EXPECT_NE(e.find(c.phrase), std::string::npos) << c.tag << ": " << e;
  }
}

TEST(ModelErrors, RopeVariantsAreRefusedNotRunAsPlainRope) {
  const std::vector<std::pair<std::vector<std::pair<std::string, gguf::Value>>, const char*>> cases = {
      {{{"llama.rope.scaling.type", gguf::Value::str("yarn")}},
       "rope scaling type 'yarn' is not supported (lmfuse runs plain RoPE, with Llama 3.1+ frequency factors)"},
      {{{"llama.rope.freq_scale", gguf::Value::f32(0.25f)}}, "llama.rope.freq_scale 0.25 (linear rope scaling) is not supported"},
      {{{"llama.rope.dimension_count", gguf::Value::u32(16)}}, "llama.rope.dimension_count 16 != head dimension"},
  };
  int i = 0;
  for (const auto& [kv, phrase] : cases) {
    auto p = remake("llama-tiny-f32.gguf", "rope" + std::to_string(i++), keep_all_kv, keep_all_t, "", kv);
    std::string e = load_error(p);
    EXPECT_NE(e.find(phrase), std::string::npos) << e;
  }
  // "none" and a scale of 1 are plain RoPE and load
  auto ok = remake("llama-tiny-f32.gguf", "rope_plain", keep_all_kv, keep_all_t, "",
                   {{"llama.rope.scaling.type", gguf::Value::str("none")}, {"llama.rope.freq_scale", gguf::Value::f32(1)}});
  EXPECT_EQ(load_error(ok), "(no error)");
}

// Llama 3.1+ RoPE scaling (llama.cpp's rope_freqs.weight: head_dim / 2 F32 divisors) loads into
// the hyper-parameters; a tensor of another type, size or with a non-positive value is refused.
TEST(ModelErrors, RopeFrequencyFactors) {
  std::vector<float> ff(16);  // llama-tiny: head_dim 32
  for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.f + 0.5f * float(i);
  auto ok = remake("llama-tiny-f32.gguf", "rope_ff", keep_all_kv, keep_all_t,
                   Extra("rope_freqs.weight", DType::F32, {16}, f32_bytes(ff)));
  auto m = Model::load(ok);
  EXPECT_EQ(m->hp.rope_freq_factors, ff);
  EXPECT_TRUE(Model::load(kGolden + "llama-tiny-f32.gguf")->hp.rope_freq_factors.empty());
  auto with = [&](std::vector<float> v) {
    v.resize(16, 1.f);
    return Extra("rope_freqs.weight", DType::F32, {16}, f32_bytes(v));
  };
  const std::vector<std::pair<Extra, const char*>> cases = {
      {Extra("rope_freqs.weight"), "tensor 'rope_freqs.weight': expected [16] (head dimension / 2), got 64 elements"},
      {Extra("rope_freqs.weight", DType::F32, {8, 2}, f32_bytes(ff)), "expected [16] (head dimension / 2), got 16 elements in 2"},
      {Extra("rope_freqs.weight", DType::F16, {16}, std::vector<uint8_t>(32, 0)), "expected type f32, got f16"},
      {with({1.f, 0.f}), "factor 1 is 0, expected a positive number"},
      {with({1.f, 1.f, -2.f}), "factor 2 is -2, expected a positive number"},
      {with({std::numeric_limits<float>::quiet_NaN()}), "factor 0 is nan, expected a positive number"},
      {with({1.f, std::numeric_limits<float>::infinity()}), "factor 1 is inf, expected a positive number"},
  };
  int i = 0;
  for (const auto& [t, phrase] : cases) {
    auto p = remake("llama-tiny-f32.gguf", "rope_ff" + std::to_string(i++), keep_all_kv, keep_all_t, t);
    std::string e = load_error(p);
    EXPECT_NE(e.find(phrase), std::string::npos) << e;
  }
}

TEST(ModelErrors, InconsistentHeadCounts) {
  auto p = remake("qwen3-tiny-f32.gguf", "heads", [](std::string& k, gguf::Value& v) {
    if (k == "qwen3.attention.head_count_kv") v = gguf::Value::u32(3);
    return true;
  }, keep_all_t);
  std::string e = load_error(p);
  EXPECT_NE(e.find("not a multiple of head_count_kv 3"), std::string::npos) << e;
}

TEST(SessionErrors, TokenOutsideVocabulary) {
  auto m = Model::load(kGolden + "qwen3-tiny-q4_0.gguf");
  BackendOptions o;
  o.n_ctx = 16;
  o.n_threads = 1;
  auto b = make_cpu_backend(o);
  b->load(*m);
  Session s(*m, *b);
  std::vector<int32_t> bad = {1, 2, 320};
  try {
    s.eval(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 320 is outside the vocabulary (0..319)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.pos(), 0);
}

TEST(SessionErrors, PromptAndGenerationPastContextNeverOverwrite) {
  auto m = Model::load(kGolden + "qwen3-tiny-q4_0.gguf");
  BackendOptions o;
  o.n_ctx = 8;
  o.n_threads = 1;
  auto b = make_cpu_backend(o);
  b->load(*m);
  Session s(*m, *b);
  std::vector<int32_t> nine(9, 5), seven(7, 5);
  try {
    s.eval(nine);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt is 9 tokens long; the context holds 8"), std::string::npos) << e.what();
  }
  s.eval(seven);
  int32_t t = 3;
  s.eval(std::span(&t, 1));
  EXPECT_EQ(s.pos(), 8);
  EXPECT_THROW(s.eval(std::span(&t, 1)), Error);
  EXPECT_EQ(s.pos(), 8);
}

}  // namespace
}  // namespace lmf

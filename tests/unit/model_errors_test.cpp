// Bad models and bad requests fail with one clear error: unknown architecture, missing keys,
// wrong tensor shapes, unknown tensors, token ids outside the vocabulary, context overflow.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "backend/backend.h"
#include "format/gguf/gguf.h"
#include "model/model.h"
#include "runtime/session.h"
#include "util/status.h"

namespace lmf {
namespace {

const std::string kGolden = std::string(LMFUSE_SOURCE_DIR) + "/tests/data/golden/";

// Copies a golden model, letting the caller drop/replace metadata and tensors.
std::string remake(const std::string& src, const std::string& tag,
                   const std::function<bool(std::string&, gguf::Value&)>& kv_edit,
                   const std::function<bool(gguf::TensorInfo&)>& t_edit, bool add_extra_tensor = false) {
  auto f = gguf::File::open(kGolden + src);
  gguf::Writer w;
  for (auto [k, v] : f->metadata())
    if (kv_edit(k, v)) w.set(k, v);
  static std::vector<std::vector<uint8_t>> keep;  // data for re-shaped tensors
  for (auto t : f->tensors()) {
    const uint8_t* data = t.data;
    if (!t_edit(t)) continue;
    size_t n = row_bytes(t.type, t.ne[0]) * size_t(t.rows());
    keep.emplace_back(n, 0);
    std::memcpy(keep.back().data(), data, std::min(n, t.nbytes));
    w.add_tensor(t.name, t.type, t.ne, keep.back().data());
  }
  if (add_extra_tensor) {
    keep.emplace_back(64 * 4, 0);
    w.add_tensor("blk.0.mystery.weight", DType::F32, {64}, keep.back().data());
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
  auto p = remake("llama-tiny-f32.gguf", "extra", keep_all_kv, keep_all_t, true);
  std::string e = load_error(p);
  EXPECT_NE(e.find("'blk.0.mystery.weight' is not part of architecture 'llama'"), std::string::npos) << e;
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

// Unit tests of the converter's pieces: the safetensors reader's validation (every corruption
// is an error naming the file and tensor), config.json parsing, the llama Q/K permutation, and
// the 4-bit search rounding's RMSE on heavy-tailed weights (figure printed for docs/PERF.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/quant/quantize.h"
#include "format/safetensors/safetensors.h"
#include "model/convert.h"
#include "util/status.h"

namespace lmf {
namespace {

// A safetensors image: u64 header size, header JSON, data.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

std::string error_of(const std::vector<uint8_t>& img) {
  try {
    safetensors::File::open_memory("m.safetensors", img.data(), img.size());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConvertSafetensors, ReadsTensorsAndConvertsToF32) {
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]},"c":{"dtype":"F16","shape":[1],"data_offsets":[20,22]}})";
  auto img = image(h, 22);
  uint8_t* d = img.data() + 8 + h.size();
  const float a[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  std::memcpy(d, a, 16);
  const uint16_t b[2] = {0x3f80, 0xc000};  // bf16 1.0, -2.0
  std::memcpy(d + 16, b, 4);
  const uint16_t c = 0x3c00;  // fp16 1.0
  std::memcpy(d + 20, &c, 2);
  auto f = safetensors::File::open_memory("m.safetensors", img.data(), img.size());
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const auto* ta = f->find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->rows(), 2);
  EXPECT_EQ(ta->cols(), 2);
  float out[4];
  safetensors::to_f32(*ta, 0, 4, out);
  EXPECT_EQ(std::memcmp(out, a, 16), 0);
  safetensors::to_f32(*f->find("b"), 0, 2, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  safetensors::to_f32(*f->find("c"), 0, 1, out);
  EXPECT_EQ(out[0], 1.0f);
}

TEST(ConvertSafetensors, CorruptionsFailWithClearErrors) {
  struct Case {
    std::string header;
    size_t data;
    const char* needle;
  };
  const Case cases[] = {
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8, "truncated"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", 16, "needs 16"},
      {R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16, "dtype 'I64' is not supported"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       16, "overlap"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "non-negative"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "end before"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", 8, "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8, "not valid JSON"},
      {R"(["a"])", 8, "JSON object"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(image(c.header, c.data));
    EXPECT_NE(e.find("m.safetensors"), std::string::npos) << c.header << " -> " << e;
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.header << " -> " << e;
  }
  // A size field larger than the file.
  auto img = image(R"({})", 0);
  const uint64_t big = 1000;
  std::memcpy(img.data(), &big, 8);
  EXPECT_NE(error_of(img).find("truncated"), std::string::npos) << error_of(img);
  EXPECT_NE(error_of({1, 2, 3}).find("too short"), std::string::npos);
}

const char* kQwen3Config = R"({
  "architectures": ["Qwen3ForCausalLM"], "vocab_size": 320, "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 96,
  "max_position_embeddings": 512, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "eos_token_id": [5, 6]})";

TEST(ConvertConfig, ParsesHyperParameters) {
  HfConfig c = parse_hf_config(kQwen3Config, "config.json");
  EXPECT_EQ(c.hp.arch, Arch::Qwen3);
  EXPECT_EQ(c.hp.arch_name, "qwen3");
  EXPECT_EQ(c.hp.head_dim, 32);
  EXPECT_EQ(c.hp.n_head_kv, 2);
  EXPECT_TRUE(c.has_head_dim);
  EXPECT_FLOAT_EQ(c.hp.rope_theta, 1e6f);
  EXPECT_EQ(c.tie_word_embeddings, std::optional<bool>(true));
  EXPECT_EQ(c.eos_ids, (std::vector<int32_t>{5, 6}));
  // transformers 5 nests rope_theta in rope_parameters.
  HfConfig l = parse_hf_config(
      R"({"architectures":["LlamaForCausalLM"],"vocab_size":10,"hidden_size":64,"num_hidden_layers":1,
          "num_attention_heads":8,"intermediate_size":96,"rope_parameters":{"rope_type":"default","rope_theta":500000.0}})",
      "config.json");
  EXPECT_EQ(l.hp.head_dim, 8);
  EXPECT_FALSE(l.has_head_dim);
  EXPECT_FLOAT_EQ(l.hp.rope_theta, 5e5f);
  EXPECT_FALSE(l.hp.rope_neox);
}

TEST(ConvertConfig, RejectsWhatItCannotRun) {
  auto err = [](const std::string& j) {
    try {
      parse_hf_config(j, "config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err(R"({"architectures":["GPT2LMHeadModel"]})").find("'GPT2LMHeadModel' is not supported"), std::string::npos);
  std::string base = kQwen3Config;
  base.pop_back();
  EXPECT_NE(err(base + R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0}})").find("'llama3'"), std::string::npos);
  EXPECT_NE(err(base + R"(,"num_key_value_heads":3})").find("num_key_value_heads"), std::string::npos);
  EXPECT_NE(err(base + R"(,"hidden_size":"64"})").find("'hidden_size' must be an integer"), std::string::npos);
  EXPECT_NE(err("{").find("not valid JSON"), std::string::npos);
}

// The permutation must equal convert_hf_to_gguf's numpy expression
// w.reshape(n_head, 2, hd/2, n_in).swapaxes(1, 2).reshape(w.shape), written out index by index.
TEST(ConvertLlama, PermutationMatchesReshapeSwapaxes) {
  for (int64_t n_head : {1, 2, 8}) {
    const int64_t hd = 32, rows = n_head * hd;
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t s = 0; s < 2; ++s) {
          const int64_t dst = ((h * (hd / 2)) + i) * 2 + s;  // swapped shape [n_head, hd/2, 2]
          const int64_t src = (h * 2 + s) * (hd / 2) + i;    // original shape [n_head, 2, hd/2]
          EXPECT_EQ(llama_permuted_src_row(dst, rows, n_head), src);
        }
  }
}

// Heavy-tailed weights (Student-t, 5 degrees of freedom, per-row scales), closer to trained LLM
// weights than Gaussians: the search rounding's RMSE reduction, printed for docs/PERF.md.
TEST(ConvertRounding, SearchLowersRmseOnHeavyTailedWeights) {
  std::mt19937 rng(7);
  std::student_t_distribution<float> t5(5.0f);
  std::lognormal_distribution<float> row_scale(0.0f, 0.5f);
  const int64_t rows = 256, cols = 1024;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = 0.02f * row_scale(rng);
    for (int64_t c = 0; c < cols; ++c) x[size_t(r * cols + c)] = s * t5(rng);
  }
  for (DType t : {DType::Q4_0, DType::Q4_1}) {
    std::vector<uint8_t> q(row_bytes(t, cols));
    std::vector<float> y(static_cast<size_t>(cols));
    double e_ref = 0, e_search = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = &x[size_t(r * cols)];
      for (int pass = 0; pass < 2; ++pass) {
        if (pass == 0) quantize_row(t, xr, q.data(), cols);
        else quantize_row_search(t, xr, q.data(), cols);
        dequantize_row(t, q.data(), y.data(), cols);
        double e = 0;
        for (int64_t c = 0; c < cols; ++c) e += (double(y[size_t(c)]) - xr[c]) * (double(y[size_t(c)]) - xr[c]);
        (pass == 0 ? e_ref : e_search) += e;
      }
    }
    const double red = 1.0 - std::sqrt(e_search / e_ref);
    std::printf("[ search   ] %s Student-t(5) weights: RMSE reference %.5g, search %.5g (%.1f%% lower)\n",
                dtype_name(t), std::sqrt(e_ref / double(x.size())), std::sqrt(e_search / double(x.size())),
                100 * red);
    EXPECT_GT(red, 0.03) << dtype_name(t);
  }
}

}  // namespace
}  // namespace lmf

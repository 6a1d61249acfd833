// lmfuse random-model: a complete GGUF with seeded random weights of a real model's shapes and a
// real tokenizer, written in seconds. Q4_0/Q4_1/Q8_0 blocks are generated directly (random codes
// and finite, non-zero scales), never all-zero, so the file behaves like a real one for speed; the
// other quantized types (Q5_0/Q5_1, K-quants, IQ4) come from a pool of blocks quantized from
// random data. --type q4_k_m writes llama-quantize's Q4_K_M mix.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "cli_common.h"
#include "model/quant_mix.h"
#include "format/gguf/gguf.h"
#include "format/quant/half.h"
#include "format/quant/quantize.h"
#include "model/arch_table.h"
#include "model/convert.h"
#include "model/presets.h"
#include "model/rope_scaling.h"
#include "tokenizer/tokenizer.h"
#include "util/progress.h"
#include "util/status.h"

namespace lmf::cli {
namespace {

// splitmix64: tiny, fast and good enough for benchmark weights.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
};

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Fills rows x cols of type t. Weights are roughly uniform with std ~ 0.5/sqrt(cols), so the
// residual stream stays finite through deep stacks.
void fill_matrix(uint8_t* dst, DType t, int64_t rows, int64_t cols, uint64_t seed) {
  Rng r{seed};
  const float stdv = 0.5f / std::sqrt(float(cols));
  const int64_t n = rows * cols;
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1: {
      const bool has_min = t == DType::Q4_1;
      const size_t bb = has_min ? sizeof(BlockQ4_1) : sizeof(BlockQ4_0);
      // codes uniform in 0..15 (std 4.6): d = std / 4.6, varied per block by +-25 %
      for (int64_t b = 0; b < n / QK; ++b) {
        uint8_t* p = dst + size_t(b) * bb;
        const float d = stdv / 4.6f * (0.75f + 0.5f * r.uniform());
        const uint16_t dh = f32_to_fp16(d);
        std::memcpy(p, &dh, 2);
        uint8_t* qs = p + 2;
        if (has_min) {
          const uint16_t mh = f32_to_fp16(-8.0f * d);
          std::memcpy(p + 2, &mh, 2);
          qs = p + 4;
        }
        uint64_t a = r.next(), c = r.next();
        std::memcpy(qs, &a, 8);
        std::memcpy(qs + 8, &c, 8);
      }
      break;
    }
    case DType::Q8_0:
      for (int64_t b = 0; b < n / QK; ++b) {
        auto* blk = reinterpret_cast<BlockQ8_0*>(dst + size_t(b) * sizeof(BlockQ8_0));
        blk->d = f32_to_fp16(stdv / 73.0f * (0.75f + 0.5f * r.uniform()));
        for (int i = 0; i < QK; i += 8) {
          uint64_t v = r.next();
          for (int j = 0; j < 8; ++j) {
            int q = int((v >> (8 * j)) & 0xff) - 128;
            blk->qs[i + j] = int8_t(q == -128 ? -127 : q);
          }
        }
      }
      break;
    case DType::F16:
    case DType::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        float v = (r.uniform() * 2 - 1) * stdv * 1.732f;
        h[i] = t == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
      }
      break;
    }
    case DType::F32: {
      auto* f = reinterpret_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) f[i] = (r.uniform() * 2 - 1) * stdv * 1.732f;
      break;
    }
    default: {
      // A pool of 64K weights quantized from uniform data (std stdv), then every block drawn from
      // the pool: quantizing all of a large model's weights would take minutes.
      const TypeInfo& ti = type_info(t);
      const int64_t blocks = n / ti.block;
      const int64_t pool_blocks = std::min<int64_t>(blocks, 65536 / ti.block);
      std::vector<float> x(size_t(pool_blocks * ti.block));
      for (float& v : x) v = (r.uniform() * 2 - 1) * stdv * 1.732f;
      std::vector<uint8_t> pool(size_t(pool_blocks) * ti.block_bytes);
      quantize_row(t, x.data(), pool.data(), pool_blocks * ti.block);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t k = b < pool_blocks ? b : int64_t(r.next() % uint64_t(pool_blocks));
        std::memcpy(dst + size_t(b) * ti.block_bytes, pool.data() + size_t(k) * ti.block_bytes, ti.block_bytes);
      }
      break;
    }
  }
}

// The Qwen3 tokenizer that CMake unpacks into the source tree's models/qwen3-tokenizer: found
// from the binary (build/lmfuse -> models/), else from the working folder; "" when neither has it.
std::string default_tokenizer() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> dirs;
  if (!ec) dirs = {exe.parent_path().parent_path() / "models/qwen3-tokenizer", exe.parent_path() / "models/qwen3-tokenizer"};
  dirs.push_back("models/qwen3-tokenizer");
  for (const auto& d : dirs)
    if (fs::exists(d / "tokenizer.json", ec)) return d.string();
  return "";
}

}  // namespace

int cmd_random_model(int argc, char** argv) {
  std::string preset_list;
  for (const auto& p : presets()) preset_list += cat(preset_list.empty() ? "" : "|", p.name);
  CLI::App app{"Write a GGUF with seeded random weights of a real model's shapes and a real tokenizer.\n\n"
               "examples:\n"
               "  lmfuse random-model --preset qwen3-0.6b --type q4_0 -o qwen3-0.6b-q4_0.gguf\n"
               "  lmfuse random-model --preset qwen3-8b --type q4_0 --tokenizer /path/to/qwen3-tokenizer -o q8b.gguf",
               "lmfuse random-model"};
  std::string preset_name, type_s = "q4_0", out, tok_path;
  uint64_t seed = 1;
  bool no_tokenizer = false;
  int64_t n_layer = 0, n_vocab = 0;
  app.add_option("--preset", preset_name, preset_list)->required();
  app.add_option("--type", type_s,
                 cat("a type or a quantization mix as `lmfuse quantize` writes it: ", mix_names(), " (default q4_0)"));
  app.add_option("--seed", seed, "random seed (default 1)");
  app.add_option("-o,--output", out, "output GGUF file")->required();
  app.add_option("--tokenizer", tok_path,
                 "directory with tokenizer.json (+ tokenizer_config.json), or a tokenizer.json file "
                 "(default: $LMFUSE_TOKENIZER, else the models/qwen3-tokenizer that CMake unpacks)");
  app.add_flag("--no-tokenizer", no_tokenizer, "write no tokenizer (the file can still be benchmarked)");
  app.add_option("--layers", n_layer, "number of layers (default: the preset's)")->check(in_range(1, 1024));
  app.add_option("--vocab", n_vocab,
                 "vocabulary size (default: the preset's; a smaller one than the tokenizer's writes no tokenizer)")
      ->check(in_range(32, int64_t(1) << 22));
  CLI11_PARSE(app, argc, argv);

  Preset p = find_preset(preset_name);  // a copy: --layers / --vocab override its shape
  if (n_layer > 0) p.n_layer = n_layer;
  if (n_vocab > 0) p.n_vocab = n_vocab;
  auto mix_opt = parse_mix(type_s);
  if (!mix_opt) LMF_FAIL("--type: expected one of ", mix_names(), ", got '", type_s, "'");
  const QuantMix mix = *mix_opt;
  int fallbacks = 0;  // matrices in a 32-block type because their rows do not split into 256
  gguf::Writer w;
  const std::string a = p.arch;
  w.set(key::kArch, gguf::Value::str(a));
  w.set("general.name", gguf::Value::str(cat(p.name, " (random weights, seed ", seed, ")")));
  w.set("general.file_type", gguf::Value::u32(mix.file_type));
  w.set(fmt_key(key::kContext, a), gguf::Value::u32(uint32_t(p.n_ctx)));
  w.set(fmt_key(key::kEmbd, a), gguf::Value::u32(uint32_t(p.n_embd)));
  w.set(fmt_key(key::kBlocks, a), gguf::Value::u32(uint32_t(p.n_layer)));
  w.set(fmt_key(key::kFF, a), gguf::Value::u32(uint32_t(p.n_ff)));
  w.set(fmt_key(key::kHeads, a), gguf::Value::u32(uint32_t(p.n_head)));
  w.set(fmt_key(key::kHeadsKV, a), gguf::Value::u32(uint32_t(p.n_head_kv)));
  w.set(fmt_key(key::kKeyLen, a), gguf::Value::u32(uint32_t(p.head_dim)));
  w.set(fmt_key(key::kValLen, a), gguf::Value::u32(uint32_t(p.head_dim)));
  w.set(fmt_key(key::kRopeBase, a), gguf::Value::f32(float(p.rope_theta)));
  w.set(fmt_key(key::kRmsEps, a), gguf::Value::f32(float(p.rms_eps)));
  w.set(fmt_key(key::kVocab, a), gguf::Value::u32(uint32_t(p.n_vocab)));

  if (!no_tokenizer) {
    if (tok_path.empty()) {
      const char* env = std::getenv("LMFUSE_TOKENIZER");
      tok_path = env ? env : default_tokenizer();
      if (tok_path.empty())
        LMF_FAIL("no tokenizer at the default models/qwen3-tokenizer (beside the build folder; CMake unpacks it): ",
                 "give --tokenizer DIR, set LMFUSE_TOKENIZER, or write none with --no-tokenizer");
    }
    std::unique_ptr<Tokenizer> tok = Tokenizer::from_hf_path(tok_path);
    if (tok->n_vocab() > p.n_vocab) {
      // Keep the real shapes: a tokenizer larger than the vocabulary cannot be embedded.
      std::fprintf(stderr,
                   "warning: tokenizer %s has %d tokens, more than the %lld of %s; writing no tokenizer "
                   "(give a matching --tokenizer to embed one)\n",
                   tok_path.c_str(), tok->n_vocab(), (long long)p.n_vocab, p.name);
    } else {
      tok->to_gguf(w, int32_t(p.n_vocab));
    }
  }

  // Tensors in llama.cpp's order; producers run at write time, one tensor at a time.
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    bool fell_back = false;
    const DType t = mix_type(mix, {name, cols, int(p.n_layer), int(p.n_head / p.n_head_kv), !p.tied}, &fell_back);
    fallbacks += fell_back;
    w.add_tensor(name, t, {cols, rows}, [=](uint8_t* dst) { fill_matrix(dst, t, rows, cols, seed ^ hash_name(name)); });
  };
  auto vector = [&](const std::string& name, int64_t n) {
    w.add_tensor(name, DType::F32, {n}, [=](uint8_t* dst) {
      Rng r{seed ^ hash_name(name)};
      auto* f = reinterpret_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) f[i] = 1.0f + 0.1f * (r.uniform() * 2 - 1);
    });
  };
  if (p.llama3_rope_factor > 0) {  // Llama 3.1+: the real model's RoPE frequency divisors, first (as llama.cpp)
    Llama3Rope r;
    r.factor = p.llama3_rope_factor;
    const std::vector<float> ff = llama3_rope_factors(r, p.rope_theta, p.head_dim);
    w.add_tensor(tname::kRopeFreqs, DType::F32, {int64_t(ff.size())},
                 [ff](uint8_t* dst) { std::memcpy(dst, ff.data(), ff.size() * sizeof(float)); });
  }
  matrix(tname::kTokEmbd, p.n_vocab, p.n_embd);
  for (int l = 0; l < int(p.n_layer); ++l) {
    auto n = [&](const char* pat) { return fmt_tensor(pat, l); };
    vector(n(tname::kAttnNorm), p.n_embd);
    matrix(n(tname::kQ), p.n_head * p.head_dim, p.n_embd);
    matrix(n(tname::kK), p.n_head_kv * p.head_dim, p.n_embd);
    matrix(n(tname::kV), p.n_head_kv * p.head_dim, p.n_embd);
    if (a == "qwen3") {
      vector(n(tname::kQNorm), p.head_dim);
      vector(n(tname::kKNorm), p.head_dim);
    }
    matrix(n(tname::kO), p.n_embd, p.n_head * p.head_dim);
    vector(n(tname::kFFNNorm), p.n_embd);
    matrix(n(tname::kGate), p.n_ff, p.n_embd);
    matrix(n(tname::kUp), p.n_ff, p.n_embd);
    matrix(n(tname::kDown), p.n_embd, p.n_ff);
  }
  vector(tname::kOutNorm, p.n_embd);
  if (!p.tied) matrix(tname::kOutput, p.n_vocab, p.n_embd);
  if (fallbacks)
    std::fprintf(stderr, "note: %d matrices have rows that do not split into blocks of 256; written in a 32-block type "
                 "instead (as llama-quantize does)\n", fallbacks);

  Progress prog("random-model " + out, w.data_bytes());
  w.write(out, [&](uint64_t bytes, int64_t done, int64_t total) { prog.update(bytes, done, total); });
  prog.finish();
  std::fprintf(stderr, "wrote %s: %s %s, %zu tensors, %.2f GiB\n", out.c_str(), p.name, mix.name.c_str(), w.tensor_count(),
               double(w.data_bytes()) / double(1ull << 30));
  return 0;
}

}  // namespace lmf::cli

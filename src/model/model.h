// A loaded model: hyper-parameters read from GGUF metadata through the architecture table, and
// every weight bound with a shape check. Weights stay in the file mapping (zero-copy).
#pragma once
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf/gguf.h"
#include "format/tensor.h"

namespace lmf {

enum class Arch { Qwen3, Qwen2, Llama };

struct HParams {
  Arch arch = Arch::Qwen3;
  std::string arch_name;  // GGUF general.architecture
  int64_t n_vocab = 0, n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-6f, rope_theta = 10000.f;
  bool rope_neox = true;  // qwen2/qwen3: rotate halves (NeoX); llama: adjacent pairs
  // RoPE frequency divisors, [head_dim / 2] (pair i turns at theta^(-2i/d) / factor[i]), or empty:
  // Llama 3.1+ scaling, from the GGUF tensor rope_freqs.weight.
  std::vector<float> rope_freq_factors;
  bool qk_norm = false;   // qwen3 per-head q/k RMSNorm
  bool qkv_bias = false;  // qwen2
  bool tied_output = false;
  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  // The fp16 K and V cache of every layer for n_ctx positions (what each backend allocates).
  uint64_t kv_cache_bytes(int64_t n_ctx) const { return uint64_t(n_layer) * 2 * uint64_t(n_ctx) * uint64_t(kv_dim()) * 2; }
};

struct LayerWeights {
  Weight attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo;
  Weight ffn_norm, w_gate, w_up, w_down;
};

// Which slice of a tensor-parallel split a Model is (model/tp_split.h); size 1: the whole model.
// A rank's HParams give its own heads, KV heads and FFN rows; n_vocab stays the whole vocabulary
// (token ids are checked against it) while its output holds rows [vocab_begin, vocab_end).
struct TpPlace {
  int rank = 0, size = 1;
  int64_t vocab_begin = 0, vocab_end = 0;
  // tok_embd holds the same vocabulary rows as output (else the whole table, replicated).
  bool vocab_parallel_embedding = false;
};

struct Model {
  std::unique_ptr<gguf::File> file;  // null for a tensor-parallel rank: its weights are its parent's
  HParams hp;
  Weight tok_embd, output_norm, output;  // output aliases tok_embd when tied
  std::vector<LayerWeights> layers;
  TpPlace tp;
  // Weights this model holds a copy of (a rank's column slices; 64-byte aligned), where the
  // others point into a file mapping.
  struct FreeBytes {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<uint8_t, FreeBytes>> owned;

  // Loads and validates; errors name the file and the problem (expected vs got).
  static std::unique_ptr<Model> load(const std::string& path);
  uint64_t weight_bytes() const;   // bytes of all weights (output counted once when tied)
  // The bound weights, each once (output not repeated when it aliases tok_embd).
  std::vector<const Weight*> weights() const;
  uint64_t param_count() const;
  std::string type_summary() const;  // dominant weight type, e.g. "Q4_0"
  // Whether any projection (the layers' q/k/v/o/gate/up/down, the logits) is block-quantized
  // (Q4_0, Q4_1, Q8_0): the matmuls that quantize their input to activation codes. A backend's
  // description names its codes only then; F16/BF16/F32 models take float activations.
  bool quantized_matmuls() const;
};

}  // namespace lmf

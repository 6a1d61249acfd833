// The architecture table: GGUF metadata keys and per-layer tensor names, as llama.cpp spells
// them, plus the per-architecture traits. Architecture files (qwen3.cpp, qwen2.cpp, llama.cpp)
// read hyper-parameters through these names and bind tensors with shape checks.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"

namespace lmf {

namespace key {  // "%s" is replaced by the architecture name
inline constexpr const char* kArch = "general.architecture";
inline constexpr const char* kContext = "%s.context_length";
inline constexpr const char* kEmbd = "%s.embedding_length";
inline constexpr const char* kBlocks = "%s.block_count";
inline constexpr const char* kFF = "%s.feed_forward_length";
inline constexpr const char* kHeads = "%s.attention.head_count";
inline constexpr const char* kHeadsKV = "%s.attention.head_count_kv";
inline constexpr const char* kKeyLen = "%s.attention.key_length";
inline constexpr const char* kValLen = "%s.attention.value_length";
inline constexpr const char* kRmsEps = "%s.attention.layer_norm_rms_epsilon";
inline constexpr const char* kRopeBase = "%s.rope.freq_base";
inline constexpr const char* kVocab = "%s.vocab_size";
inline constexpr const char* kRopeDims = "%s.rope.dimension_count";  // written by llama.cpp for llama
// RoPE variants lmfuse does not run; a file that asks for one is refused, not run with plain RoPE.
inline constexpr const char* kRopeScalingType = "%s.rope.scaling.type";
inline constexpr const char* kRopeFreqScale = "%s.rope.freq_scale";  // older files' linear scaling
}  // namespace key

namespace tname {  // "%d" is replaced by the layer index
inline constexpr const char* kTokEmbd = "token_embd.weight";
inline constexpr const char* kOutNorm = "output_norm.weight";
inline constexpr const char* kOutput = "output.weight";
inline constexpr const char* kRopeFreqs = "rope_freqs.weight";  // Llama 3.1+ per-frequency divisors
inline constexpr const char* kAttnNorm = "blk.%d.attn_norm.weight";
inline constexpr const char* kQ = "blk.%d.attn_q.weight";
inline constexpr const char* kK = "blk.%d.attn_k.weight";
inline constexpr const char* kV = "blk.%d.attn_v.weight";
inline constexpr const char* kQBias = "blk.%d.attn_q.bias";
inline constexpr const char* kKBias = "blk.%d.attn_k.bias";
inline constexpr const char* kVBias = "blk.%d.attn_v.bias";
inline constexpr const char* kQNorm = "blk.%d.attn_q_norm.weight";
inline constexpr const char* kKNorm = "blk.%d.attn_k_norm.weight";
inline constexpr const char* kO = "blk.%d.attn_output.weight";
inline constexpr const char* kFFNNorm = "blk.%d.ffn_norm.weight";
inline constexpr const char* kGate = "blk.%d.ffn_gate.weight";
inline constexpr const char* kUp = "blk.%d.ffn_up.weight";
inline constexpr const char* kDown = "blk.%d.ffn_down.weight";
}  // namespace tname

std::string fmt_key(const char* pattern, std::string_view arch);
std::string fmt_tensor(const char* pattern, int layer);

// Binds tensors from a GGUF file with shape checks; tracks which tensors were used so unknown
// tensors can be reported.
class TensorBinder {
 public:
  explicit TensorBinder(const gguf::File& f) : f_(f) {}
  // Expected shape in [rows, cols] (rows = 1 for vectors). Mismatch:
  // "tensor 'blk.3.attn_q.weight': expected [4096, 4096], got [4096, 2048]".
  Weight bind(const std::string& name, int64_t rows, int64_t cols, bool vector = false);
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  // Errors if the file holds tensors no architecture binding claimed.
  void check_all_used() const;

 private:
  const gguf::File& f_;
  std::vector<std::string> used_;
};

struct ArchDef {
  const char* name;  // general.architecture
  Arch arch;
  void (*read_hparams)(const gguf::File& f, HParams& hp);
  void (*bind)(TensorBinder& b, const HParams& hp, Model& m);
};
const std::vector<ArchDef>& arch_table();

// Shared helpers for architecture files.
void read_common_hparams(const gguf::File& f, HParams& hp);
void bind_common(TensorBinder& b, const HParams& hp, Model& m);

// Architecture definitions (one file each).
ArchDef arch_qwen3();
ArchDef arch_qwen2();
ArchDef arch_llama();

}  // namespace lmf

// Shapes of real models, for `lmfuse random-model` (benchmarks without downloads).
#pragma once
#include <string>
#include <vector>

namespace lmf {

struct Preset {
  const char* name;  // "qwen3-8b"
  const char* arch;  // GGUF general.architecture
  int64_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
  bool tied;
  double rope_theta, rms_eps;
  double llama3_rope_factor = 0;  // Llama 3.1+ RoPE scaling factor (model/rope_scaling.h), 0: plain RoPE
};

const std::vector<Preset>& presets();
const Preset& find_preset(const std::string& name);  // clear error listing the presets

}  // namespace lmf

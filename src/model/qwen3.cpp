// Qwen3: per-head q/k RMSNorm before RoPE, NeoX-style RoPE (rotate halves), GQA, SwiGLU,
// tied or untied output, no biases. head_dim comes from attention.key_length and may differ
// from n_embd / n_head.
#include "model/arch_table.h"

namespace lmf {

ArchDef arch_qwen3() {
  return {"qwen3", Arch::Qwen3,
          [](const gguf::File& f, HParams& hp) {
            read_common_hparams(f, hp);
            hp.rope_neox = true;
            hp.qk_norm = true;
            hp.qkv_bias = false;
          },
          [](TensorBinder& b, const HParams& hp, Model& m) { bind_common(b, hp, m); }};
}

}  // namespace lmf

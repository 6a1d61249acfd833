// Qwen2: like Llama with biases on the Q/K/V projections and NeoX-style RoPE; no q/k norm.
#include "model/arch_table.h"

namespace lmf {

ArchDef arch_qwen2() {
  return {"qwen2", Arch::Qwen2,
          [](const gguf::File& f, HParams& hp) {
            read_common_hparams(f, hp);
            hp.rope_neox = true;
            hp.qk_norm = false;
            hp.qkv_bias = true;
          },
          [](TensorBinder& b, const HParams& hp, Model& m) { bind_common(b, hp, m); }};
}

}  // namespace lmf

// Llama (Llama 2/3, SmolLM2): no biases, no q/k norm. GGUF files store Q and K with their rows
// permuted (llama.cpp's converter does it) so RoPE rotates adjacent pairs (GGML "normal" mode).
#include "model/arch_table.h"

namespace lmf {

ArchDef arch_llama() {
  return {"llama", Arch::Llama,
          [](const gguf::File& f, HParams& hp) {
            read_common_hparams(f, hp);
            hp.rope_neox = false;
            hp.qk_norm = false;
            hp.qkv_bias = false;
          },
          [](TensorBinder& b, const HParams& hp, Model& m) { bind_common(b, hp, m); }};
}

}  // namespace lmf

// Llama 3.1+ RoPE scaling ("rope_type": "llama3" in config.json) in the form GGUF stores it: one
// divisor per RoPE frequency (the tensor rope_freqs.weight, head_dim / 2 F32 values), so pair i
// turns at theta^(-2i/d) / divisor[i]. Used by `lmfuse convert` and `lmfuse random-model`; the
// backends only ever see the divisors (HParams::rope_freq_factors).
#pragma once
#include <cstdint>
#include <vector>

namespace lmf {

struct Llama3Rope {
  double factor = 8.0;           // Llama 3.1: 8; Llama 3.2 1B/3B: 32
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_ctx = 8192.0;  // original_max_position_embeddings
};

// With wavelength w_i = 2 pi theta^(2i/d): 1 where w_i < ctx / high_freq_factor, `factor` where
// w_i > ctx / low_freq_factor, and between them 1 / ((1 - s) / factor + s) with
// s = (ctx / w_i - low) / (high - low), which turns transformers' smoothed inverse frequency
// ((1 - s) inv / factor + s inv) into inv / divisor. llama.cpp's converter writes the same values.
std::vector<float> llama3_rope_factors(const Llama3Rope& r, double theta, int64_t head_dim);

}  // namespace lmf

// Quantization mixes: which GGUF tensor gets which type. The one place that decides it, used by
// `lmfuse convert --type`, `lmfuse quantize` and `lmfuse random-model --type`.
//
// A plain type ("q4_0", "q8_0", "f16", "q6_k", ...) gives every 2-D weight that type. A K-quant
// mix ("q4_k_m", "q3_k_m", "q2_k", ...) follows llama-quantize's per-tensor rules (its
// llama_tensor_get_type, as documented by its sources and outputs; restated here, not copied):
// output.weight Q6_K; attn_v and ffn_down promoted on the layers use_more_bits() picks (the first
// and last eighth and every third layer between) for the _M mixes; a few more bits for Q2_K /
// Q3_K / Q4_K_S on the first layers. A row length that the chosen 256-block type cannot hold
// falls back to the 32-block type of about the same size (llama-quantize's fallback table).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "format/quant/types.h"

namespace lmf {

struct QuantMix {
  std::string name;    // "q4_k_m", or a type name for a plain type
  DType base;          // the type of most 2-D weights
  uint32_t file_type;  // general.file_type (llama.cpp's LLAMA_FTYPE_MOSTLY_*)
  bool k_rules;        // the per-tensor promotions apply (K-quant and IQ4 mixes)
};

// "q4_k_m", "Q4_K_M", "q6_k", "iq4_xs", "q4_0", "f16", ... (case-insensitive); nullopt if unknown.
std::optional<QuantMix> parse_mix(std::string_view s);
// Every accepted name, for help texts and errors: "q4_k_m, q4_k_s, ...".
std::string mix_names();

struct TensorRole {
  std::string_view name;  // GGUF tensor name, e.g. "blk.3.attn_v.weight"
  int64_t cols = 0;       // row length (ne[0])
  int n_layer = 0;        // block count of the model
  int n_gqa = 1;          // n_head / n_head_kv
  bool has_output = true; // false: tied embeddings, token_embd.weight is the output matrix too
};

// The type of a 2-D weight under `mix`. Never a type whose block does not divide cols (falls
// back to a 32-block type, then F16; *fell_back says so).
DType mix_type(const QuantMix& mix, const TensorRole& t, bool* fell_back = nullptr);

}  // namespace lmf

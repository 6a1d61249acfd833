// `lmfuse quantize`: a GGUF file with float weights (F32/F16/BF16) -> the same model in a
// quantization mix (quant_mix.h). Metadata is copied unchanged except general.file_type; 1-D
// tensors (norms, biases, rope factors) stay as they are. Writes "<out>.tmp", renamed when done.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/quant_mix.h"

namespace lmf {

struct QuantizeOptions {
  std::string in, out;
  QuantMix mix;
  std::optional<DType> output_type, embed_type;  // override the mix for these two
  int threads = 0;                                // 0: all cores
  bool force = false;
  bool allow_requantize = false;  // accept already-quantized inputs (quality loss: says so)
  bool progress = true;
};

struct QuantizeResult {
  size_t n_tensors = 0;
  uint64_t bytes_in = 0, bytes_out = 0;  // tensor data
  std::map<std::string, std::pair<int, uint64_t>> by_type;  // type name -> (tensors, bytes)
  std::vector<std::string> notes;
};

QuantizeResult quantize_gguf(const QuantizeOptions& o);

}  // namespace lmf

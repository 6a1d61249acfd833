// Weight types and GGUF block layouts. Numeric values are GGML's type ids (they appear in GGUF
// files). A row of n elements of a block type is n/block blocks laid out back to back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lmf {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 8,
  BF16 = 30,
};

struct TypeInfo {
  const char* name;    // "q4_0"
  int64_t block;       // elements per block (1 for float types)
  size_t block_bytes;  // bytes per block
  bool quantized;
};

bool dtype_supported(uint32_t ggml_type);      // one of the above
const char* ggml_type_name(uint32_t ggml_type);  // any GGML id, "type 42" if unknown to lmfuse
const TypeInfo& type_info(DType t);
inline const char* dtype_name(DType t) { return type_info(t).name; }
// Bytes of a row of n elements; n must be a multiple of the block size.
size_t row_bytes(DType t, int64_t n);
std::optional<DType> parse_dtype(std::string_view s);  // "q4_0", "Q4_0", "f16", "bf16", ...

constexpr int QK = 32;  // block size of every quantized type here

// Q4_0: x = d * (q - 8), q in [0, 15]. qs[j] holds element j (low nibble) and j+16 (high nibble).
struct BlockQ4_0 {
  uint16_t d;  // fp16 scale
  uint8_t qs[QK / 2];
};
// Q4_1: x = d * q + m, q in [0, 15]; same nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 minimum
  uint8_t qs[QK / 2];
};
// Q8_0: x = d * q, q in [-127, 127].
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[QK];
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);

}  // namespace lmf

// Weight types and GGUF block layouts. Numeric values are GGML's type ids (they appear in GGUF
// files). A row of n elements of a block type is n/block blocks laid out back to back; n must be
// a multiple of type_info(t).block (32 for the Q4/Q5/Q8 "legacy" types and IQ4_NL, 256 for the
// K-quants and IQ4_XS). The 256-block layouts live in kquants.h and iquants.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace lmf {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,  // activation-side type (f32 scale, int8 codes, block sums); GGUF files rarely hold it
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
};

struct TypeInfo {
  const char* name;    // GGML's spelling: "q4_0", "q4_K", "iq4_xs"
  int64_t block;       // elements per block (1 for float types, 32 or 256 for quantized ones)
  size_t block_bytes;  // bytes per block
  bool quantized;
  int64_t sub_block;   // elements per scale: 16 or 32 inside a 256-block; == block otherwise
};

bool dtype_supported(uint32_t ggml_type);      // one of the above
const char* ggml_type_name(uint32_t ggml_type);  // any GGML id, "type 42" if unknown to lmfuse
const TypeInfo& type_info(DType t);
inline const char* dtype_name(DType t) { return type_info(t).name; }
std::span<const DType> all_dtypes();  // every type above, in a fixed order (float, 32-blocks, 256-blocks)
// Bytes of a row of n elements; n must be a multiple of the block size.
size_t row_bytes(DType t, int64_t n);
// "q4_0", "Q4_0", "f16", "bf16", "q4_k", "Q4_K", "iq4_xs", ... (case-insensitive).
std::optional<DType> parse_dtype(std::string_view s);

// Block size of the 32-element types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) that the backends'
// kernels assume. Not the block of every quantized type: new code uses type_info(t).block.
constexpr int QK = 32;

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
// Q5_0: x = d * (q - 16), q in [0, 31]. Low 4 bits as Q4_0's nibbles; bit 4 of element j is bit j
// of qh (a little-endian uint32, stored as bytes so the block stays 2-byte aligned).
struct BlockQ5_0 {
  uint16_t d;  // fp16 scale
  uint8_t qh[4];
  uint8_t qs[QK / 2];
};
// Q5_1: x = d * q + m, q in [0, 31]; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 minimum
  uint8_t qh[4];
  uint8_t qs[QK / 2];
};
// Q8_0: x = d * q, q in [-127, 127].
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[QK];
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);

}  // namespace lmf

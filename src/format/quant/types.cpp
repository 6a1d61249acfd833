#include "format/quant/types.h"

#include <cctype>
#include <string>

#include "util/status.h"

namespace lmf {

namespace {

// GGML's names for its type ids, so an unsupported tensor can be reported by name ("q4_K").
// Ids 4 and 5 (q4_2, q4_3) were removed from GGML long ago; 31-33 were removed q4_0_4_4 etc.
const char* const kGgmlNames[] = {
    "f32",  "f16",  "q4_0", "q4_1", "q4_2", "q4_3", "q5_0",    "q5_1",    "q8_0",    "q8_1",
    "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K", "iq2_xxs", "iq2_xs",  "iq3_xxs", "iq1_s",
    "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8", "i16", "i32",  "i64",     "f64",     "iq1_m",
    "bf16", "q4_0_4_4", "q4_0_4_8", "q4_0_8_8", "tq1_0", "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8",
    "iq4_nl_8_8", "mxfp4", "nvfp4", "q1_0",
};
constexpr uint32_t kGgmlNameCount = sizeof(kGgmlNames) / sizeof(kGgmlNames[0]);

const TypeInfo kF32{"f32", 1, 4, false};
const TypeInfo kF16{"f16", 1, 2, false};
const TypeInfo kBF16{"bf16", 1, 2, false};
const TypeInfo kQ8_0{"q8_0", QK, sizeof(BlockQ8_0), true};
const TypeInfo kQ4_0{"q4_0", QK, sizeof(BlockQ4_0), true};
const TypeInfo kQ4_1{"q4_1", QK, sizeof(BlockQ4_1), true};

}  // namespace

bool dtype_supported(uint32_t ggml_type) {
  switch (ggml_type) {
    case uint32_t(DType::F32):
    case uint32_t(DType::F16):
    case uint32_t(DType::Q4_0):
    case uint32_t(DType::Q4_1):
    case uint32_t(DType::Q8_0):
    case uint32_t(DType::BF16):
      return true;
    default:
      return false;
  }
}

const char* ggml_type_name(uint32_t ggml_type) {
  if (ggml_type < kGgmlNameCount) return kGgmlNames[ggml_type];
  // One buffer per thread: the name must outlive the call, and unknown ids are rare.
  thread_local std::string unknown;
  unknown = "type " + std::to_string(ggml_type);
  return unknown.c_str();
}

const TypeInfo& type_info(DType t) {
  switch (t) {
    case DType::F32: return kF32;
    case DType::F16: return kF16;
    case DType::BF16: return kBF16;
    case DType::Q8_0: return kQ8_0;
    case DType::Q4_0: return kQ4_0;
    case DType::Q4_1: return kQ4_1;
  }
  LMF_FAIL("unsupported dtype id ", uint32_t(t), " (", ggml_type_name(uint32_t(t)), ")");
}

size_t row_bytes(DType t, int64_t n) {
  const TypeInfo& ti = type_info(t);
  if (n < 0 || n % ti.block != 0)
    LMF_FAIL("row of ", n, " elements of type ", ti.name, ": expected a multiple of the block size ",
             ti.block);
  return size_t(n / ti.block) * ti.block_bytes;
}

std::optional<DType> parse_dtype(std::string_view s) {
  std::string low(s);
  for (char& c : low) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1})
    if (low == type_info(t).name) return t;
  return std::nullopt;
}

}  // namespace lmf

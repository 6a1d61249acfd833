#include "format/quant/types.h"

#include <cctype>
#include <string>

#include "format/quant/iquants.h"
#include "format/quant/kquants.h"
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

// {name, block, block_bytes, quantized, sub_block}
const TypeInfo kF32{"f32", 1, 4, false, 1};
const TypeInfo kF16{"f16", 1, 2, false, 1};
const TypeInfo kBF16{"bf16", 1, 2, false, 1};
const TypeInfo kQ8_0{"q8_0", QK, sizeof(BlockQ8_0), true, QK};
const TypeInfo kQ4_0{"q4_0", QK, sizeof(BlockQ4_0), true, QK};
const TypeInfo kQ4_1{"q4_1", QK, sizeof(BlockQ4_1), true, QK};
const TypeInfo kQ5_0{"q5_0", QK, sizeof(BlockQ5_0), true, QK};
const TypeInfo kQ5_1{"q5_1", QK, sizeof(BlockQ5_1), true, QK};
const TypeInfo kIQ4_NL{"iq4_nl", QK, sizeof(BlockIQ4_NL), true, QK};
const TypeInfo kQ2_K{"q2_K", QK_K, sizeof(BlockQ2_K), true, 16};
const TypeInfo kQ3_K{"q3_K", QK_K, sizeof(BlockQ3_K), true, 16};
const TypeInfo kQ4_K{"q4_K", QK_K, sizeof(BlockQ4_K), true, 32};
const TypeInfo kQ5_K{"q5_K", QK_K, sizeof(BlockQ5_K), true, 32};
const TypeInfo kQ6_K{"q6_K", QK_K, sizeof(BlockQ6_K), true, 16};
const TypeInfo kQ8_K{"q8_K", QK_K, sizeof(BlockQ8_K), true, QK_K};  // one scale; bsums per 16
const TypeInfo kIQ4_XS{"iq4_xs", QK_K, sizeof(BlockIQ4_XS), true, 32};

constexpr DType kAll[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                          DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q2_K,
                          DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K,
                          DType::IQ4_XS};

}  // namespace

bool dtype_supported(uint32_t ggml_type) {
  for (DType t : kAll)
    if (uint32_t(t) == ggml_type) return true;
  return false;
}

std::span<const DType> all_dtypes() { return kAll; }

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
    case DType::Q5_0: return kQ5_0;
    case DType::Q5_1: return kQ5_1;
    case DType::IQ4_NL: return kIQ4_NL;
    case DType::Q2_K: return kQ2_K;
    case DType::Q3_K: return kQ3_K;
    case DType::Q4_K: return kQ4_K;
    case DType::Q5_K: return kQ5_K;
    case DType::Q6_K: return kQ6_K;
    case DType::Q8_K: return kQ8_K;
    case DType::IQ4_XS: return kIQ4_XS;
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
  auto lower = [](std::string_view v) {
    std::string r(v);
    for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
    return r;
  };
  const std::string low = lower(s);
  for (DType t : kAll)
    if (low == lower(type_info(t).name)) return t;
  return std::nullopt;
}

}  // namespace lmf

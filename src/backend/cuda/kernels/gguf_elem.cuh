// One element of a raw GGUF row, decoded on the device: the embedding lookups of decode
// (elementwise.cuh) and prefill (prefill_kernels.cu) read the table in its file layout.
#pragma once
#include <cuda_fp16.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels/common.cuh"

namespace lmf::cuda::dev {

// One element of a GGUF row (raw block layout of format/quant/types.h).
template <DType T>
__device__ __forceinline__ float gguf_elem(const uint8_t* row, int i) {
  const int b = i >> 5, e = i & 31;
  if constexpr (T == DType::F32) {
    return reinterpret_cast<const float*>(row)[i];
  } else if constexpr (T == DType::F16) {
    return __half2float(reinterpret_cast<const __half*>(row)[i]);
  } else if constexpr (T == DType::BF16) {
    return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
  } else if constexpr (T == DType::Q4_0) {
    const uint8_t* blk = row + b * 18;
    const float d = __half2float(__ushort_as_half(uint16_t(blk[0] | (blk[1] << 8))));
    const int q = (blk[2 + (e & 15)] >> (e < 16 ? 0 : 4)) & 15;
    return d * float(q - 8);
  } else if constexpr (T == DType::Q4_1) {
    const uint8_t* blk = row + b * 20;
    const float d = __half2float(__ushort_as_half(uint16_t(blk[0] | (blk[1] << 8))));
    const float m = __half2float(__ushort_as_half(uint16_t(blk[2] | (blk[3] << 8))));
    const int q = (blk[4 + (e & 15)] >> (e < 16 ? 0 : 4)) & 15;
    return fmaf(d, float(q), m);
  } else {  // Q8_0
    const uint8_t* blk = row + b * 34;
    const float d = __half2float(__ushort_as_half(uint16_t(blk[0] | (blk[1] << 8))));
    return d * float(int8_t(blk[2 + e]));
  }
}

}  // namespace lmf::cuda::dev

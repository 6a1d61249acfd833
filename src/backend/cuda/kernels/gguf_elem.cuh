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
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    // format/quant/kquants.h: x = (d*sc)*q - dmin*m, the 6-bit codes of sub-block e/32
    constexpr int kBytes = T == DType::Q4_K ? 144 : 176;
    const int sbk = i >> 8, k = i & 255, j = k >> 5;
    const uint8_t* blk = row + sbk * kBytes;
    const float d = __half2float(__ushort_as_half(uint16_t(blk[0] | (blk[1] << 8))));
    const float dm = __half2float(__ushort_as_half(uint16_t(blk[2] | (blk[3] << 8))));
    const uint8_t* sc = blk + 4;
    int s, m;
    if (j < 4) {
      s = sc[j] & 63, m = sc[j + 4] & 63;
    } else {
      s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4), m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
    const uint8_t* qs = blk + 16 + (T == DType::Q5_K ? 32 : 0);
    int q = (qs[32 * (k >> 6) + (k & 31)] >> (4 * ((k & 63) >> 5))) & 15;
    if constexpr (T == DType::Q5_K) q |= ((blk[16 + (k & 31)] >> (k >> 5)) & 1) << 4;
    return (d * float(s)) * float(q) - dm * float(m);
  } else if constexpr (T == DType::Q6_K) {
    const int sbk = i >> 8, k = i & 255, r = k & 127;
    const uint8_t* blk = row + sbk * 210;
    const float d = __half2float(__ushort_as_half(uint16_t(blk[208] | (blk[209] << 8))));
    const int ql = (blk[64 * (k >> 7) + (r & 63)] >> (4 * (r >> 6))) & 15;
    const int qh = (blk[128 + 32 * (k >> 7) + (r & 31)] >> (2 * (r >> 5))) & 3;
    return (d * float(int8_t(blk[192 + (k >> 4)]))) * float((ql | (qh << 4)) - 32);
  } else {  // Q8_0
    const uint8_t* blk = row + b * 34;
    const float d = __half2float(__ushort_as_half(uint16_t(blk[0] | (blk[1] << 8))));
    return d * float(int8_t(blk[2 + e]));
  }
}

}  // namespace lmf::cuda::dev

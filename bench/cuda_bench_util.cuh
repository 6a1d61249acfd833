// Shared by the CUDA benchmarks: device weights with random contents in the repacked layout of
// kernels.h (timing only: the values need to be finite, not meaningful).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace lmf::cuda::bench {

__global__ void fill_bits(uint32_t* p, size_t n, uint32_t seed, uint32_t mask, uint32_t orv) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = (h & mask) | orv;
  }
}

// 16-byte pieces per block of 32 weights, and scale bytes per block.
inline int pieces(DType t) { return t == DType::Q8_0 ? 2 : (t == DType::F16 || t == DType::BF16) ? 4 : 1; }
inline int scale_bytes(DType t) { return t == DType::Q4_0 || t == DType::Q8_0 ? 2 : t == DType::Q4_1 ? 4 : 0; }
inline size_t packed_bytes(DType t, int64_t rows, int64_t cols) {
  return size_t(rows) * size_t(cols / 32) * size_t(pieces(t) * 16 + scale_bytes(t));
}

inline DeviceWeight random_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  DeviceWeight w;
  w.type = t;
  w.rows = rows;
  w.cols = cols;
  w.q_bytes = size_t(rows) * size_t(cols / 32) * size_t(pieces(t)) * 16;
  w.scale_bytes = size_t(rows) * size_t(cols / 32) * size_t(scale_bytes(t));
  void *q = nullptr, *s = nullptr;
  CUDA_CHECK(cudaMalloc(&q, w.q_bytes));
  // fp16/bf16 weights: clear the top exponent bits of each half (finite, |w| < 1); quantized
  // codes: any bits.
  const bool fl = t == DType::F16 || t == DType::BF16;
  fill_bits<<<1024, 256>>>(static_cast<uint32_t*>(q), w.q_bytes / 4, seed, fl ? 0x3BFF3BFFu : 0xFFFFFFFFu, 0);
  if (w.scale_bytes) {
    CUDA_CHECK(cudaMalloc(&s, w.scale_bytes));
    // small positive fp16 scales 0x2000..0x23FF (~0.008 .. 0.016)
    fill_bits<<<1024, 256>>>(static_cast<uint32_t*>(s), w.scale_bytes / 4, seed + 1, 0x03FF03FFu, 0x20002000u);
  }
  CUDA_CHECK(cudaGetLastError());
  w.q = static_cast<const uint8_t*>(q);
  w.scales = static_cast<const uint8_t*>(s);
  return w;
}

}  // namespace lmf::cuda::bench

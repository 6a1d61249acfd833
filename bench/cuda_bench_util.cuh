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

// Runs body() once (warm-up outside capture: sets attributes, caches grids), then captures it
// into an instantiated graph (the template graph is destroyed).
template <class F>
inline cudaGraphExec_t capture_graph(cudaStream_t s, F body) {
  body();
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  body();
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  CUDA_CHECK(cudaGraphDestroy(g));
  return ge;
}

// Captures body() into a graph, replays it `reps` times; returns ms per replay.
template <class F>
inline double time_graph(cudaStream_t s, F body, int reps = 20) {
  cudaGraphExec_t ge = capture_graph(s, body);
  CUDA_CHECK(cudaGraphLaunch(ge, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < reps; ++i) CUDA_CHECK(cudaGraphLaunch(ge, s));
  CUDA_CHECK(cudaEventRecord(b, s));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  CUDA_CHECK(cudaGraphExecDestroy(ge));
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return ms / reps;
}

// Device-to-device copy bandwidth (cudaMemcpy of 1 GiB, read + write counted), GB/s: the
// reference ceiling every figure is reported against.
inline double copy_bandwidth() {
  const size_t bytes = size_t(1) << 30;
  void *a, *b;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  CUDA_CHECK(cudaMemset(a, 1, bytes));
  CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  const int reps = 10;
  CUDA_CHECK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  CUDA_CHECK(cudaEventRecord(e1));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  return 2.0 * bytes * reps / (ms * 1e-3) / 1e9;
}

}  // namespace lmf::cuda::bench

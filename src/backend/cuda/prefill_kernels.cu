// Batched (T-row) building blocks of the prefill path: embedding rows, RoPE over rows, KV store
// of T rows, activation fp32 -> fp16 (optionally int8-block-quantized), weight dequant to fp16,
// bias add. prefill.h documents the host API.
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/gguf_elem.cuh"
#include "backend/cuda/prefill.h"

namespace lmf::cuda {
namespace pdev {

using dev::bf16_bits_to_f32;

__device__ __forceinline__ float h2f(const uint8_t* p) {
  return __half2float(__ushort_as_half(uint16_t(p[0] | (p[1] << 8))));
}

// grid (ceil(cols/256), T)
template <DType T>
__global__ void embed_rows_kernel(const uint8_t* table, size_t rb, int cols, const int* tokens, float* out) {
  const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= cols) return;
  out[size_t(t) * cols + i] = dev::gguf_elem<T>(table + size_t(tokens[t]) * rb, i);
}

// grid (n_heads, T), block hd/2: one pair per thread (same arithmetic as the decode rope).
__global__ void rope_rows_kernel(float* x, int n_heads, int hd, RopeStyle st, float theta, const float* ff,
                                 const int* pos0, const int* row_pos) {
  const int i = threadIdx.x, half_d = hd / 2, t = blockIdx.y;
  float* h = x + (size_t(t) * n_heads + blockIdx.x) * hd;
  const int a = st == RopeStyle::NeoX ? i : 2 * i, b = st == RopeStyle::NeoX ? i + half_d : 2 * i + 1;
  float c, s;
  dev::rope_cs(row_pos ? row_pos[t] : *pos0 + t, i, hd, theta, ff, &c, &s);
  const float va = h[a], vb = h[b];
  h[a] = dev::rope_rotate(va, vb, c, s, true);
  h[b] = dev::rope_rotate(vb, va, c, s, false);
}

// grid (n_kv, T), block hd.
__global__ void kv_store_rows_kernel(const float* k, const float* v, __half* kc, __half* vc, int n_kv, int hd,
                                     int64_t n_ctx, const int* pos0, const int* row_slot) {
  const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
  const size_t src = (size_t(t) * n_kv + h) * hd + d;
  const size_t dst = (size_t(h) * n_ctx + (row_slot ? row_slot[t] : *pos0 + t)) * hd + d;
  kc[dst] = __float2half_rn(k[src]);
  vc[dst] = __float2half_rn(v[src]);
}

// Eight threads per block of 32 elements, four consecutive elements (one float4) each: the
// block's amax is three shuffles among the eight. (The first version, one element per thread,
// ran at ~1/3 of the copy bandwidth: at 8B pp2048 it was ~120 µs of the down projection.)
// Value for value the int8-block conversion of the decode GEMV (gemv.cuh) and of
// silu_pairs_q8f16_kernel.
__global__ void act_to_f16_kernel(const float* x, __half* y, int64_t nquads, int cols, bool q8, int parts) {
  const int64_t qi = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // float4 index
  // Whole warps stay in the loop body so the shuffles see all eight lanes of a block (nquads is
  // a multiple of 8: cols % 32 == 0).
  const bool ok = qi < nquads;
  float4 v = ok ? reinterpret_cast<const float4*>(x)[qi] : make_float4(0.f, 0.f, 0.f, 0.f);
  if (q8) {
    float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
    am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
    am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 4));
    const float id = am > 0.f ? 127.f / am : 0.f, d = am / 127.f;
    v = make_float4(d * float(__float2int_rn(v.x * id)), d * float(__float2int_rn(v.y * id)),
                    d * float(__float2int_rn(v.z * id)), d * float(__float2int_rn(v.w * id)));
  }
  if (!ok) return;
  const int64_t e = qi * 4, row = e / cols, c = e % cols;
  __half* yr = y + row * parts * cols + c;
  const __half2 h01 = __floats2half2_rn(v.x, v.y), h23 = __floats2half2_rn(v.z, v.w);
  __half2* hi = reinterpret_cast<__half2*>(yr);
  hi[0] = h01;
  hi[1] = h23;
  if (parts == 1) return;
  const float2 f01 = __half22float2(h01), f23 = __half22float2(h23);
  const __half2 l01 = __floats2half2_rn(v.x - f01.x, v.y - f01.y), l23 = __floats2half2_rn(v.z - f23.x, v.w - f23.y);
  __half2* lo = reinterpret_cast<__half2*>(yr + cols);
  lo[0] = l01;
  lo[1] = l23;
}

// One thread per (output row i, block c of 32 elements) of a repacked weight.
template <DType T>
__global__ void dequant_kernel(const uint8_t* q, const uint8_t* scales, int nblk, size_t row_stride, int64_t r0,
                               int64_t step, int64_t n, int parts, __half* out) {
  constexpr int P = T == DType::Q4_0 || T == DType::Q4_1 ? 1 : T == DType::Q8_0 ? 2 : 4;
  const int64_t gid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gid >= n * nblk) return;
  const int64_t i = gid / nblk;
  const int c = int(gid % nblk);
  const int64_t r = r0 + i * step;
  const int g = c >> 5, l = c & 31, gb = min(32, nblk - 32 * g);
  const uint8_t* base = q + size_t(r) * row_stride + size_t(g) * 32 * P * 16;
  uint4 pc[P];
#pragma unroll
  for (int p = 0; p < P; ++p) pc[p] = *reinterpret_cast<const uint4*>(base + (p * gb + l) * 16);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(pc);
  float h[32];
  if constexpr (T == DType::Q4_0 || T == DType::Q4_1) {
    const size_t sb = T == DType::Q4_0 ? 2 : 4;
    const uint8_t* sp = scales + (size_t(r) * nblk + c) * sb;
    const float d = h2f(sp), m = T == DType::Q4_1 ? h2f(sp + 2) : 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int lo = bytes[j] & 15, hi = bytes[j] >> 4;
      if constexpr (T == DType::Q4_0) {
        h[j] = d * float(lo - 8);
        h[j + 16] = d * float(hi - 8);
      } else {
        h[j] = fmaf(d, float(lo), m);
        h[j + 16] = fmaf(d, float(hi), m);
      }
    }
  } else if constexpr (T == DType::Q8_0) {
    const float d = h2f(scales + (size_t(r) * nblk + c) * 2);
#pragma unroll
    for (int j = 0; j < 32; ++j) h[j] = d * float(int8_t(bytes[j]));
  } else if constexpr (T == DType::BF16) {
    const uint16_t* b16 = reinterpret_cast<const uint16_t*>(bytes);
#pragma unroll
    for (int j = 0; j < 32; ++j) h[j] = bf16_bits_to_f32(b16[j]);
  } else {  // F16
    const __half* b16 = reinterpret_cast<const __half*>(bytes);
#pragma unroll
    for (int j = 0; j < 32; ++j) h[j] = __half2float(b16[j]);
  }
  // parts 1: fp16(w); 2: w | w (float weights: exact in fp16), against the activations' hi | lo
  const int cols = nblk * 32;
  __half* row = out + size_t(i) * parts * cols + size_t(c) * 32;
  __align__(16) __half hv[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) hv[j] = __float2half_rn(h[j]);
  const uint4* hs = reinterpret_cast<const uint4*>(hv);
  for (int p = 0; p < parts; ++p) {
    uint4* dst = reinterpret_cast<uint4*>(row + size_t(p) * cols);
#pragma unroll
    for (int k = 0; k < 4; ++k) dst[k] = hs[k];
  }
}

// Quantized weights, parts 1: one thread per 8 outputs (a quarter of a block), so a warp stores
// 512 contiguous bytes and loads 8 bytes per lane; same values as dequant_kernel (d*(q-8),
// fmaf(d, q, m), d*q computed in fp32, rounded once to fp16). The one-thread-per-block kernel
// above ran at ~1/6 of the copy bandwidth (sweep, docs/PERF.md): strided 64-byte stores per lane.
// Grid (ceil(4 nblk / 256), min(n, 65535)): blockIdx.y walks the rows, so a thread's row and
// block come from 32-bit shifts, not a 64-bit division per thread (the first version of this
// kernel divided a 64-bit index by nblk and ran at ~half the copy bandwidth).
template <DType T>
__global__ void dequant_q_fast_kernel(const uint8_t* q, const uint8_t* scales, int nblk, size_t row_stride,
                                      int64_t r0, int64_t step, int64_t n, __half* out) {
  constexpr int P = T == DType::Q8_0 ? 2 : 1;
  constexpr size_t sb = T == DType::Q4_1 ? 4 : 2;
  const int j4 = int(blockIdx.x) * blockDim.x + threadIdx.x;  // quarter-block index in the row
  if (j4 >= nblk * 4) return;
  const int qt = j4 & 3, c = j4 >> 2;
  const int g = c >> 5, l = c & 31, gb = min(32, nblk - 32 * g);
  const size_t piece = T == DType::Q8_0 ? size_t(g) * 32 * P * 16 + ((qt >> 1) * gb + l) * 16 + (qt & 1) * 8
                                        : size_t(g) * 32 * P * 16 + l * 16 + (qt & 1) * 8;
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const int64_t r = r0 + i * step;
    const uint2 w = __ldcs(reinterpret_cast<const uint2*>(q + size_t(r) * row_stride + piece));
    const uint8_t* sp = scales + (size_t(r) * nblk + c) * sb;
    const float d = h2f(sp);
    float v[8];
    if constexpr (T == DType::Q8_0) {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = d * float(int8_t(((e < 4 ? w.x : w.y) >> (8 * (e & 3))) & 0xff));
    } else {
      const int sh = qt < 2 ? 0 : 4;  // elements 0-15: low nibbles; 16-31: high nibbles
      const float m = T == DType::Q4_1 ? h2f(sp + 2) : 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int nib = int(((e < 4 ? w.x : w.y) >> (8 * (e & 3) + sh)) & 15);
        v[e] = T == DType::Q4_0 ? d * float(nib - 8) : fmaf(d, float(nib), m);
      }
    }
    __align__(16) __half h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) h[e] = __float2half_rn(v[e]);
    *reinterpret_cast<uint4*>(out + size_t(i) * nblk * 32 + size_t(c) * 32 + qt * 8) =
        *reinterpret_cast<const uint4*>(h);
  }
}

// K-quants (kernels.h's packed form), parts 1: one thread per 8 outputs as above; the values of
// format/quant's dequantize (Q4_K/Q5_K: (d*sc)*q - dmin*m; Q6_K: (d*scale)*(q-32), in fp32),
// rounded once to fp16.
template <DType T>
__global__ void dequant_kq_kernel(const uint8_t* q, const uint8_t* scales, int nblk, size_t row_stride,
                                  int64_t r0, int64_t step, int64_t n, __half* out) {
  constexpr int HB = T == DType::Q5_K ? 4 : T == DType::Q6_K ? 8 : 0;
  const int j4 = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j4 >= nblk * 4) return;
  const int qt = j4 & 3, c = j4 >> 2;
  const int half = qt >> 1, sh = half ? 4 : 0;
  const size_t piece = size_t(c >> 5) * 32 * 16 + (c & 31) * 16 + (qt & 1) * 8;
  const size_t s_stride = size_t(nblk) * 2 + size_t(nblk >> 3) * 4;
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const int64_t r = r0 + i * step;
    const uint8_t* row = q + size_t(r) * row_stride;
    const uint2 w = __ldcs(reinterpret_cast<const uint2*>(row + piece));
    uint32_t h = 0;
    if constexpr (HB == 4) h = *reinterpret_cast<const uint32_t*>(row + size_t(nblk) * 16 + size_t(c) * 4);
    if constexpr (HB == 8) h = reinterpret_cast<const uint32_t*>(row + size_t(nblk) * 16 + size_t(c) * 8)[half];
    const uint8_t* sr = scales + size_t(r) * s_stride;
    const uint8_t* rec = sr + size_t(c) * 2;
    const uint8_t* sb = sr + size_t(nblk) * 2 + size_t(c >> 3) * 4;
    const float d = h2f(sb);
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int k = (qt & 1) * 8 + e;  // element of the half: 4 * (k / 4) + k % 4
      int code = int(((e < 4 ? w.x : w.y) >> (8 * (e & 3) + sh)) & 15);
      if constexpr (HB == 4) code |= int((h >> (8 * (k & 3) + 4 * half + (k >> 2))) & 1) << 4;
      if constexpr (HB == 8) code |= int((h >> (8 * (k & 3) + 2 * (k >> 2))) & 3) << 4;
      if constexpr (T == DType::Q6_K) {
        v[e] = (d * float(int8_t(rec[half]))) * float(code - 32);
      } else {
        v[e] = (d * float(rec[0])) * float(code) - h2f(sb + 2) * float(rec[1]);
      }
    }
    __align__(16) __half hv[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) hv[e] = __float2half_rn(v[e]);
    *reinterpret_cast<uint4*>(out + size_t(i) * nblk * 32 + size_t(c) * 32 + qt * 8) =
        *reinterpret_cast<const uint4*>(hv);
  }
}

__global__ void add_bias_rows_kernel(float* y, const float* bias, int64_t rows, int n, int64_t ldy) {
  const int64_t total = rows * n;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = k / n;
    const int i = int(k % n);
    y[t * ldy + i] += bias[i];
  }
}

__global__ void silu_pairs_kernel(const float* x, float* y, int64_t total, int64_t n, bool acc) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = k / n, j = k % n;
    const float2 gu = reinterpret_cast<const float2*>(x + t * 2 * n)[j];
    const float v = dev::silu(gu.x) * gu.y;
    y[k] = acc ? y[k] + v : v;
  }
}
// One warp per block of 32 outputs: the block's amax by shuffles, then the int8 code and its fp16
// value exactly as act_to_f16_kernel computes them from the stored y.
__global__ void silu_pairs_q8f16_kernel(const float* x, float* y, __half* x16, int64_t nblocks, int64_t n) {
  const int lane = threadIdx.x & 31;
  for (int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; b < nblocks;
       b += (int64_t(gridDim.x) * blockDim.x) >> 5) {
    const int64_t e = b * 32 + lane, t = e / n, j = e % n;
    const float2 gu = reinterpret_cast<const float2*>(x + t * 2 * n)[j];
    const float v = dev::silu(gu.x) * gu.y;
    y[e] = v;
    const float am = dev::warp_max(fabsf(v));
    const float id = am > 0.f ? 127.f / am : 0.f;
    x16[e] = __float2half_rn((am / 127.f) * float(__float2int_rn(v * id)));
  }
}

__global__ void add_rows_kernel(const float* x, float* y, int64_t total) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x)
    y[k] += x[k];
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t t0 = dev::global_ns();
  while (dev::global_ns() - t0 < ns) {
  }
}

__global__ void fill_random_kernel(float* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = float(h >> 8) * (2.f / 16777216.f) - 1.f;
  }
}

}  // namespace pdev

namespace {
unsigned blocks_for(int64_t threads, int per = 256) { return unsigned((threads + per - 1) / per); }
}  // namespace

void embed_rows(DType t, const void* table, int64_t cols, const int* tokens, int T, float* out, cudaStream_t s) {
  if (cols <= 0 || T <= 0 || (t != DType::F32 && t != DType::F16 && t != DType::BF16 && cols % 32 != 0))
    LMF_FAIL("cuda embed_rows: bad shape ", T, "x", cols);
  const auto* tb = static_cast<const uint8_t*>(table);
  const size_t rb = row_bytes(t, cols);
  const dim3 grid(blocks_for(cols), unsigned(T));
  switch (t) {
    case DType::F32: pdev::embed_rows_kernel<DType::F32><<<grid, 256, 0, s>>>(tb, rb, int(cols), tokens, out); break;
    case DType::F16: pdev::embed_rows_kernel<DType::F16><<<grid, 256, 0, s>>>(tb, rb, int(cols), tokens, out); break;
    case DType::BF16: pdev::embed_rows_kernel<DType::BF16><<<grid, 256, 0, s>>>(tb, rb, int(cols), tokens, out); break;
    case DType::Q4_0: pdev::embed_rows_kernel<DType::Q4_0><<<grid, 256, 0, s>>>(tb, rb, int(cols), tokens, out); break;
    case DType::Q4_1: pdev::embed_rows_kernel<DType::Q4_1><<<grid, 256, 0, s>>>(tb, rb, int(cols), tokens, out); break;
    case DType::Q8_0: pdev::embed_rows_kernel<DType::Q8_0><<<grid, 256, 0, s>>>(tb, rb, int(cols), tokens, out); break;
    case DType::Q4_K: pdev::embed_rows_kernel<DType::Q4_K><<<grid, 256, 0, s>>>(tb, rb, int(cols), tokens, out); break;
    case DType::Q5_K: pdev::embed_rows_kernel<DType::Q5_K><<<grid, 256, 0, s>>>(tb, rb, int(cols), tokens, out); break;
    case DType::Q6_K: pdev::embed_rows_kernel<DType::Q6_K><<<grid, 256, 0, s>>>(tb, rb, int(cols), tokens, out); break;
    default: LMF_FAIL("cuda embed_rows: unsupported type ", dtype_name(t));
  }
  CUDA_CHECK_LAUNCH();
}

void rope_rows(float* x, int T, int n_heads, int head_dim, RopeStyle st, float theta, const float* ff, const int* pos0,
               cudaStream_t s, const int* row_pos) {
  if (T <= 0 || n_heads <= 0 || head_dim % 2 != 0 || head_dim > 2048)
    LMF_FAIL("cuda rope_rows: bad shape T ", T, " heads ", n_heads, " head_dim ", head_dim);
  pdev::rope_rows_kernel<<<dim3(unsigned(n_heads), unsigned(T)), head_dim / 2, 0, s>>>(x, n_heads, head_dim, st,
                                                                                       theta, ff, pos0, row_pos);
  CUDA_CHECK_LAUNCH();
}

void kv_store_rows(const float* k, const float* v, uint16_t* k_cache, uint16_t* v_cache, int T, int n_kv,
                   int head_dim, int64_t n_ctx, const int* pos0, cudaStream_t s, const int* row_slot) {
  if (T <= 0 || n_kv <= 0 || head_dim <= 0 || head_dim > 1024)
    LMF_FAIL("cuda kv_store_rows: bad shape T ", T, " n_kv ", n_kv, " head_dim ", head_dim);
  pdev::kv_store_rows_kernel<<<dim3(unsigned(n_kv), unsigned(T)), head_dim, 0, s>>>(
      k, v, reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache), n_kv, head_dim, n_ctx, pos0,
      row_slot);
  CUDA_CHECK_LAUNCH();
}

void gpu_spin(int us, cudaStream_t s) {
  pdev::spin_kernel<<<1, 1, 0, s>>>(uint64_t(std::max(us, 0)) * 1000u);
  CUDA_CHECK_LAUNCH();
}

double gpu_median_ms(cudaStream_t s, int reps, const std::function<void()>& run, int spin_us) {
  if (reps < 1) LMF_FAIL("gpu_median_ms: reps must be >= 1, got ", reps);
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  run();
  std::vector<float> ts;
  for (int i = 0; i < reps; ++i) {
    if (spin_us > 0) gpu_spin(spin_us, s);
    CUDA_CHECK(cudaEventRecord(e0, s));
    run();
    CUDA_CHECK(cudaEventRecord(e1, s));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ts.begin(), ts.end());
  return double(ts[ts.size() / 2]);
}

void fill_random_f32(float* x, size_t n, uint32_t seed, cudaStream_t s) {
  if (n == 0) return;
  pdev::fill_random_kernel<<<unsigned(std::min<size_t>(1024, (n + 255) / 256)), 256, 0, s>>>(x, n, seed);
  CUDA_CHECK_LAUNCH();
}

void act_to_f16(const float* x, uint16_t* y, int64_t rows, int cols, bool int8_blocks, int parts, cudaStream_t s) {
  if (rows <= 0 || cols <= 0 || cols % 32 != 0 || parts < 1 || parts > 2)
    LMF_FAIL("cuda act_to_f16: bad shape ", rows, "x", cols, " parts ", parts);
  const int64_t nq = rows * (cols / 4);
  pdev::act_to_f16_kernel<<<blocks_for(nq), 256, 0, s>>>(x, reinterpret_cast<__half*>(y), nq, cols, int8_blocks,
                                                        parts);
  CUDA_CHECK_LAUNCH();
}

void dequant_rows_f16(const DeviceWeight& w, int64_t r0, int64_t step, int64_t n, uint16_t* out, int parts,
                      cudaStream_t s) {
  if (parts < 1 || parts > 2) LMF_FAIL("cuda dequant_rows_f16: parts must be 1 or 2, got ", parts);
  if (n <= 0 || r0 < 0 || step < 1 || r0 + (n - 1) * step >= w.rows || w.cols % 32 != 0)
    LMF_FAIL("cuda dequant_rows_f16: rows ", r0, " + ", n, " x step ", step, " outside a weight of ", w.rows, "x",
             w.cols);
  const int nblk = int(w.cols / 32);
  const size_t stride = w.q_bytes / size_t(w.rows);
  const unsigned grid = blocks_for(n * nblk, 128);
  auto* o = reinterpret_cast<__half*>(out);
  if (parts == 1 && int8_dot(w.type)) {
    const dim3 g4(blocks_for(int64_t(nblk) * 4, 256), unsigned(std::min<int64_t>(n, 65535)));
    switch (w.type) {
      case DType::Q4_K: pdev::dequant_kq_kernel<DType::Q4_K><<<g4, 256, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, o); break;
      case DType::Q5_K: pdev::dequant_kq_kernel<DType::Q5_K><<<g4, 256, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, o); break;
      case DType::Q6_K: pdev::dequant_kq_kernel<DType::Q6_K><<<g4, 256, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, o); break;
      case DType::Q4_0: pdev::dequant_q_fast_kernel<DType::Q4_0><<<g4, 256, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, o); break;
      case DType::Q4_1: pdev::dequant_q_fast_kernel<DType::Q4_1><<<g4, 256, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, o); break;
      default: pdev::dequant_q_fast_kernel<DType::Q8_0><<<g4, 256, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, o); break;
    }
    CUDA_CHECK_LAUNCH();
    return;
  }
  switch (w.type) {
    case DType::Q4_0: pdev::dequant_kernel<DType::Q4_0><<<grid, 128, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, parts, o); break;
    case DType::Q4_1: pdev::dequant_kernel<DType::Q4_1><<<grid, 128, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, parts, o); break;
    case DType::Q8_0: pdev::dequant_kernel<DType::Q8_0><<<grid, 128, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, parts, o); break;
    case DType::F16: pdev::dequant_kernel<DType::F16><<<grid, 128, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, parts, o); break;
    case DType::BF16: pdev::dequant_kernel<DType::BF16><<<grid, 128, 0, s>>>(w.q, w.scales, nblk, stride, r0, step, n, parts, o); break;
    default: LMF_FAIL("cuda dequant_rows_f16: unsupported type ", dtype_name(w.type));
  }
  CUDA_CHECK_LAUNCH();
}

void add_bias_rows(float* y, const float* bias, int64_t rows, int n, int64_t ldy, cudaStream_t s) {
  const unsigned grid = unsigned(std::min<int64_t>(blocks_for(rows * n), 4 * int64_t(device_sm_count())));
  pdev::add_bias_rows_kernel<<<grid, 256, 0, s>>>(y, bias, rows, n, ldy);
  CUDA_CHECK_LAUNCH();
}

}  // namespace lmf::cuda

namespace lmf::cuda {
void silu_pairs_rows(const float* x, float* y, int64_t rows, int64_t n, bool accumulate, cudaStream_t s) {
  if (rows <= 0 || n <= 0) LMF_FAIL("cuda silu_pairs_rows: bad shape ", rows, "x", n);
  const unsigned grid = unsigned(std::min<int64_t>((rows * n + 255) / 256, 8 * int64_t(device_sm_count())));
  pdev::silu_pairs_kernel<<<grid, 256, 0, s>>>(x, y, rows * n, n, accumulate);
  CUDA_CHECK_LAUNCH();
}
void silu_pairs_rows_q8f16(const float* x, float* y, uint16_t* x16, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows <= 0 || n <= 0 || n % 32 != 0) LMF_FAIL("cuda silu_pairs_rows_q8f16: bad shape ", rows, "x", n);
  const int64_t nb = rows * (n / 32);
  const unsigned grid = unsigned(std::min<int64_t>((nb * 32 + 255) / 256, 16 * int64_t(device_sm_count())));
  pdev::silu_pairs_q8f16_kernel<<<grid, 256, 0, s>>>(x, y, reinterpret_cast<__half*>(x16), nb, n);
  CUDA_CHECK_LAUNCH();
}

void add_rows(const float* x, float* y, int64_t elems, cudaStream_t s) {
  const unsigned grid = unsigned(std::min<int64_t>((elems + 255) / 256, 8 * int64_t(device_sm_count())));
  pdev::add_rows_kernel<<<grid, 256, 0, s>>>(x, y, elems);
  CUDA_CHECK_LAUNCH();
}
}  // namespace lmf::cuda

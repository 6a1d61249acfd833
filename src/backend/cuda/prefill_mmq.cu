// The in-kernel dequant matrix product of prefill (prefill.h, "in-kernel route"): an int8 x int8
// tensor-core GEMM that reads the repacked 4-bit/8-bit weights (kernels.h layout) tile by tile,
// unpacks them in registers, and multiplies them with activations quantized to int8 per block of
// 32 exactly as the decode GEMV quantizes them.
//
// Why int8 x int8 rather than unpack-to-fp16 + fp16 mma: one mma.m16n8k32 covers exactly one
// quantization block of 32, so the int32 it returns is the same block dot product the decode
// GEMV's dp4a chain computes (and the CPU backend's integer dots): prefill and decode then share
// their arithmetic up to the fp32 order of adding blocks, and prefill-then-decode matches one
// prefill. The int8 tensor-core rate is also twice the fp16 one.
//
// Per block and output the int32 is scaled by d_w * d_x (plus m_w * d_x * sum(xq) for Q4_1), the
// same per-block float formula as the decode GEMV. That float work is the kernel's real cost (3
// fp32 operations per output per 32 MACs), so the int32 -> float conversion uses the mantissa
// trick instead of I2F (quarter rate): the mma accumulates onto C = bits of 1.5 * 2^23, so the
// result's bits are the float 12582912 + dot exactly (|dot| <= 32*127*127 < 2^22), and one FADD
// recovers float(dot).
//
// Tiling: a CTA of 8 warps (4 along weight rows x 2 along tokens) computes BN = 64*WM weight rows
// x BT = 16*WN tokens; each warp WM x WN mma tiles of 16 rows x 8 tokens. Stages of kKB = 4
// blocks (128 inputs) stream through shared memory with cp.async (kStages deep, zero-filled
// beyond the edges); the weight scales (fp16, 2 bytes, too small for cp.async) go through
// registers one stage ahead.
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/prefill.h"

namespace lmf::cuda {
namespace mmq {

constexpr int kKB = 4;  // quant blocks per pipeline stage
constexpr int kStages = 3;
constexpr int kWarpsM = 4, kWarpsN = 2, kThreads = 32 * kWarpsM * kWarpsN;
constexpr uint32_t kMagicBits = 0x4B400000u;  // 1.5 * 2^23
constexpr float kMagic = 12582912.f;

template <DType T>
struct WT {
  static constexpr bool kQ8 = T == DType::Q8_0;
  static constexpr bool kMin = T == DType::Q4_1;
  static constexpr int kBlockBytes = kQ8 ? 32 : 16;  // one block of 32 weights in shared memory
  static constexpr int P = kQ8 ? 2 : 1;              // 16-byte pieces per block (kernels.h)
};

template <DType T, int WM, int WN>
struct Cfg {
  static constexpr int BN = kWarpsM * 16 * WM;
  static constexpr int BT = kWarpsN * 8 * WN;
  // Row strides padded by 16 bytes so the fragment loads (8 rows x 4 words per instruction) hit
  // 32 different banks.
  static constexpr int kWRow = kKB * WT<T>::kBlockBytes + 16;
  static constexpr int kXRow = kKB * 32 + 16;
  static constexpr int kW = BN * kWRow;                              // weights
  static constexpr int kX = BT * kXRow;                              // int8 activations
  static constexpr int kWs = BN * kKB * 4 * (WT<T>::kMin ? 2 : 1);   // float d (and m)
  static constexpr int kXs = BT * kKB * 4 * (WT<T>::kMin ? 2 : 1);   // float d (and sum)
  static constexpr int kStage = (kW + kX + kWs + kXs + 15) / 16 * 16;
  static constexpr int kSmem = kStages * kStage;
  static constexpr int kScalePerThread = BN * kKB / kThreads;  // weight scales each thread moves
  static_assert(BN * kKB % kThreads == 0);
};

using dev::cp_async16;
using dev::cp_async_commit;
using dev::cp_async_wait;

__device__ __forceinline__ void mma_s8(int (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(kMagicBits));
}

__device__ __forceinline__ float h2f(uint16_t b) { return __half2float(__ushort_as_half(b)); }

template <DType T, int WM, int WN>
__global__ void __launch_bounds__(kThreads) mmq_kernel(MmqArgs a) {
  using C = Cfg<T, WM, WN>;
  using W = WT<T>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int wm = warp % kWarpsM, wn = warp / kWarpsM;
  const int64_t col0 = int64_t(blockIdx.x) * C::BN;  // first output column (weight row index i)
  const int tok0 = blockIdx.y * C::BT;
  const int nstages = (a.nblk + kKB - 1) / kKB;
  const size_t row_stride = size_t(a.nblk) * W::P * 16;
  const size_t xrow = size_t(a.nblk4) * 32;

  auto stage_ptr = [&](int slot) { return smem + slot * C::kStage; };

  // Issue the cp.async copies of stage s into its slot (weights, int8 x, x scales).
  auto load_async = [&](int s) {
    uint8_t* base = stage_ptr(s % kStages);
    const int kb0 = s * kKB;
    constexpr int kWChunks = C::BN * kKB * W::P;
    for (int c = tid; c < kWChunks; c += kThreads) {
      const int row = c / (kKB * W::P), rem = c % (kKB * W::P), kb = rem / W::P, p = rem % W::P;
      const int64_t i = col0 + row;
      const int b = kb0 + kb;
      const bool ok = i < a.n && b < a.nblk;
      const uint8_t* src = a.q;
      if (ok) {
        const int64_t r = a.r0 + i * a.step;
        const int grp = b >> 5, l = b & 31, gb = min(32, a.nblk - 32 * grp);
        src = a.q + size_t(r) * row_stride + size_t(grp) * 32 * W::P * 16 + size_t(p * gb + l) * 16;
      }
      cp_async16(base + row * C::kWRow + kb * W::kBlockBytes + p * 16, src, ok);
    }
    uint8_t* xs = base + C::kW;
    constexpr int kXChunks = C::BT * kKB * 2;
    for (int c = tid; c < kXChunks; c += kThreads) {
      const int t = c / (kKB * 2), rem = c % (kKB * 2);
      const bool ok = tok0 + t < a.T;
      const int8_t* src = ok ? a.xq + size_t(tok0 + t) * xrow + size_t(kb0) * 32 + rem * 16 : a.xq;
      cp_async16(xs + t * C::kXRow + rem * 16, src, ok);
    }
    float* xd = reinterpret_cast<float*>(base + C::kW + C::kX + C::kWs);
    for (int t = tid; t < C::BT * (W::kMin ? 2 : 1); t += kThreads) {
      const int tt = t % C::BT, which = t / C::BT;
      const bool ok = tok0 + tt < a.T;
      const float* plane = which ? a.xs : a.xd;
      const float* src = ok ? plane + size_t(tok0 + tt) * a.nblk4 + kb0 : a.xd;
      cp_async16(xd + which * C::BT * kKB + tt * kKB, src, ok);
    }
  };
  // Weight scales of stage s: loaded into registers now, stored to shared memory later.
  uint32_t wsc[C::kScalePerThread];
  auto load_scales = [&](int s) {
    const int kb0 = s * kKB;
#pragma unroll
    for (int j = 0; j < C::kScalePerThread; ++j) {
      const int e = tid + j * kThreads, row = e / kKB, kb = e % kKB;
      const int64_t i = col0 + row;
      const int b = kb0 + kb;
      wsc[j] = 0;  // zero scale outside the weight: contributes nothing
      if (i < a.n && b < a.nblk) {
        const int64_t r = a.r0 + i * a.step;
        if constexpr (W::kMin)
          wsc[j] = __ldg(reinterpret_cast<const uint32_t*>(a.scales) + size_t(r) * a.nblk + b);
        else
          wsc[j] = __ldg(reinterpret_cast<const uint16_t*>(a.scales) + size_t(r) * a.nblk + b);
      }
    }
  };
  auto store_scales = [&](int s) {
    float* wd = reinterpret_cast<float*>(stage_ptr(s % kStages) + C::kW + C::kX);
#pragma unroll
    for (int j = 0; j < C::kScalePerThread; ++j) {
      const int e = tid + j * kThreads;
      wd[e] = h2f(uint16_t(wsc[j] & 0xffffu));
      if constexpr (W::kMin) wd[C::BN * kKB + e] = h2f(uint16_t(wsc[j] >> 16));
    }
  };

  float acc[WM][WN][4];
#pragma unroll
  for (int mt = 0; mt < WM; ++mt)
#pragma unroll
    for (int nt = 0; nt < WN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;

  // Prologue: stages 0 .. kStages-2 in flight.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nstages) {
      load_async(s);
      load_scales(s);
      store_scales(s);
    }
    cp_async_commit();
  }

  for (int s = 0; s < nstages; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage s visible; every warp is done with the slot stage s-1 used
    const int sn = s + kStages - 1;
    if (sn < nstages) {
      load_async(sn);
      load_scales(sn);
    }
    cp_async_commit();

    const uint8_t* base = stage_ptr(s % kStages);
    const uint8_t* ws = base;
    const uint8_t* xs = base + C::kW;
    const float* wd = reinterpret_cast<const float*>(base + C::kW + C::kX);
    const float* wmn = wd + C::BN * kKB;  // Q4_1 minimums
    const float* xd = reinterpret_cast<const float*>(base + C::kW + C::kX + C::kWs);
    const float* xsum = xd + C::BT * kKB;  // Q4_1: float(sum(xq)) per block
#pragma unroll
    for (int kb = 0; kb < kKB; ++kb) {
      uint32_t af[WM][4];
#pragma unroll
      for (int mt = 0; mt < WM; ++mt) {
        const int r = wm * 16 * WM + mt * 16 + g;
        const uint8_t* p0 = ws + r * C::kWRow + kb * W::kBlockBytes + tig * 4;
        const uint8_t* p1 = p0 + 8 * C::kWRow;
        if constexpr (W::kQ8) {
          af[mt][0] = *reinterpret_cast<const uint32_t*>(p0);
          af[mt][1] = *reinterpret_cast<const uint32_t*>(p1);
          af[mt][2] = *reinterpret_cast<const uint32_t*>(p0 + 16);
          af[mt][3] = *reinterpret_cast<const uint32_t*>(p1 + 16);
        } else {
          // Byte j of a Q4 block holds element j (low nibble) and j + 16 (high): one word gives
          // this lane's k = 4*tig.. (low nibbles) and k = 16 + 4*tig.. (high nibbles).
          const uint32_t w0 = *reinterpret_cast<const uint32_t*>(p0);
          const uint32_t w1 = *reinterpret_cast<const uint32_t*>(p1);
          af[mt][0] = w0 & 0x0F0F0F0Fu;
          af[mt][1] = w1 & 0x0F0F0F0Fu;
          af[mt][2] = (w0 >> 4) & 0x0F0F0F0Fu;
          af[mt][3] = (w1 >> 4) & 0x0F0F0F0Fu;
          if constexpr (T == DType::Q4_0) {  // q - 8 per byte (two's complement int8)
#pragma unroll
            for (int e = 0; e < 4; ++e) af[mt][e] = __vsub4(af[mt][e], 0x08080808u);
          }
        }
      }
      uint32_t bf[WN][2];
#pragma unroll
      for (int nt = 0; nt < WN; ++nt) {
        const uint8_t* p = xs + (wn * 8 * WN + nt * 8 + g) * C::kXRow + kb * 32 + tig * 4;
        bf[nt][0] = *reinterpret_cast<const uint32_t*>(p);
        bf[nt][1] = *reinterpret_cast<const uint32_t*>(p + 16);
      }
      float dw[WM][2], mw[WM][2], dx[WN][2], sx[WN][2];
#pragma unroll
      for (int mt = 0; mt < WM; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * 16 * WM + mt * 16 + g + 8 * h;
          dw[mt][h] = wd[r * kKB + kb];
          if constexpr (W::kMin) mw[mt][h] = wmn[r * kKB + kb];
        }
#pragma unroll
      for (int nt = 0; nt < WN; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int t = wn * 8 * WN + nt * 8 + tig * 2 + h;
          dx[nt][h] = xd[t * kKB + kb];
          if constexpr (W::kMin) sx[nt][h] = xsum[t * kKB + kb];
        }
#pragma unroll
      for (int mt = 0; mt < WM; ++mt)
#pragma unroll
        for (int nt = 0; nt < WN; ++nt) {
          int d[4];
          mma_s8(d, af[mt], bf[nt]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = e >> 1, c = e & 1;  // d[e]: row g + 8h, token 2*tig + c
            const float dot = __int_as_float(d[e]) - kMagic;
            float v = acc[mt][nt][e];
            // The decode GEMV's per-block formula (gemv.cuh, Frag::accumulate).
            if constexpr (W::kMin) v = fmaf(mw[mt][h] * dx[nt][c], sx[nt][c], v);
            acc[mt][nt][e] = fmaf(dw[mt][h] * dx[nt][c], dot, v);
          }
        }
    }
    if (sn < nstages) store_scales(sn);  // slot of stage s-1: free since this iteration's barrier
  }
  cp_async_wait<0>();

  // Epilogue: y[t][i] (+)= acc (+ bias[i]); or, silu_pairs, y[t][i/2] = silu(gate) * up where
  // gate (even i, row g) and up (i + 1, row g + 1) sit in lanes 4 apart.
#pragma unroll
  for (int mt = 0; mt < WM; ++mt)
#pragma unroll
    for (int nt = 0; nt < WN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = col0 + wm * 16 * WM + mt * 16 + g + 8 * (e >> 1);
        const int t = tok0 + wn * 8 * WN + nt * 8 + tig * 2 + (e & 1);
        float v = acc[mt][nt][e];
        if (a.silu_pairs) {
          const float up = __shfl_xor_sync(0xffffffffu, v, 4);  // every lane takes part
          if ((g & 1) || i >= a.n || t >= a.T) continue;
          a.y[size_t(t) * a.ldy + i / 2] = dev::silu(v) * up;
          continue;
        }
        if (i >= a.n || t >= a.T) continue;
        if (a.bias) v += a.bias[i];
        if (a.residual) v += a.residual[size_t(t) * a.ldy + i];
        a.y[size_t(t) * a.ldy + i] = v;
      }
}

// One warp per block of 32 inputs: the decode GEMV's quantization (gemv.cuh), element for element.
// Blocks nblk .. nblk4-1 of each row are zeroed (they meet zero-filled weights).
__global__ void quantize_kernel(const float* x, int64_t T, int nblk, int nblk4, int8_t* xq, float* xd, float* xs) {
  const int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (b >= T * nblk4) return;
  const int lane = threadIdx.x & 31;
  const int64_t t = b / nblk4;
  const int c = int(b % nblk4);
  int q = 0;
  float d = 0.f;
  if (c < nblk) {
    const float v = x[(t * nblk + c) * 32 + lane];
    const float am = dev::warp_max(fabsf(v));
    const float id = am > 0.f ? 127.f / am : 0.f;
    q = __float2int_rn(v * id);
    d = am / 127.f;
  }
  xq[b * 32 + lane] = int8_t(q);
  int sq = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
  if (lane == 0) {
    xd[b] = d;
    if (xs) xs[b] = float(sq);
  }
}

template <DType T, int WM, int WN>
void launch(const MmqArgs& a, cudaStream_t s) {
  using C = Cfg<T, WM, WN>;
  static bool attr_set = false;  // per instantiation; the device is fixed for the process
  if (!attr_set) {
    CUDA_CHECK(cudaFuncSetAttribute(mmq_kernel<T, WM, WN>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
    attr_set = true;
  }
  const dim3 grid(unsigned((a.n + C::BN - 1) / C::BN), unsigned((a.T + C::BT - 1) / C::BT));
  mmq_kernel<T, WM, WN><<<grid, kThreads, C::kSmem, s>>>(a);
  CUDA_CHECK_LAUNCH();
}

template <DType T>
void launch_tiles(const MmqArgs& a, cudaStream_t s) {
  // Token tile by T: a 64-token tile on 16 tokens would waste 3/4 of the tensor-core work. Then
  // the row tile: 128 rows unless that leaves fewer than two CTAs per SM (small weights, few
  // tokens), where 64-row tiles double the parallelism.
  const int64_t bt = a.T <= 16 ? 16 : a.T <= 32 ? 32 : 64;
  const int64_t ctas128 = (a.n + 127) / 128 * ((a.T + bt - 1) / bt);
  const bool narrow = ctas128 < 2 * int64_t(device_sm_count());
  if (bt == 16)
    narrow ? launch<T, 1, 1>(a, s) : launch<T, 2, 1>(a, s);
  else if (bt == 32)
    narrow ? launch<T, 1, 2>(a, s) : launch<T, 2, 2>(a, s);
  else
    narrow ? launch<T, 1, 4>(a, s) : launch<T, 2, 4>(a, s);
}

}  // namespace mmq

// The 32-element block types (the K-quants take the outer route: dequantize + cuBLAS).
bool mmq_supported(DType t) { return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0; }

int mmq_nblk4(int64_t cols) { return int((cols / 32 + mmq::kKB - 1) / mmq::kKB * mmq::kKB); }

void mmq_quantize(const float* x, int64_t T, int64_t cols, int8_t* xq, float* xd, float* xs, cudaStream_t s) {
  if (T <= 0 || cols <= 0 || cols % 32 != 0) LMF_FAIL("cuda mmq_quantize: bad shape ", T, "x", cols);
  const int nblk = int(cols / 32), nblk4 = mmq_nblk4(cols);
  const int64_t threads = T * nblk4 * 32;
  mmq::quantize_kernel<<<unsigned((threads + 255) / 256), 256, 0, s>>>(x, T, nblk, nblk4, xq, xd, xs);
  CUDA_CHECK_LAUNCH();
}

void mmq_gemm(const MmqArgs& a, cudaStream_t s) {
  if (!a.q || !a.scales || !a.xq || !a.xd || !a.y || a.T <= 0 || a.n <= 0 || a.nblk <= 0 ||
      a.nblk4 != int((a.nblk + mmq::kKB - 1) / mmq::kKB * mmq::kKB) || a.ldy < (a.silu_pairs ? a.n / 2 : a.n) ||
      a.step < 1 || a.r0 < 0 || (a.silu_pairs && (a.n % 2 != 0 || a.bias || a.residual)))
    LMF_FAIL("cuda mmq_gemm: bad arguments (T ", a.T, ", n ", a.n, ", nblk ", a.nblk, ", nblk4 ", a.nblk4, ")");
  if (a.type == DType::Q4_1 && !a.xs) LMF_FAIL("cuda mmq_gemm: Q4_1 needs the activation block sums (xs)");
  switch (a.type) {
    case DType::Q4_0: mmq::launch_tiles<DType::Q4_0>(a, s); break;
    case DType::Q4_1: mmq::launch_tiles<DType::Q4_1>(a, s); break;
    case DType::Q8_0: mmq::launch_tiles<DType::Q8_0>(a, s); break;
    default: LMF_FAIL("cuda mmq_gemm: unsupported weight type ", dtype_name(a.type), " (Q4_0, Q4_1, Q8_0)");
  }
}

}  // namespace lmf::cuda

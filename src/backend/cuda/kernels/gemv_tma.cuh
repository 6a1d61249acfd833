// Streaming GEMV for the integer-dot weight types (Q4_0, Q4_1, Q8_0): weights travel from DRAM
// to shared memory by the bulk copy engine (cp.async.bulk, completing on an mbarrier), S items
// deep per warp, instead of through registers.
//
// Why. The register-pipelined gemv_kernel keeps at most two batches of 16-byte loads per lane in
// flight, and the batch-to-batch register copy makes the warp wait for the newer batch too
// (ncu on the 8B down shape: 27 % of DRAM bandwidth, warps stalled on L1TEX scoreboards 53 % of
// the time). Here each warp keeps S items in flight with no registers held, and the copies of
// its first S items are issued BEFORE griddepcontrol.wait: weights never depend on the previous
// kernel, so with programmatic dependent launch they stream in while the previous kernel's tail
// still runs.
//
// Work split: exactly gemv_kernel's (ksplit 1). A warp owns row groups of kRows rows, dealt
// round-robin over blocks; an item is one row group x one 32-block column group (the fragment
// gemv_kernel loads per step): kRows weight pieces of 32 x P x 16 bytes and kRows scale runs,
// each contiguous in the tiled layout of kernels.h, so one bulk copy each (lanes 0..2*kRows-1
// issue one copy apiece). A warp walks its items in order, accumulating per lane over the column
// groups exactly as gemv_kernel does, so the two kernels give bit-identical outputs.
//
// Sizing (gemv_tma_plan): 2 blocks of 8 warps per SM as gemv_kernel; S per shape so that the
// warps that have work keep ~40 KB per block in flight (short-and-wide shapes such as the 8B
// down projection have work for only half the warps: those get deeper rings).
#pragma once
#include <algorithm>

#include "backend/cuda/kernels/gemv.cuh"

namespace lmf::cuda::dev {

constexpr int kTmaMaxSlots = 8;
constexpr size_t kTmaBlockRing = 40 * 1024;  // bytes in flight per block (target)

struct TmaPlan {
  int slots = 0;                 // S: items in flight per warp (0 = kernel does not apply)
  int warps = 0;                 // warps per block with row groups (rings allocated for these)
  int grid = 0;                  // blocks
  uint32_t piece_bytes = 0;      // weights of one row in one item: 32 x P x 16
  uint32_t scale_run = 0;        // scales of one row in one item: 32 x scale_bytes
  uint32_t slot_bytes = 0;       // kRows x (piece_bytes + scale_run)
  size_t x_bytes = 0;            // staged x, rounded up to 16
  size_t smem = 0;               // dynamic shared memory total
};

template <DType T>
inline TmaPlan gemv_tma_plan(int64_t rows, int64_t cols, int sms) {
  TmaPlan t;
  if constexpr (!kInt8x<T>) {
    return t;
  } else {
    const int64_t nblk = cols / 32;
    // Every scale run (and the short last one) must be a 16-byte multiple at a 16-byte offset.
    if ((nblk * WTraits<T>::scale_bytes) % 16 != 0) return t;
    const int64_t n_rg = (rows + kRows - 1) / kRows;
    t.grid = int(std::max<int64_t>(1, std::min<int64_t>(n_rg, int64_t(sms) * 2)));
    t.warps = int(std::min<int64_t>(kGemvWarps, (n_rg + t.grid - 1) / t.grid));
    t.piece_bytes = uint32_t(32 * WTraits<T>::P * 16);
    t.scale_run = uint32_t(32 * WTraits<T>::scale_bytes);
    t.slot_bytes = uint32_t(kRows) * (t.piece_bytes + t.scale_run);
    t.slots = int(std::max<size_t>(2, std::min<size_t>(kTmaMaxSlots, kTmaBlockRing / (size_t(t.warps) * t.slot_bytes))));
    t.x_bytes = (gemv_smem_bytes<T>(int(cols)) + 15) / 16 * 16;
    t.smem = t.x_bytes + size_t(t.warps) * t.slots * t.slot_bytes;
    return t;
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// The barrier inits must be visible to the copy engine (async proxy) before it signals them.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait_parity(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// Global -> shared bulk copy (16-byte aligned, size a multiple of 16), evict-first in L2.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          uint64_t pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(pol)
      : "memory");
}

template <DType T, Prologue PRO, Epilogue EPI>
__global__ void __launch_bounds__(kGemvThreads, 3)
    gemv_tma_kernel(const __grid_constant__ GemvParams p, const __grid_constant__ TmaPlan plan) {
  static_assert(kInt8x<T>, "the streaming GEMV is for the integer-dot types");
  static_assert(EPI != Epilogue::QKV, "the in-GEMV QKV epilogue stays on gemv_kernel");
  constexpr int P = WTraits<T>::P;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[kGemvWarps][kTmaMaxSlots];
  __shared__ float red32[32];
  float4* xs4 = reinterpret_cast<float4*>(smem);

  const int nblk = p.cols >> 5;
  const int ngroups = (nblk + 31) / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_rg = (p.rows + kRows - 1) / kRows;
  const int rg0 = int(blockIdx.x) + int(gridDim.x) * warp, rg_step = int(gridDim.x) * kGemvWarps;
  const int my_rg = rg0 < n_rg ? (n_rg - rg0 + rg_step - 1) / rg_step : 0;
  const int n_items = my_rg * ngroups;
  const int S = plan.slots;
  uint8_t* ring = smem + plan.x_bytes + size_t(warp) * S * plan.slot_bytes;  // warp < plan.warps
  const uint64_t pol = evict_first_policy();

  // Item i of this warp: row group rg0 + (i / ngroups) * rg_step, column group i % ngroups.
  auto issue = [&](int i) {
    const int rg = rg0 + (i / ngroups) * rg_step, g = i % ngroups;
    const int gb = min(32, nblk - 32 * g);
    const int nr = min(kRows, p.rows - rg * kRows);
    uint8_t* slot = ring + size_t(i % S) * plan.slot_bytes;
    uint64_t* bar = &full[warp][i % S];
    const uint32_t wb = uint32_t(gb) * P * 16, sb = uint32_t(gb) * WTraits<T>::scale_bytes;
    if (lane == 0) mbar_arrive_expect_tx(bar, uint32_t(nr) * (wb + sb));
    __syncwarp();
    const int r = lane & (kRows - 1);
    if (lane < 2 * kRows && r < nr) {
      const size_t row = size_t(rg) * kRows + r;
      if (lane < kRows)
        bulk_load(slot + r * plan.piece_bytes, p.q + row * nblk * P * 16 + size_t(g) * 32 * P * 16, wb, bar, pol);
      else
        bulk_load(slot + kRows * plan.piece_bytes + r * plan.scale_run,
                  p.scales + (row * nblk + size_t(g) * 32) * WTraits<T>::scale_bytes, sb, bar, pol);
    }
  };

  if (n_items > 0) {
    if (lane == 0) {
      for (int s = 0; s < S; ++s) mbar_init(&full[warp][s], 1);
      mbar_init_fence();
    }
    __syncwarp();
    // Weights only: safe before the wait on the previous kernel (see the header comment).
    for (int i = 0; i < min(S, n_items); ++i) issue(i);
  }
  pdl_wait();
  pdl_launch_dependents();
  gemv_stage_x<T, PRO>(p, xs4, red32);
  __syncthreads();

  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  for (int i = 0; i < n_items; ++i) {
    const int rgi = i / ngroups, g = i - rgi * ngroups;
    const int rg = rg0 + rgi * rg_step;
    const int gb = min(32, nblk - 32 * g);
    const uint8_t* slot = ring + size_t(i % S) * plan.slot_bytes;
    mbar_wait_parity(&full[warp][i % S], uint32_t(i / S) & 1u);
    Frag<T> f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (lane < gb && rg * kRows + r < p.rows) {
        const uint8_t* w = slot + r * plan.piece_bytes;
#pragma unroll
        for (int pc = 0; pc < P; ++pc) f.w[r][pc] = *reinterpret_cast<const uint4*>(w + (pc * gb + lane) * 16);
        const uint8_t* sc = slot + kRows * plan.piece_bytes + r * plan.scale_run;
        if constexpr (WTraits<T>::scale_bytes == 2)
          f.sc[r] = *reinterpret_cast<const uint16_t*>(sc + lane * 2);
        else
          f.sc[r] = *reinterpret_cast<const uint32_t*>(sc + lane * 4);
      } else {
#pragma unroll
        for (int pc = 0; pc < P; ++pc) f.w[r][pc] = make_uint4(0, 0, 0, 0);
        f.sc[r] = 0;
      }
    }
    f.accumulate(acc, xs4, g, nblk, lane);
    __syncwarp();  // every lane has consumed the slot: it may be refilled
    if (i + S < n_items) issue(i + S);
    if (g == ngroups - 1) {  // row group complete: same reduction and epilogue as gemv_kernel
      float v[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        v[r] = warp_sum(acc[r]);
        acc[r] = 0.f;
      }
      const int row0 = rg * kRows;
      if constexpr (EPI == Epilogue::SiluMul) {
#pragma unroll
        for (int r = 0; r < kRows; r += 2)
          if (lane == r / 2) p.y[row0 / 2 + r / 2] = silu(v[r]) * v[r + 1];
      } else {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int row = row0 + r;
          if (lane == r && row < p.rows) {
            float o = v[r];
            if constexpr (EPI == Epilogue::Residual) o += p.y_residual[row];
            if constexpr (EPI == Epilogue::Store)
              if (p.bias) o += p.bias[row];
            p.y[row] = o;
          }
        }
      }
    }
  }
}

}  // namespace lmf::cuda::dev

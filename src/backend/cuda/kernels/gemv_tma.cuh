// Streaming GEMV for the integer-dot weight types (Q4_0, Q4_1, Q8_0): weights travel from DRAM
// to shared memory by the bulk copy engine (cp.async.bulk, completing on an mbarrier), a ring of
// NS stages deep, instead of through registers.
//
// Why. The register-pipelined gemv_kernel keeps at most two batches of 16-byte loads per lane in
// flight, and the batch-to-batch register copy makes the warp wait for the newer batch too
// (ncu on the 8B down shape: 27 % of DRAM bandwidth, warps stalled on L1TEX scoreboards 53 % of
// the time). Here one thread per block keeps up to ~96 KB per SM in flight with no registers
// held, and the copies of the first stages are issued BEFORE griddepcontrol.wait: weights never
// depend on the previous kernel, so with programmatic dependent launch a GEMV's first ~96 KB per
// SM stream in while the previous kernel (attention, the previous GEMV's tail) still runs. For
// that the block is sized to share an SM with the block of the next kernel (<= ~113 KB of
// shared memory, <= 128 registers per thread, 256 threads).
//
// Work split. A stage is RS whole rows (RS a multiple of 4, host-planned so a stage is 4-16 KB),
// plus their scales (both row ranges are contiguous in the tiled layout of kernels.h: one bulk
// copy each). Stages are dealt round-robin over the blocks (one block per SM). In a stage, a
// unit is 4 rows x one 32-block column group, exactly the fragment gemv_kernel's warps load, so
// the same Frag::accumulate does the math; warp w takes units w, w+8, ... Each unit's 4 sums are
// reduced across the warp and stored per (row, column group); after a block barrier, thread t
// adds row t's column-group sums in group order and runs the epilogue. The summation order
// depends only on cols, so every prologue/epilogue variant and any row split (the Q, K, V views
// of a fused QKV weight) give bit-identical rows.
#pragma once
#include "backend/cuda/kernels/gemv.cuh"

namespace lmf::cuda::dev {

constexpr int kTmaMaxStages = 8;
constexpr size_t kTmaRingBytes = 96 * 1024;  // in flight per block (one block per SM)
constexpr int kTmaMaxRows = 256;              // rows per stage: one finishing thread each

// Host-planned stage geometry (see gemv_tma_plan).
struct TmaPlan {
  int rs = 0;           // rows per stage (multiple of 4)
  int ns = 0;           // ring slots
  int n_stages = 0;     // ceil(rows / rs)
  uint32_t row_bytes = 0, srow_bytes = 0;  // per row: tiled weight bytes, scale bytes
  uint32_t slot_bytes = 0;                 // rs * (row_bytes + srow_bytes), 16-byte multiple
  size_t x_bytes = 0;                      // staged x, rounded up to 16
  size_t red_floats = 0;                   // 2 x rs x ngroups
  size_t smem = 0;                         // dynamic shared memory total
};

// Stage geometry for a weight, or rs = 0 when the streaming kernel does not apply (scale rows
// not a 16-byte multiple, or rows so long that two stages do not fit the ring).
template <DType T>
inline TmaPlan gemv_tma_plan(int64_t rows, int64_t cols, int sms) {
  TmaPlan t;
  if constexpr (!kInt8x<T>) {
    return t;
  } else {
    const int64_t nblk = cols / 32;
    t.row_bytes = uint32_t(nblk * WTraits<T>::P * 16);
    t.srow_bytes = uint32_t(nblk * WTraits<T>::scale_bytes);
    if (t.srow_bytes % 16 != 0) return t;
    const uint64_t per_row = uint64_t(t.row_bytes) + t.srow_bytes;
    // Aim for >= 2 stages per SM (balance) but 4-16 KB per stage (few barriers per byte).
    uint64_t target = uint64_t(rows) * per_row / (2 * uint64_t(sms));
    target = std::min<uint64_t>(16 * 1024, std::max<uint64_t>(4 * 1024, target));
    int64_t rs = int64_t(target / per_row) / 4 * 4;
    rs = std::max<int64_t>(4, std::min<int64_t>(rs, kTmaMaxRows));
    const uint64_t slot = uint64_t(rs) * per_row;
    if (2 * slot > kTmaRingBytes + kTmaRingBytes / 4) return t;  // rows too long: gemv_kernel
    t.rs = int(rs);
    t.slot_bytes = uint32_t(slot);
    t.ns = int(std::max<uint64_t>(2, std::min<uint64_t>(kTmaMaxStages, kTmaRingBytes / slot)));
    t.n_stages = int((rows + rs - 1) / rs);
    t.x_bytes = (gemv_smem_bytes<T>(int(cols)) + 15) / 16 * 16;
    t.red_floats = size_t(2) * size_t(rs) * size_t((nblk + 31) / 32);
    t.smem = t.x_bytes + size_t(t.ns) * t.slot_bytes + t.red_floats * sizeof(float);
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

// One unit's fragment (4 rows x column group g) from a ring slot; rows >= nr read as zero.
template <DType T>
__device__ __forceinline__ void frag_from_smem(Frag<T>& f, const uint8_t* slot_w, const uint8_t* slot_s,
                                               int rg_local, int nr, int g, int nblk, uint32_t row_bytes,
                                               int lane) {
  constexpr int P = WTraits<T>::P;
  const int gb = min(32, nblk - 32 * g);
  const int c = 32 * g + lane;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = rg_local * kRows + r;
    if (lane < gb && row < nr) {
      const uint8_t* base = slot_w + size_t(row) * row_bytes + size_t(g) * 32 * P * 16;
#pragma unroll
      for (int pc = 0; pc < P; ++pc) f.w[r][pc] = *reinterpret_cast<const uint4*>(base + (pc * gb + lane) * 16);
      if constexpr (WTraits<T>::scale_bytes == 2)
        f.sc[r] = *reinterpret_cast<const uint16_t*>(slot_s + (size_t(row) * nblk + c) * 2);
      else
        f.sc[r] = *reinterpret_cast<const uint32_t*>(slot_s + (size_t(row) * nblk + c) * 4);
    } else {
#pragma unroll
      for (int pc = 0; pc < P; ++pc) f.w[r][pc] = make_uint4(0, 0, 0, 0);
      f.sc[r] = 0;
    }
  }
}

template <DType T, Prologue PRO, Epilogue EPI>
__global__ void __launch_bounds__(kGemvThreads, 2)
    gemv_tma_kernel(const __grid_constant__ GemvParams p, const __grid_constant__ TmaPlan plan) {
  static_assert(kInt8x<T>, "the streaming GEMV is for the integer-dot types");
  static_assert(EPI != Epilogue::QKV, "the in-GEMV QKV epilogue stays on gemv_kernel");
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[kTmaMaxStages];
  __shared__ float red32[32];
  float4* xs4 = reinterpret_cast<float4*>(smem);
  uint8_t* ring = smem + plan.x_bytes;
  float* red = reinterpret_cast<float*>(ring + size_t(plan.ns) * plan.slot_bytes);

  const int nblk = p.cols >> 5;
  const int ngroups = (nblk + 31) / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int my_n = (plan.n_stages - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
  const uint64_t pol = evict_first_policy();

  // Stage k of this block: global stage blockIdx.x + k * gridDim.x, rows [row0, row0 + nr).
  auto issue = [&](int k) {
    const int st = int(blockIdx.x) + k * int(gridDim.x);
    const int64_t row0 = int64_t(st) * plan.rs;
    const int nr = int(min(int64_t(plan.rs), int64_t(p.rows) - row0));
    uint8_t* slot = ring + size_t(k % plan.ns) * plan.slot_bytes;
    uint64_t* bar = &full[k % plan.ns];
    const uint32_t wb = uint32_t(nr) * plan.row_bytes, sb = uint32_t(nr) * plan.srow_bytes;
    mbar_arrive_expect_tx(bar, wb + sb);
    bulk_load(slot, p.q + size_t(row0) * plan.row_bytes, wb, bar, pol);
    bulk_load(slot + size_t(plan.rs) * plan.row_bytes, p.scales + size_t(row0) * plan.srow_bytes, sb, bar, pol);
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < plan.ns; ++s) mbar_init(&full[s], 1);
    mbar_init_fence();
    // Weights only: safe before the wait on the previous kernel (see the header comment).
    for (int k = 0; k < min(plan.ns, my_n); ++k) issue(k);
  }
  pdl_wait();
  pdl_launch_dependents();
  gemv_stage_x<T, PRO>(p, xs4, red32);
  __syncthreads();  // x staged; the barrier inits are visible to every thread

  for (int k = 0; k < my_n; ++k) {
    const int s = k % plan.ns;
    const int st = int(blockIdx.x) + k * int(gridDim.x);
    const int64_t row0 = int64_t(st) * plan.rs;
    const int nr = int(min(int64_t(plan.rs), int64_t(p.rows) - row0));
    const uint8_t* slot_w = ring + size_t(s) * plan.slot_bytes;
    const uint8_t* slot_s = slot_w + size_t(plan.rs) * plan.row_bytes;
    float* rbuf = red + size_t(k & 1) * plan.rs * ngroups;
    mbar_wait_parity(&full[s], uint32_t(k / plan.ns) & 1u);

    const int units = ((nr + kRows - 1) / kRows) * ngroups;
    for (int u = warp; u < units; u += kGemvWarps) {
      const int rg_local = u / ngroups, g = u - rg_local * ngroups;
      Frag<T> f;
      frag_from_smem<T>(f, slot_w, slot_s, rg_local, nr, g, nblk, plan.row_bytes, lane);
      float acc[kRows] = {};
      f.accumulate(acc, xs4, g, nblk, lane);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float v = warp_sum(acc[r]);
        const int row = rg_local * kRows + r;
        if (lane == r && row < nr) rbuf[row * ngroups + g] = v;
      }
    }
    __syncthreads();  // slot s consumed; rbuf complete
    if (threadIdx.x == 0 && k + plan.ns < my_n) issue(k + plan.ns);

    // Finish: row t's column-group sums in group order, then the epilogue.
    if constexpr (EPI == Epilogue::SiluMul) {
      const int t = threadIdx.x;
      if (2 * t + 1 < nr) {
        float gsum = 0.f, usum = 0.f;
        for (int g = 0; g < ngroups; ++g) {
          gsum += rbuf[(2 * t) * ngroups + g];
          usum += rbuf[(2 * t + 1) * ngroups + g];
        }
        p.y[row0 / 2 + t] = silu(gsum) * usum;
      }
    } else {
      for (int t = threadIdx.x; t < nr; t += kGemvThreads) {
        float v = 0.f;
        for (int g = 0; g < ngroups; ++g) v += rbuf[t * ngroups + g];
        const int64_t row = row0 + t;
        if constexpr (EPI == Epilogue::Residual) v += p.y_residual[row];
        if constexpr (EPI == Epilogue::Store)
          if (p.bias) v += p.bias[row];
        p.y[row] = v;
      }
    }
  }
}

}  // namespace lmf::cuda::dev

// Causal prefill attention over the fp16 head-major KV cache on CUDA cores (the fp32 reference
// of the tensor-core kernel in prefill_attention_tc.cu; LMFUSE_PREFILL_TC_ATTENTION=0 uses it).
//
// Block = (tile of kQTile queries, one query head), 4 warps; warp w owns queries 4w..4w+3 of the
// tile. Keys are walked in tiles of 32 up to the last query's position: the block stages K and
// V of a tile in shared memory as fp32 (K rows padded to HD+1 floats so lane j reading key j is
// bank-conflict free), then for each of its queries a warp computes 32 scores (lane j = key j,
// the query broadcast from shared memory, pre-scaled by 1/sqrt(HD)), masks keys past the query's
// position, and updates its online softmax (running max m, sum l, rescale by exp(m_old - m_new))
// and its output accumulator (lane owns dims lane, lane+32, ...). The first key tile always
// holds key 0, which every query sees, so m is finite after it and the masked -inf scores
// contribute exp(-inf) = 0. Arithmetic as decode (fp32, __expf).
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/prefill.h"

namespace lmf::cuda {
namespace pdev {

constexpr int kQTile = 16, kKTile = 32, kAttnWarps = 4, kQPerWarp = kQTile / kAttnWarps;

template <int HD>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attn_prefill_kernel(const float* q, const __half* kc, const __half* vc, float* out, int T, int n_head,
                        int group, int n_ctx, const int* pos0p, float scale) {
  constexpr int DPL = HD / 32;  // output dims per lane
  __shared__ float qs[kQTile][HD];
  __shared__ float ks[kKTile][HD + 1];
  __shared__ float vs[kKTile][HD];
  const int qt0 = blockIdx.x * kQTile, h = blockIdx.y, kvh = h / group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int pos0 = *pos0p;
  const size_t ld = size_t(n_head) * HD;
  for (int i = tid; i < kQTile * HD; i += blockDim.x) {
    const int r = i / HD, d = i % HD, t = qt0 + r;
    qs[r][d] = t < T ? q[size_t(t) * ld + size_t(h) * HD + d] * scale : 0.f;
  }
  float m[kQPerWarp], l[kQPerWarp], acc[kQPerWarp][DPL];
#pragma unroll
  for (int qi = 0; qi < kQPerWarp; ++qi) {
    m[qi] = -INFINITY;
    l[qi] = 0.f;
#pragma unroll
    for (int k = 0; k < DPL; ++k) acc[qi][k] = 0.f;
  }
  const int n_keys = pos0 + min(qt0 + kQTile, T);  // keys 0 .. position of the tile's last query
  const __half* kb = kc + size_t(kvh) * n_ctx * HD;
  const __half* vb = vc + size_t(kvh) * n_ctx * HD;
  for (int k0 = 0; k0 < n_keys; k0 += kKTile) {
    __syncthreads();  // previous tile fully used (and qs written, first time)
    for (int i = tid; i < kKTile * HD / 2; i += blockDim.x) {
      const int j = (2 * i) / HD, d = (2 * i) % HD, kp = k0 + j;
      float2 kv = make_float2(0.f, 0.f), vv = kv;
      if (kp < n_keys) {
        kv = __half22float2(*reinterpret_cast<const __half2*>(kb + size_t(kp) * HD + d));
        vv = __half22float2(*reinterpret_cast<const __half2*>(vb + size_t(kp) * HD + d));
      }
      ks[j][d] = kv.x;
      ks[j][d + 1] = kv.y;
      vs[j][d] = vv.x;
      vs[j][d + 1] = vv.y;
    }
    __syncthreads();
#pragma unroll
    for (int qi = 0; qi < kQPerWarp; ++qi) {
      const int r = warp * kQPerWarp + qi, t = qt0 + r, p_t = pos0 + t;
      if (t >= T || k0 > p_t) continue;  // warp-uniform
      float s = 0.f;
#pragma unroll 16
      for (int d = 0; d < HD; ++d) s = fmaf(qs[r][d], ks[lane][d], s);
      if (k0 + lane > p_t) s = -INFINITY;
      const float mn = fmaxf(m[qi], dev::warp_max(s));
      const float corr = __expf(m[qi] - mn);  // m = -inf -> 0
      const float p = __expf(s - mn);
      l[qi] = l[qi] * corr + dev::warp_sum(p);
      m[qi] = mn;
#pragma unroll
      for (int k = 0; k < DPL; ++k) acc[qi][k] *= corr;
#pragma unroll 8
      for (int j = 0; j < kKTile; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int k = 0; k < DPL; ++k) acc[qi][k] = fmaf(pj, vs[j][lane + 32 * k], acc[qi][k]);
      }
    }
  }
#pragma unroll
  for (int qi = 0; qi < kQPerWarp; ++qi) {
    const int t = qt0 + warp * kQPerWarp + qi;
    if (t >= T) continue;
    const float inv = 1.f / l[qi];
#pragma unroll
    for (int k = 0; k < DPL; ++k) out[size_t(t) * ld + size_t(h) * HD + lane + 32 * k] = acc[qi][k] * inv;
  }
}

}  // namespace pdev

void check_prefill_attn_args(const PrefillAttnArgs& a, const char* who) {
  if (a.T <= 0 || a.n_head <= 0 || a.n_kv_head <= 0 || a.n_head % a.n_kv_head != 0 || !a.q || !a.out ||
      !a.k_cache || !a.v_cache || !a.pos0 || a.n_ctx < a.T)
    LMF_FAIL("cuda ", who, ": bad arguments (T ", a.T, ", heads ", a.n_head, "/", a.n_kv_head, ", n_ctx ", a.n_ctx,
             ")");
  if (a.head_dim != 32 && a.head_dim != 64 && a.head_dim != 128)
    LMF_FAIL("cuda ", who, ": head_dim must be 32, 64 or 128, got ", a.head_dim);
}

void attention_prefill(const PrefillAttnArgs& a, cudaStream_t s) {
  check_prefill_attn_args(a, "attention_prefill");
  const dim3 grid(unsigned((a.T + pdev::kQTile - 1) / pdev::kQTile), unsigned(a.n_head));
  const int group = a.n_head / a.n_kv_head;
  const float scale = 1.f / std::sqrt(float(a.head_dim));
  const auto* kc = reinterpret_cast<const __half*>(a.k_cache);
  const auto* vc = reinterpret_cast<const __half*>(a.v_cache);
  constexpr int thr = pdev::kAttnWarps * 32;
  switch (a.head_dim) {
    case 32: pdev::attn_prefill_kernel<32><<<grid, thr, 0, s>>>(a.q, kc, vc, a.out, a.T, a.n_head, group, int(a.n_ctx), a.pos0, scale); break;
    case 64: pdev::attn_prefill_kernel<64><<<grid, thr, 0, s>>>(a.q, kc, vc, a.out, a.T, a.n_head, group, int(a.n_ctx), a.pos0, scale); break;
    case 128: pdev::attn_prefill_kernel<128><<<grid, thr, 0, s>>>(a.q, kc, vc, a.out, a.T, a.n_head, group, int(a.n_ctx), a.pos0, scale); break;
    default: LMF_FAIL("cuda attention_prefill: head_dim must be 32, 64 or 128, got ", a.head_dim);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace lmf::cuda

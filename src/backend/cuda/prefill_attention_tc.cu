// Causal prefill attention on tensor cores (flash-attention style, mma.sync m16n8k16 fp16 with
// fp32 accumulation), over the fp16 head-major KV cache. Same contract as attention_prefill.
//
// Block = (tile of 64 queries, one query head), 4 warps of 16 query rows each. Keys are walked in
// tiles of 64 up to the tile's last query position; K and V tiles are staged in shared memory by
// cp.async, double-buffered (rows past the visible keys zero-filled: the cache may hold garbage
// there, and 0-weight x NaN would still be NaN). Per key tile a warp computes S = Q K^T (16 x 64)
// in registers, masks keys past each query's position, updates its online softmax (running max
// and sum per row, the quad of lanes sharing a row reduce with two shuffles) and accumulates
// O += P V, where P's accumulator fragments are reused directly as the A operand of the second
// product (the m16n8k16 C layout of two adjacent 8-key tiles is the A layout of one 16-key step).
//
// Exactness ("split" operands). The K and V cache entries are fp16 already, exact as mma
// operands. Q (fp32) and P (fp32 probabilities) are not: each is split into an fp16 high part and
// an fp16 low part (x - hi), and both parts are multiplied (2 mma per product), so the scores and
// the output carry fp32-level accuracy instead of fp16's 2^-11: prefill then agrees with the
// decode attention (fp32 arithmetic) to ~1e-6, which keeps the next layer's int8 activation codes
// identical (docs/PERF.md: a 2^-11 difference flips codes and drifts prefill from decode by
// ~1e-2 on the small golden models). The price is twice the tensor-core work of plain fp16.
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/prefill.h"

namespace lmf::cuda {
namespace fa {

constexpr int kBQ = 64, kBK = 64, kWarps = 4, kThreads = 32 * kWarps;

template <int HD>
struct Smem {
  static constexpr int kRow = HD + 8;  // halves per staged row: +16 bytes keeps fragment loads conflict-free
  static constexpr int kQ = 2 * kBQ * kRow;   // Q hi, Q lo
  static constexpr int kKV = 2 * kBK * kRow;  // K, V of one stage
  static constexpr int kHalves = kQ + 2 * kKV;
  static constexpr int kBytes = kHalves * 2;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;"); }

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ __forceinline__ uint32_t pack_h2(__half a, __half b) {
  return uint32_t(__half_as_ushort(a)) | (uint32_t(__half_as_ushort(b)) << 16);
}
// (x, y) -> hi pair and lo pair (x - hi(x), y - hi(y)).
__device__ __forceinline__ void split2(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __half hx = __float2half_rn(x), hy = __float2half_rn(y);
  hi = pack_h2(hx, hy);
  lo = pack_h2(__float2half_rn(x - __half2float(hx)), __float2half_rn(y - __half2float(hy)));
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    attn_tc_kernel(const float* q, const __half* kc, const __half* vc, float* out, int T, int n_head, int group,
                   int n_ctx, const int* pos0p, float qscale) {
  using S = Smem<HD>;
  constexpr int R = S::kRow, KS = HD / 16, NT_O = HD / 8, NT_S = kBK / 8;
  extern __shared__ __align__(16) __half sm[];
  __half* qh = sm;
  __half* ql = sm + kBQ * R;
  __half* kv = sm + S::kQ;  // stage s: K at kv + s*kKV, V at + kBK*R
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
  // Heaviest query tiles first (causal: the last tile walks the most keys), so the short ones
  // fill the tail of the grid instead of leaving SMs idle behind one long block.
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBQ, h = blockIdx.y, kvh = h / group;
  const int pos0 = *pos0p;
  const size_t ld = size_t(n_head) * HD;
  const __half* kbase = kc + size_t(kvh) * n_ctx * HD;
  const __half* vbase = vc + size_t(kvh) * n_ctx * HD;
  const int n_keys = pos0 + min(T, q0 + kBQ);  // keys the tile's last query sees
  const int n_tiles = (n_keys + kBK - 1) / kBK;

  auto load_kv = [&](int kt, int stage) {
    __half* ks = kv + stage * S::kKV;
    __half* vs = ks + kBK * R;
    constexpr int kChunks = kBK * HD / 8;  // 16-byte chunks per matrix
    for (int c = tid; c < kChunks; c += kThreads) {
      const int r = c / (HD / 8), d8 = c % (HD / 8), key = kt * kBK + r;
      const bool ok = key < n_keys;
      const size_t off = ok ? size_t(key) * HD + d8 * 8 : 0;
      cp_async16(ks + r * R + d8 * 8, kbase + off, ok);
      cp_async16(vs + r * R + d8 * 8, vbase + off, ok);
    }
    cp_async_commit();
  };
  load_kv(0, 0);

  // Q tile -> shared memory as hi/lo fp16, pre-scaled by 1/sqrt(HD) * log2(e) (scores in log2 units).
  for (int i = tid; i < kBQ * HD / 2; i += kThreads) {
    const int r = i / (HD / 2), d = (i % (HD / 2)) * 2, t = q0 + r;
    float2 v = make_float2(0.f, 0.f);
    if (t < T) v = *reinterpret_cast<const float2*>(q + size_t(t) * ld + size_t(h) * HD + d);
    uint32_t hi, lo;
    split2(v.x * qscale, v.y * qscale, hi, lo);
    *reinterpret_cast<uint32_t*>(qh + r * R + d) = hi;
    *reinterpret_cast<uint32_t*>(ql + r * R + d) = lo;
  }

  float o[NT_O][4];
#pragma unroll
  for (int j = 0; j < NT_O; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int row0 = warp * 16 + g;                    // tile rows row0 and row0 + 8
  const int qp[2] = {pos0 + q0 + row0, pos0 + q0 + row0 + 8};  // their positions

  for (int kt = 0; kt < n_tiles; ++kt) {
    cp_async_wait_all();
    __syncthreads();  // tile kt staged (and Q, on the first pass); the other stage is free
    if (kt + 1 < n_tiles) load_kv(kt + 1, (kt + 1) & 1);
    const __half* ks = kv + (kt & 1) * S::kKV;
    const __half* vs = ks + kBK * R;

    // S = Q K^T: 16 rows x 64 keys per warp.
    float s[NT_S][4];
#pragma unroll
    for (int j = 0; j < NT_S; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      uint32_t ah[4], al[4];
      const int c = k * 16 + tig * 2;
      ah[0] = *reinterpret_cast<const uint32_t*>(qh + row0 * R + c);
      ah[1] = *reinterpret_cast<const uint32_t*>(qh + (row0 + 8) * R + c);
      ah[2] = *reinterpret_cast<const uint32_t*>(qh + row0 * R + c + 8);
      ah[3] = *reinterpret_cast<const uint32_t*>(qh + (row0 + 8) * R + c + 8);
      al[0] = *reinterpret_cast<const uint32_t*>(ql + row0 * R + c);
      al[1] = *reinterpret_cast<const uint32_t*>(ql + (row0 + 8) * R + c);
      al[2] = *reinterpret_cast<const uint32_t*>(ql + row0 * R + c + 8);
      al[3] = *reinterpret_cast<const uint32_t*>(ql + (row0 + 8) * R + c + 8);
#pragma unroll
      for (int j = 0; j < NT_S; ++j) {
        const __half* kr = ks + (j * 8 + g) * R + c;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(kr);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(kr + 8);
        mma16816(s[j], al, b0, b1);  // small part first
        mma16816(s[j], ah, b0, b1);
      }
    }
    // Causal mask, online softmax (per row: max over the quad, rescale, exponentiate, sum).
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < NT_S; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kt * kBK + j * 8 + tig * 2 + (e & 1);
        if (key > qp[e >> 1]) s[j][e] = -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
      }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      alpha[r] = exp2f(m[r] - mx[r]);  // m = -inf on the first tile: alpha 0, and l, o are 0
      m[r] = mx[r];
    }
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NT_S; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - m[e >> 1]);
        rs[e >> 1] += s[j][e];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 1);
      rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 2);
      l[r] = l[r] * alpha[r] + rs[r];
    }
#pragma unroll
    for (int j = 0; j < NT_O; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
    // O += P V: 16-key steps; P's fragments of key tiles 2kk and 2kk+1 form the A operand.
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t ph[4], pl[4];
      split2(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
      split2(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
      split2(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
      split2(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
#pragma unroll
      for (int jp = 0; jp < NT_O / 2; ++jp) {  // 16 output dims per ldmatrix.x4
        uint32_t b[4];
        const int mi = lane >> 3, r = lane & 7;
        ldmatrix_x4_trans(b, vs + (kk * 16 + (mi & 1) * 8 + r) * R + jp * 16 + (mi >> 1) * 8);
        mma16816(o[2 * jp], pl, b[0], b[1]);
        mma16816(o[2 * jp], ph, b[0], b[1]);
        mma16816(o[2 * jp + 1], pl, b[2], b[3]);
        mma16816(o[2 * jp + 1], ph, b[2], b[3]);
      }
    }
  }

  // out = O / l for the rows of real queries.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = q0 + row0 + 8 * r;
    if (t >= T) continue;
    const float inv = 1.f / l[r];
    float* orow = out + size_t(t) * ld + size_t(h) * HD;
#pragma unroll
    for (int j = 0; j < NT_O; ++j)
      *reinterpret_cast<float2*>(orow + j * 8 + tig * 2) = make_float2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
  }
}

template <int HD>
void launch(const PrefillAttnArgs& a, cudaStream_t s) {
  static bool attr = false;
  if (!attr) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_tc_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem<HD>::kBytes));
    attr = true;
  }
  const dim3 grid(unsigned((a.T + kBQ - 1) / kBQ), unsigned(a.n_head));
  const float qscale = 1.4426950408889634f / std::sqrt(float(HD));  // log2(e) / sqrt(HD)
  attn_tc_kernel<HD><<<grid, kThreads, Smem<HD>::kBytes, s>>>(
      a.q, reinterpret_cast<const __half*>(a.k_cache), reinterpret_cast<const __half*>(a.v_cache), a.out, a.T,
      a.n_head, a.n_head / a.n_kv_head, int(a.n_ctx), a.pos0, qscale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace fa

void attention_prefill_tc(const PrefillAttnArgs& a, cudaStream_t s) {
  check_prefill_attn_args(a, "attention_prefill_tc");
  switch (a.head_dim) {
    case 32: fa::launch<32>(a, s); break;
    case 64: fa::launch<64>(a, s); break;
    case 128: fa::launch<128>(a, s); break;
    default: LMF_FAIL("cuda attention_prefill_tc: head_dim must be 32, 64 or 128, got ", a.head_dim);
  }
}

}  // namespace lmf::cuda

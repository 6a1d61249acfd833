#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl_launch.cuh"
#include "backend/cuda/qkv_post.h"

namespace lmf::cuda {
namespace {

// grid: (n_head (q) + n_kv (k) + n_kv (v), T); block: head_dim threads, one element each.
// Before the PDL wait it does what depends only on weights, the thread and the position (the
// host's, written before the graph launch): its gamma element and the RoPE sine and cosine, so
// the wait is followed by one L2 round trip (raw) and the norm. kTable: the sine and cosine are
// read from a.rope_cs instead of computed: powf + sincosf before the wait kept the last block of
// the 4B/8B kernel from reaching its wait until ~2.4-2.8 µs after the QKV GEMV's end (its blocks
// start only in that GEMV's last ~0.3 µs; docs/PERF.md S33-3), and the instance without them
// carries none of their code.
template <bool kTable>
__global__ void qkv_post_kernel(const __grid_constant__ QkvPostArgs a) {
  dev::tl_start(a.tl);
  if (a.pdl) dev::pdl_trigger_early(a.early);  // before the position's load
  const int b = blockIdx.x, d = threadIdx.x, hd = a.head_dim;
  const int nq = a.n_head, nk = a.n_kv_head;
  const bool is_q = b < nq, is_v = b >= nq + nk;
  const int half = hd / 2;
  int i, partner;  // pair index, the other element of the pair
  bool first;
  if (a.rope == RopeStyle::NeoX) {
    i = d < half ? d : d - half;
    first = d < half;
    partner = first ? d + half : d - half;
  } else {
    i = d / 2;
    first = (d & 1) == 0;
    partner = first ? d + 1 : d - 1;
  }
  const float* gamma = is_q ? a.q_norm : a.k_norm;
  const int t = blockIdx.y, pos = a.row_pos ? a.row_pos[t] : *a.pos + t;
  const size_t slot = a.row_slot ? size_t(a.row_slot[t]) : size_t(pos);
  float g = 0.f, c = 0.f, s = 0.f;
  if (!is_v) {
    if (gamma) g = gamma[d];
    if constexpr (kTable) {
      dev::rope_cs_table(a.rope_cs, pos, i, hd, &c, &s);
    } else {
      dev::rope_cs(pos, i, hd, a.theta, a.rope_ff, &c, &s);
    }
  }
  if (a.pdl) dev::pdl_wait_trigger_late(a.early);  // uniform; raw comes from the previous kernel
  dev::tl_waited_phase(a.tl);
  __shared__ float sh[32];
  __shared__ __align__(16) float vals[128];
  const float* raw = a.raw + size_t(t) * (nq + 2 * nk) * hd;
  float* q_out = a.q_out + size_t(t) * nq * hd;
  float x = raw[size_t(b) * hd + d];
  if (is_v) {  // v head: straight to the cache
    const int h = b - nq - nk;
    reinterpret_cast<__half*>(a.v_cache)[(size_t(h) * a.n_ctx + slot) * hd + d] = __float2half_rn(x);
    dev::tl_end(a.tl);
    return;
  }
  if (gamma) {  // per-head RMSNorm (uniform branch for the block), rmsnorm_rows' arithmetic
    vals[d] = x;
    __syncthreads();
    const float ss = dev::head_sumsq_block(reinterpret_cast<const float4*>(vals), hd, sh);  // reads end at its barrier
    x = dev::head_norm(x, ss, hd, a.eps, g);
  }
  vals[d] = x;
  __syncthreads();
  const float y = dev::rope_rotate(x, vals[partner], c, s, first);
  if (is_q) {
    q_out[size_t(b) * hd + d] = y;
  } else {
    const int h = b - nq;
    reinterpret_cast<__half*>(a.k_cache)[(size_t(h) * a.n_ctx + slot) * hd + d] = __float2half_rn(y);
  }
  dev::tl_end(a.tl);
}

// Entry k = pos * half + i of the RoPE table: rope_cs(pos, i), as the kernel above computes it.
__global__ void rope_table_kernel(float2* t, int64_t n, int half, int hd, float theta, const float* ff) {
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  float c, s;
  dev::rope_cs(int(k / half), int(k % half), hd, theta, ff, &c, &s);
  t[k] = make_float2(c, s);
}

}  // namespace

void qkv_post(const QkvPostArgs& a, cudaStream_t s) {
  if (a.head_dim != 32 && a.head_dim != 64 && a.head_dim != 128)
    LMF_FAIL("cuda qkv_post: head_dim must be 32, 64 or 128, got ", a.head_dim);
  if (!a.raw || (!a.pos && !a.row_pos) || (a.row_pos && !a.row_slot) || !a.q_out || !a.k_cache || !a.v_cache || a.n_ctx <= 0)
    LMF_FAIL("cuda qkv_post: missing pointer");
  if (a.T < 1) LMF_FAIL("cuda qkv_post: T must be >= 1, got ", a.T);
  const dim3 grid(unsigned(a.n_head + 2 * a.n_kv_head), unsigned(a.T));
  auto* kernel = a.rope_cs ? &qkv_post_kernel<true> : &qkv_post_kernel<false>;
  if (a.pdl) {
    QkvPostArgs k = a;
    k.early = (dev::pdl_early_trigger() & kEarlyQkvPost) != 0;
    dev::launch_pdl(kernel, grid, dim3(unsigned(a.head_dim)), 0, s, k);
  } else {
    kernel<<<grid, a.head_dim, 0, s>>>(a);
    CUDA_CHECK_LAUNCH();
  }
}

float2* rope_table_alloc(int64_t n_pos, int head_dim, float theta, const float* ff, cudaStream_t s) {
  if (n_pos < 1 || head_dim < 2 || head_dim % 2 != 0) LMF_FAIL("cuda rope table: bad shape ", n_pos, " x ", head_dim);
  const int half = head_dim / 2;
  const int64_t n = n_pos * half;
  float2* t = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&t), size_t(rope_table_bytes(n_pos, head_dim))));
  rope_table_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(t, n, half, head_dim, theta, ff);
  CUDA_CHECK_LAUNCH();
  return t;
}

}  // namespace lmf::cuda

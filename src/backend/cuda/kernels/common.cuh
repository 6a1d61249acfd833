// Small device helpers shared by the kernel families.
#pragma once
#include <cuda_fp16.h>
#include <cstdint>

#include "backend/cuda/timeline_fields.h"

namespace lmf::cuda::dev {

// Weights are read once per token: no L1 allocation and an evict-first L2 policy keep them from
// pushing out the activations and KV cache that are reused. .nc: read-only during the kernel.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ uint4 ld_stream16(const void* p, uint64_t pol) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ uint2 ld_stream8(const void* p, uint64_t pol) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream4(const void* p, uint64_t pol) {
  uint32_t v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ uint16_t ld_stream2(const void* p, uint64_t pol) {
  uint16_t v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(pol));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (all threads must call; blockDim.x a multiple of 32, <= 1024).
__device__ __forceinline__ float block_sum(float v, float* sh /* [32] */) {
  v = warp_sum(v);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();  // sh may be in use by a previous call
  if (l == 0) sh[w] = v;
  __syncthreads();
  const int nw = blockDim.x >> 5;
  v = l < nw ? sh[l] : 0.f;
  return warp_sum(v);
}

// RMSNorm arithmetic shared by rmsnorm_rows and the GEMV Norm/AddNorm prologue, so the fused and
// unfused paths produce bit-identical normalized vectors (and so identical int8 codes): both run
// kNormThreads threads, thread t sums float4 t, t+kNormThreads, ... in this order with explicit
// fmaf (no contraction choices left to the compiler), then block_sum; the scale is (x*r)*gamma.
constexpr int kNormThreads = 256;
__device__ __forceinline__ float sumsq4(const float4& v, float ss) {
  ss = fmaf(v.x, v.x, ss);
  ss = fmaf(v.y, v.y, ss);
  ss = fmaf(v.z, v.z, ss);
  return fmaf(v.w, v.w, ss);
}
__device__ __forceinline__ float rms_scale(float block_ss, int n, float eps) {
  return rsqrtf(__fadd_rn(__fdiv_rn(block_ss, float(n)), eps));
}
__device__ __forceinline__ float4 norm_apply4(const float4& v, float r, const float4& g) {
  return make_float4(__fmul_rn(__fmul_rn(v.x, r), g.x), __fmul_rn(__fmul_rn(v.y, r), g.y),
                     __fmul_rn(__fmul_rn(v.z, r), g.z), __fmul_rn(__fmul_rn(v.w, r), g.w));
}

// Per-head q/k RMSNorm and RoPE arithmetic shared by every path that computes them: the unfused
// HeadNorm (rmsnorm_rows with n = head_dim) and Rope kernels, the QKV epilogue kernel
// (qkv_post.cu), the decode attention kernel that runs that epilogue itself (attention.cuh, POST)
// and the epilogue inside the QKV GEMV (gemv.cuh). Explicit roundings and one summation order, so
// fused and unfused graphs give bit-identical q and cached k (a flipped bit here moves an int8
// activation code downstream: docs/PERF.md, session 6).
// Sum of squares of one head (hd <= 128) in rmsnorm_rows' order for n = hd: float4 l is lane l's
// sumsq4, then the warp tree (block_sum's second tree only adds zeros). Every lane gets it.
// kL2Only: the head was written by other blocks of the running launch (read around L1).
template <bool kL2Only = false>
__device__ __forceinline__ float head_sumsq_warp(const float4* h4, int hd, int lane) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (lane < (hd >> 2)) v = kL2Only ? __ldcg(h4 + lane) : h4[lane];
  return warp_sum(sumsq4(v, 0.f));
}
// The same for a block of hd threads (block_sum's order; sh as for block_sum).
__device__ __forceinline__ float head_sumsq_block(const float4* h4, int hd, float* sh) {
  const int t = int(threadIdx.x);
  return block_sum(t < (hd >> 2) ? sumsq4(h4[t], 0.f) : 0.f, sh);
}
__device__ __forceinline__ float head_norm(float x, float ss, int hd, float eps, float gamma) {
  return __fmul_rn(__fmul_rn(x, rms_scale(ss, hd, eps)), gamma);  // rmsnorm_rows' norm_apply4
}
// The rotated value of element x whose pair partner is y: first = x is the pair's first element.
__device__ __forceinline__ float rope_rotate(float x, float y, float c, float s, bool first) {
  return first ? __fsub_rn(__fmul_rn(x, c), __fmul_rn(y, s)) : __fadd_rn(__fmul_rn(x, c), __fmul_rn(y, s));
}

__device__ __forceinline__ float silu(float g) { return g / (1.f + __expf(-g)); }

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t bits) { return __uint_as_float(bits << 16); }

// RoPE angle for pair index i of a head of size d: pos * theta^(-2i/d) / ff[i], computed in fp32
// as the Hugging Face reference does (inv_freq in fp32, then the product), then an accurate
// sincos. ff: the model's per-frequency divisors (GGUF rope_freqs, Llama 3.1+ scaling; DEVICE,
// [d/2]) or null; the CPU backend's cpu::rope divides the same way. Split in two so a kernel can
// compute the frequency (weights only) before its PDL wait.
__device__ __forceinline__ float rope_inv_freq(int i, int d, float theta, const float* ff) {
  const float f = 1.0f / powf(theta, float(2 * i) / float(d));
  return ff ? __fdiv_rn(f, __ldg(ff + i)) : f;
}
__device__ __forceinline__ void rope_cs_freq(int pos, float inv_freq, float* c, float* s) {
  const float ang = float(pos) * inv_freq;
  sincosf(ang, s, c);
}
__device__ __forceinline__ void rope_cs(int pos, int i, int d, float theta, const float* ff, float* c, float* s) {
  rope_cs_freq(pos, rope_inv_freq(i, d, theta, ff), c, s);
}
// The same (cos, sin) from the RoPE table (rope_table_alloc: entry pos * d / 2 + i holds
// rope_cs(pos, i, d)), a constant read through the read-only path.
__device__ __forceinline__ void rope_cs_table(const float2* t, int pos, int i, int d, float* c, float* s) {
  const float2 cs = __ldg(t + size_t(pos) * size_t(d / 2) + size_t(i));
  *c = cs.x;
  *s = cs.y;
}

// Launch timeline (measurement only: `lmfuse bench --profile`, cuda_bench_gemv's decode chain): a
// kernel given a slot of kTlWords u64 records (timeline.h: kTlWays ways of kTlFields fields, a
// block stamping way block % kTlWays) keeps, in %globaltimer nanoseconds, the earliest block
// start [0], the earliest return from the PDL wait [1], the latest warp exit [2] and the latest
// end of a block's first phase after the wait [3] (GEMV: x staged; others: the wait itself).
// Null slot = off (one uniform branch). The slot is re-read from the kernel parameters at each
// stamp, so it holds no register.
// Words [4], [5]: the latest time any block passed the kernel's marks 0 and 1 (tl_mark); [6] the
// latest block start; [7] the sum over blocks of (own first-phase end - own wait return) and [8]
// the number of blocks in it (a mean per block, where [3] is only the slowest); [9] the earliest
// time a block passed mark 0 (with [4]: how spread the blocks' finishing of that phase is).
constexpr int kTlWords = kTimelineWords;
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned long long* tl_way(unsigned long long* slot) {
  return slot + kTlWayWords * ((blockIdx.x + gridDim.x * blockIdx.y) % kTlWays);
}
__device__ __forceinline__ void tl_start(unsigned long long* slot) {
  if (slot && threadIdx.x == 0) {
    const unsigned long long t = global_ns();
    unsigned long long* w = tl_way(slot);
    atomicMin(w, t);
    atomicMax(w + 6, t);
  }
}
// The reductions of each stamp, given its time t (thread 0 with a slot only). The stamps below
// read the clock and reduce at once; GEMV marks set 5 keeps the times and reduces at its end.
__device__ __forceinline__ void tl_waited_at(unsigned long long* slot, unsigned long long t) {
  atomicMin(tl_way(slot) + 1, t);
}
__device__ __forceinline__ void tl_phase_at(unsigned long long* slot, unsigned long long t_wait,
                                            unsigned long long t) {
  unsigned long long* w = tl_way(slot);
  atomicMax(w + 3, t);
  atomicAdd(w + 7, t - t_wait);
  atomicAdd(w + 8, 1ull);
}
__device__ __forceinline__ void tl_mark_at(unsigned long long* slot, int k, unsigned long long t) {
  unsigned long long* w = tl_way(slot);
  atomicMax(w + 4 + k, t);
  if (k == 0) atomicMin(w + 9, t);
}
// Returns the time of the wait's return to thread 0 (0 elsewhere or without a slot), for tl_phase.
__device__ __forceinline__ unsigned long long tl_waited(unsigned long long* slot) {
  if (!slot || threadIdx.x != 0) return 0;
  const unsigned long long t = global_ns();
  tl_waited_at(slot, t);
  return t;
}
// t_wait: where thread 0 keeps tl_waited's value (read only with a slot, by thread 0).
__device__ __forceinline__ void tl_phase(unsigned long long* slot, const unsigned long long* t_wait) {
  if (slot && threadIdx.x == 0) {
    const unsigned long long t = global_ns();  // the clock first, then t_wait's load
    tl_phase_at(slot, *t_wait, t);
  }
}
// For kernels whose first phase is the wait itself (attention, the QKV epilogue kernel).
__device__ __forceinline__ void tl_waited_phase(unsigned long long* slot) {
  const unsigned long long tw = tl_waited(slot);
  tl_phase(slot, &tw);
}
__device__ __forceinline__ void tl_mark(unsigned long long* slot, int k) {
  if (slot && threadIdx.x == 0) tl_mark_at(slot, k, global_ns());
}
// tl_mark once dep has arrived: thread 0 stores dep to a volatile shared word first, and a warp
// issues in order, so the clock is read only after the value (a load in flight, a reduction) exists.
__device__ __forceinline__ void tl_mark_after(unsigned long long* slot, int k, float dep) {
  __shared__ volatile float tl_sink;
  if (slot && threadIdx.x == 0) {
    tl_sink = dep;
    tl_mark(slot, k);
  }
}
// Deferred stamps (GEMV marks set 5): thread 0 reads the clock where a stamp belongs (after dep
// exists, as tl_mark_after) and keeps the time; the *_at reductions above are issued at the end
// of the kernel, so none of them is in flight between the stamps. Returns 0 in other threads or
// without a slot.
__device__ __forceinline__ unsigned long long tl_clock_after(const unsigned long long* slot, float dep) {
  __shared__ volatile float tl_sink5;
  if (!slot || threadIdx.x != 0) return 0;
  tl_sink5 = dep;
  return global_ns();
}
__device__ __forceinline__ void tl_end(unsigned long long* slot) {
  if (slot && (threadIdx.x & 31) == 0) atomicMax(tl_way(slot) + 2, global_ns());
}

// Ampere-style asynchronous copies global -> shared (16 bytes, through L2 only; valid false:
// the 16 bytes are zero-filled), committed in groups and waited for per thread (then a barrier
// makes every thread's copies visible to the block; the barrier is also what orders the
// compiler's shared-memory reads after the wait).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid = true) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
// 8 bytes (through L1: the 16-byte-only .cg form does not take 8).
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>  // every group but the newest N complete (for this thread's copies)
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// Brings the 128-byte line holding p into this SM's L1 (no register, no wait): for data that
// does not depend on the previous kernel, issued before pdl_wait so later loads hit L1.
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

}  // namespace lmf::cuda::dev

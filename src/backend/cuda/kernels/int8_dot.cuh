// Byte dot products of quantized weight blocks with int8 activations (act_quant.cuh's codes) or
// 16-bit ones as two byte planes, exact in int32: the inner loops of the integer-dot decode GEMV
// (gemv.cuh) and of the o_proj slice in the direct attention (attention_staged.cuh, OPROJ).
#pragma once
#include <cstdint>

namespace lmf::cuda::dev {

// Four byte products of w and x summed into c (IDP4A), exact in int32: the x bytes signed (int8
// codes, the high bytes of 16-bit ones) or unsigned (the low bytes of 16-bit codes); the weight
// bytes unsigned (Q4 nibbles) or signed (Q8_0).
template <bool kSignedW, bool kSignedX>
__device__ __forceinline__ int dp4a_wx(uint32_t w, uint32_t x, int c) {
  int d;
  if constexpr (kSignedW && kSignedX) asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(w), "r"(x), "r"(c));
  else if constexpr (kSignedW) asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(w), "r"(x), "r"(c));
  else if constexpr (kSignedX) asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(w), "r"(x), "r"(c));
  else asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(w), "r"(x), "r"(c));
  return d;
}

// init + sum_e q_e * xq_e over one Q4 block (16 bytes of nibbles), exact in int32. The high
// nibbles are used in place (masked, not shifted: bytes 16*q in [0, 240], unsigned dp4a), so
// their sum is 16x and one shift at the end replaces a shift per word.
template <bool kSignedX>
__device__ __forceinline__ int dot_q4_x8(const uint4& q, const uint4& xl, const uint4& xh, int init) {
  int lo = init, hi = 0;
  lo = dp4a_wx<false, kSignedX>(q.x & 0x0F0F0F0Fu, xl.x, lo);
  hi = dp4a_wx<false, kSignedX>(q.x & 0xF0F0F0F0u, xh.x, hi);
  lo = dp4a_wx<false, kSignedX>(q.y & 0x0F0F0F0Fu, xl.y, lo);
  hi = dp4a_wx<false, kSignedX>(q.y & 0xF0F0F0F0u, xh.y, hi);
  lo = dp4a_wx<false, kSignedX>(q.z & 0x0F0F0F0Fu, xl.z, lo);
  hi = dp4a_wx<false, kSignedX>(q.z & 0xF0F0F0F0u, xh.z, hi);
  lo = dp4a_wx<false, kSignedX>(q.w & 0x0F0F0F0Fu, xl.w, lo);
  hi = dp4a_wx<false, kSignedX>(q.w & 0xF0F0F0F0u, xh.w, hi);
  return lo + (hi >> 4);  // hi is a multiple of 16: the shift is exact for negatives too
}
__device__ __forceinline__ int dot_q4_i8(const uint4& q, const uint4& xl, const uint4& xh, int init) {
  return dot_q4_x8<true>(q, xl, xh, init);
}

// sum_e q_e * xq_e over one Q8_0 block (2 x 16 bytes), exact in int32.
template <bool kSignedX>
__device__ __forceinline__ int dot_q8_x8(const uint4 (&q)[2], const uint4& xl, const uint4& xh) {
  int s = 0;
  s = dp4a_wx<true, kSignedX>(q[0].x, xl.x, s);
  s = dp4a_wx<true, kSignedX>(q[0].y, xl.y, s);
  s = dp4a_wx<true, kSignedX>(q[0].z, xl.z, s);
  s = dp4a_wx<true, kSignedX>(q[0].w, xl.w, s);
  s = dp4a_wx<true, kSignedX>(q[1].x, xh.x, s);
  s = dp4a_wx<true, kSignedX>(q[1].y, xh.y, s);
  s = dp4a_wx<true, kSignedX>(q[1].z, xh.z, s);
  s = dp4a_wx<true, kSignedX>(q[1].w, xh.w, s);
  return s;
}
__device__ __forceinline__ int dot_q8_i8(const uint4 (&q)[2], const uint4& xl, const uint4& xh) {
  return dot_q8_x8<true>(q, xl, xh);
}

// 16-bit activation codes (knob cuda_act16; the CPU backend's ActBlock16 rule: q = rne(x *
// 32767/amax)) as two byte planes, q = 256 * hi + lo with hi the signed high byte and lo the
// unsigned low byte: the exact int32 dot is 256 * dot(w, hi) + dot(w, lo), two dp4a per weight
// word where the 8-bit codes take one. x[0], x[1]: the low bytes of elements 0-15 / 16-31; x[2],
// x[3]: their high bytes. No overflow: |256 * sum w*hi| <= 256 * 32 * 128 * 128 = 2^27.
__device__ __forceinline__ int dot_q4_i16(const uint4& q, const uint4 (&x)[4], int init) {
  return 256 * dot_q4_x8<true>(q, x[2], x[3], 0) + dot_q4_x8<false>(q, x[0], x[1], init);
}
__device__ __forceinline__ int dot_q8_i16(const uint4 (&q)[2], const uint4 (&x)[4]) {
  return 256 * dot_q8_x8<true>(q, x[2], x[3]) + dot_q8_x8<false>(q, x[0], x[1]);
}

// K-quant blocks (kernels.h's packed form): the nibble word w of a block holds elements 4w..4w+3
// (low nibbles) and 16+4w..16+4w+3 (high); the high code bits come from the block's high-bit
// word(s), shifted into bits 4-5 of the same bytes. Codes are unsigned bytes (Q5_K 0..31, Q6_K
// 0..63), so the x bytes may be signed or unsigned as for the Q4 dot.
// Q5_K: init + sum_e q_e * xq_e over the block (one sub-block: one scale).
template <bool kSignedX>
__device__ __forceinline__ int dot_q5_x8(const uint4& q, uint32_t h, const uint4& xl, const uint4& xh, int init) {
  const uint32_t wd[4] = {q.x, q.y, q.z, q.w}, xa[4] = {xl.x, xl.y, xl.z, xl.w}, xb[4] = {xh.x, xh.y, xh.z, xh.w};
  int s = init;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const uint32_t a = (wd[w] & 0x0F0F0F0Fu) | (((h >> w) & 0x01010101u) << 4);
    const uint32_t b = ((wd[w] >> 4) & 0x0F0F0F0Fu) | (((h >> (4 + w)) & 0x01010101u) << 4);
    s = dp4a_wx<false, kSignedX>(a, xa[w], s);
    s = dp4a_wx<false, kSignedX>(b, xb[w], s);
  }
  return s;
}
__device__ __forceinline__ int dot_q5_i16(const uint4& q, uint32_t h, const uint4 (&x)[4], int init) {
  return 256 * dot_q5_x8<true>(q, h, x[2], x[3], 0) + dot_q5_x8<false>(q, h, x[0], x[1], init);
}
// Q6_K: {sum over elements 0-15, sum over 16-31} of q_e * xq_e, q_e the unsigned code (q + 32):
// the two sub-blocks of 16 have their own scales.
template <bool kSignedX>
__device__ __forceinline__ int2 dot_q6_x8(const uint4& q, const uint2& h, const uint4& xl, const uint4& xh) {
  const uint32_t wd[4] = {q.x, q.y, q.z, q.w}, xa[4] = {xl.x, xl.y, xl.z, xl.w}, xb[4] = {xh.x, xh.y, xh.z, xh.w};
  int lo = 0, hi = 0;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const uint32_t a = (wd[w] & 0x0F0F0F0Fu) | (((h.x >> (2 * w)) & 0x03030303u) << 4);
    const uint32_t b = ((wd[w] >> 4) & 0x0F0F0F0Fu) | (((h.y >> (2 * w)) & 0x03030303u) << 4);
    lo = dp4a_wx<false, kSignedX>(a, xa[w], lo);
    hi = dp4a_wx<false, kSignedX>(b, xb[w], hi);
  }
  return make_int2(lo, hi);
}
__device__ __forceinline__ int2 dot_q6_i16(const uint4& q, const uint2& h, const uint4 (&x)[4]) {
  const int2 a = dot_q6_x8<true>(q, h, x[2], x[3]), b = dot_q6_x8<false>(q, h, x[0], x[1]);
  return make_int2(256 * a.x + b.x, 256 * a.y + b.y);
}
// Sum of 16 activation codes (one x plane word group): for Q6_K's -32 offset per sub-block.
template <bool kSignedX>
__device__ __forceinline__ int sum_x16(const uint4& x) {
  int s = dp4a_wx<false, kSignedX>(0x01010101u, x.x, 0);
  s = dp4a_wx<false, kSignedX>(0x01010101u, x.y, s);
  s = dp4a_wx<false, kSignedX>(0x01010101u, x.z, s);
  return dp4a_wx<false, kSignedX>(0x01010101u, x.w, s);
}

}  // namespace lmf::cuda::dev

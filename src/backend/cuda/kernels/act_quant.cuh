// int8 quantization of activations in 32-blocks, written in the layout the integer-dot GEMVs
// stage x in (gemv.cuh header comment: uint4 planes lo[nblk], hi[nblk], then int2 {dx, sum q}
// [nblk]), for producers that quantize their output once for the next GEMV (Prologue::Int8):
// the gate/up GEMV (Epilogue::SiluMulQ) and the attention merge (AttnArgs::xq). The rule is the
// CPU backend's (act_quant.h): amax = max |x|, id = 127/amax, q = rne(x*id), dx = amax/127; the
// same float ops as gemv_stage_x, so a consumer gets the codes it would have made itself.
#pragma once
#include <cstdint>

#include "util/round_fadd.h"

namespace lmf::cuda::dev {

// (gemv_stage_x keeps its own copy of these lines, its stage4 lambda: through this helper its
// register allocation changed and two of its instances spilled 8-16 bytes more; inline it is
// session 9's SASS. Re-checked in session 27 with cuobjdump: through the helper 26 of the 28 Q4_0
// GEMV instances compile to different SASS.)
// One 32-block of x quantized by the 8 consecutive lanes that hold it (the lane's float4 is
// elements 4f..4f+3 of the block, f = lane & 7; all 32 lanes call it, the shuffles stay inside
// each group of 8): the word of the lane's 4 codes (byte k = code of element 4f+k), the block's
// amax and its sum of codes. The CPU backend's rule (act_quant.h): id = 127/amax, q = rne(x*id).
struct QuantWord {
  uint32_t b0, b1, b2, b3;  // code k in the low byte of bk (round_fadd_bits)
  float am;
  int sq;
};
__device__ __forceinline__ QuantWord quant_x4(float4 v) {
  float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
  am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
  am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 4));
  const float id = am > 0.f ? 127.f / am : 0.f;
  // q = rn(v * id), |v * id| <= 127, by one FADD each (util/round_fadd.h) instead of F2I
  // (quarter rate; 4 per slice in this instruction-bound staging: docs/PERF.md session 9,
  // +1.2 % on the 8B chain). The word's low byte is q's byte, and the block sum takes the
  // bias off once per value. The same codes as F2I for finite inputs (a NaN in v gives a
  // different meaningless code than F2I's 0). v * id is rounded before the add (no FMA).
  const uint32_t b0 = round_fadd_bits(__fmul_rn(v.x, id)), b1 = round_fadd_bits(__fmul_rn(v.y, id)),
                 b2 = round_fadd_bits(__fmul_rn(v.z, id)), b3 = round_fadd_bits(__fmul_rn(v.w, id));
  int sq = int(((b0 + b1) + (b2 + b3)) - 4u * kRoundFaddBias);
  sq += __shfl_xor_sync(0xffffffffu, sq, 1);
  sq += __shfl_xor_sync(0xffffffffu, sq, 2);
  sq += __shfl_xor_sync(0xffffffffu, sq, 4);
  return {b0, b1, b2, b3, am, sq};
}

// The staged int8 word of 4 codes from their round_fadd_bits words (low byte = the code's byte).
__device__ __forceinline__ uint32_t code_word(uint32_t b0, uint32_t b1, uint32_t b2, uint32_t b3) {
  return (b0 & 0xffu) | ((b1 & 0xffu) << 8) | ((b2 & 0xffu) << 16) | (b3 << 24);
}

// Stores float4 f of block c of a quantized x (quant_x4's result) in the staging layout: uint4
// planes lo[nblk], hi[nblk], then int2 {dx, sum q}[nblk] (xs: the layout's start).
__device__ __forceinline__ void store_quant_word(float4* xs, int nblk, int c, int f, const QuantWord& w) {
  uint32_t* xw = reinterpret_cast<uint32_t*>(xs);
  xw[(size_t(f >> 2) * nblk + c) * 4 + (f & 3)] = code_word(w.b0, w.b1, w.b2, w.b3);
  if (f == 0) reinterpret_cast<int2*>(xs + 2 * size_t(nblk))[c] = make_int2(__float_as_int(w.am / 127.f), w.sq);
}


// One 32-block held by a whole warp, lane e holding element e (the merge kernel's layout):
// block c of the vector at xs. amax and the code sum are exact in any order, so the codes,
// dx and sum are those of quant_x4 over the same 32 floats.
__device__ __forceinline__ void quant_warp_store(float v, float4* xs, int nblk, int c, int lane) {
  float am = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
  const float id = am > 0.f ? 127.f / am : 0.f;
  const uint32_t b = round_fadd_bits(__fmul_rn(v, id));
  int sq = int(b - kRoundFaddBias);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
  const uint32_t b1 = __shfl_down_sync(0xffffffffu, b, 1), b2 = __shfl_down_sync(0xffffffffu, b, 2),
                 b3 = __shfl_down_sync(0xffffffffu, b, 3);
  if ((lane & 3) == 0) {
    const QuantWord w{b, b1, b2, b3, am, sq};
    store_quant_word(xs, nblk, c, lane >> 2, w);
  }
}

}  // namespace lmf::cuda::dev

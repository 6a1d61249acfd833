// AVX-512 matmul kernels (needs F/BW/VL/DQ + VNNI; only called after cpuid confirmed them):
// the kernels of matmul_x86.inc with vpdpbusd for the integer dots (AVX512-VL encodes it for
// ymm registers, and EVEX gives 32 of them). Decode stays 256-bit: a 512-bit variant (two
// blocks per register) measured slower, 16.5 vs 21.9 GB/s on cached q4_0 2048x1024. Prefill
// (T >= 8) uses zmm, 16 rows per register: on this Zen 4 a zmm vpdpbusd issues once per cycle
// and a ymm one twice (same MACs per cycle), but the zmm tile halves the broadcasts, the
// scale multiply-adds and the loop overhead per MAC. 16-bit activations (matmul_x86_act16.inc)
// use vpdpwssd the same ways.

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*() and then warn about it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LMF_X86_VNNI 1
#include "backend/cpu/matmul_x86.inc"
#include "backend/cpu/matmul_x86_act16.inc"
#include "backend/cpu/matmul_x86_x16.inc"

namespace lmf::cpu {

const MatmulKernels& matmul_kernels_avx512() {
  static const MatmulKernels k{quant_x86, flt_x86, quant_act_x86, quant16_x86, quant_act16_x86, quant_x16_avx512, quant16_x16_avx512};
  return k;
}

}  // namespace lmf::cpu

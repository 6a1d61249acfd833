// AVX-512 matmul kernels (needs F/BW/VL/DQ + VNNI; only called after cpuid confirmed them):
// the 256-bit kernels of matmul_x86.inc with vpdpbusd for the integer dots (AVX512-VL encodes
// it for ymm registers, and EVEX gives 32 of them). On Zen 4, 512-bit ops are split in two
// 256-bit halves, and a 512-bit variant (two blocks per register) measured slower for decode:
// 16.5 vs 21.9 GB/s on cached q4_0 2048x1024.

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*() and then warn about it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LMF_X86_VNNI 1
#include "backend/cpu/matmul_x86.inc"

namespace lmf::cpu {

const MatmulKernels& matmul_kernels_avx512() {
  static const MatmulKernels k{quant_x86, flt_x86, quant_act_x86};
  return k;
}

}  // namespace lmf::cpu

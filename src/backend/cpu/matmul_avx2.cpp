// AVX2 + FMA + F16C matmul kernels (maddubs/madd integer dots; vpmaddwd for 16-bit
// activations). Built with -mavx2 -mfma -mf16c; only called after cpuid confirmed support
// (cpu_features.h).
#include <cstring>

#include "backend/cpu/matmul_x86.inc"
#include "backend/cpu/matmul_x86_act16.inc"

namespace lmf::cpu {

const MatmulKernels& matmul_kernels_avx2() {
  static const MatmulKernels k{quant_x86, flt_x86, quant_act_x86, quant16_x86, quant_act16_x86};
  return k;
}

}  // namespace lmf::cpu

// Which x86 vector ISA the CPU kernels use. Detected once with cpuid (and the OS's XSAVE
// support); LMFUSE_CPU_ISA=scalar|avx2|avx512 forces a lower level, for tests and A/B runs.
#pragma once

namespace lmf::cpu {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

bool has_avx2();    // AVX2 + FMA + F16C, enabled by the OS
bool has_avx512();  // AVX-512 F/BW/VL/DQ + VNNI, enabled by the OS (what the avx512 kernels need)
bool has_vnni();    // AVX-512 VNNI
Isa best_isa();     // highest level the CPU supports
Isa active_isa();   // best_isa(), lowered by LMFUSE_CPU_ISA (read once); asking higher is an error
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512"

}  // namespace lmf::cpu

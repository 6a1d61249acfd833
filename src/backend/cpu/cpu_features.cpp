#include <cstdint>
#include "backend/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <string_view>

#include "util/status.h"

namespace lmf::cpu {

namespace {

struct Features {
  bool avx2 = false, avx512 = false, vnni = false;
};

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

Features detect() {
  Features f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;     // SSE + AVX state saved on context switch
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;   // + opmask and ZMM state
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5);
  const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
             avx512vl = b & (1u << 31), vnni = c & (1u << 11);
  f.avx2 = os_ymm && avx2 && fma && f16c;
  f.vnni = f.avx2 && os_zmm && avx512f && vnni;
  f.avx512 = f.vnni && avx512dq && avx512bw && avx512vl;
  return f;
}

const Features& features() {
  static const Features f = detect();
  return f;
}

Isa from_env() {
  const Isa best = best_isa();
  const char* e = std::getenv("LMFUSE_CPU_ISA");
  if (!e || !*e) return best;
  const std::string_view v(e);
  Isa want;
  if (v == "scalar") want = Isa::Scalar;
  else if (v == "avx2") want = Isa::Avx2;
  else if (v == "avx512") want = Isa::Avx512;
  else LMF_FAIL("LMFUSE_CPU_ISA: expected scalar, avx2 or avx512, got '", v, "'");
  if (int(want) > int(best))
    LMF_FAIL("LMFUSE_CPU_ISA=", v, ": this CPU supports at most ", isa_name(best));
  return want;
}

}  // namespace

bool has_avx2() { return features().avx2; }
bool has_avx512() { return features().avx512; }
bool has_vnni() { return features().vnni; }
Isa best_isa() { return has_avx512() ? Isa::Avx512 : has_avx2() ? Isa::Avx2 : Isa::Scalar; }
bool isa_supported(Isa isa) { return int(isa) <= int(best_isa()); }

Isa active_isa() {
  static const Isa isa = from_env();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace lmf::cpu

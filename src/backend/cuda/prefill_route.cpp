// The fitted prefill dequantization rule: which route (prefill.h) a projection takes, from its
// weight's shape and the number of tokens T. Since session 4 the backend's default is to time the
// routes per shape on the GPU (PrefillTuner, prefill_tune.h), which the re-measured sweep puts
// within 3 % of the better forced route at all 420 points where this rule misses at 18 (worst
// 30.5 %, docs/PERF.md); this rule is the reproducible alternative (LMFUSE_PREFILL_ROUTE_TUNE=0)
// and the tuner-free fallback. Fitted to the sweep `cuda_bench_prefill` ran on the
// H200 (qwen3-0.6b .. 32b projection shapes x T = 2 .. 16384, Q4_0; docs/PERF.md, "prefill
// routing sweep", run P3), where the winner was:
//   - T <= 2 (and T <= 4 on narrow weights, n < 1.2 k: o_proj, down): the decode GEMV once per
//     token. Reading the weight T times costs less than one dequantization pass (outer) or a
//     tile mostly of padding (in-kernel): 8B qkv at T=2: gemv 18 us, in-kernel 38, outer 45.
//   - Wide weights (n >= 1.2 k: Q|K|V, gate, gate|up) up to T = 32 (128 for weights under 6 M
//     elements, 64 from 40 M): the in-kernel int8 tensor-core GEMM. It reads the packed weight
//     once and writes no fp16 copy; 8B gate at T=16: 44 us vs outer 79. On narrow weights it
//     has too few output tiles to fill 132 SMs (no split-K) and loses from T = 8.
//   - Otherwise: dequantize once to fp16 + cuBLAS. From T ~ 64 the GEMM's tensor-core rate
//     dominates: 8B gate at T=512: outer 131 us vs in-kernel 383.
// Against the better of the two forced routes (the knob at 1 or 0), this rule loses more than
// 3 % at 14 of the 420 sweep points (worst 17.7 %, qwen3-1.7b qkv at T=32: 28.6 vs 24.3 us), all
// at a crossover where both routes take 20-130 us (table in docs/PERF.md).
#include "backend/cuda/prefill.h"

namespace lmf::cuda {

PrefillRoute prefill_route_auto(DType t, int64_t n, int64_t k, int64_t T) {
  if (!mmq_supported(t)) return PrefillRoute::Outer;  // float weights: only the outer route exists
  const bool wide = 5 * n >= 6 * k;
  if (T <= 2 || (T <= 4 && !wide)) return PrefillRoute::Gemv;
  const int64_t elems = n * k;
  const int64_t ik_max = elems < 6'000'000 ? 128 : elems >= 40'000'000 ? 64 : 32;
  if (wide && T <= ik_max) return PrefillRoute::InKernel;
  return PrefillRoute::Outer;
}

}  // namespace lmf::cuda

// The adaptive prefill dequantization rule: which route (prefill.h) a projection takes, from its
// weight's shape and the number of tokens T. Fitted to the sweep `cuda_bench_prefill` ran on the
// H200 (qwen3-0.6b .. 32b projection shapes x T = 2 .. 16384, Q4_0; docs/PERF.md, "prefill
// routing sweep", run P2), where the winner was:
//   - T <= 4: the decode GEMV once per token. Reading the weight T times costs less than one
//     dequantization pass (outer) or a tile mostly of padding (in-kernel) at these sizes:
//     8B qkv at T=2: gemv 18 us, in-kernel 38, outer 45.
//   - T up to 32 (64 for weights of >= 40 M elements) on wide weights (n >= 1.2 k: Q|K|V, gate,
//     gate|up): the in-kernel int8 tensor-core GEMM. It reads the packed weight once and never
//     writes an fp16 copy; 8B gate at T=16: 47 us vs outer 81. On narrow weights (o_proj, down:
//     n < k) it has too few output tiles to fill 132 SMs (no split-K) and loses from T = 8.
//   - Otherwise: dequantize once to fp16 + cuBLAS. From T ~ 64 the GEMM's tensor-core rate
//     dominates: 8B gate at T=512: outer 131 us vs in-kernel 383.
// With this rule 14 of the 336 sweep points lose more than 3 % against the best route (worst
// 15 %, all within a factor 2 of a crossover; table in docs/PERF.md).
#include "backend/cuda/prefill.h"

namespace lmf::cuda {

PrefillRoute prefill_route_auto(DType t, int64_t n, int64_t k, int64_t T) {
  if (!mmq_supported(t)) return PrefillRoute::Outer;  // float weights: only the outer route exists
  if (T <= 4) return PrefillRoute::Gemv;
  const bool wide = 5 * n >= 6 * k;
  const int64_t ik_max = n * k >= 40'000'000 ? 64 : 32;
  if (wide && T <= ik_max) return PrefillRoute::InKernel;
  return PrefillRoute::Outer;
}

}  // namespace lmf::cuda

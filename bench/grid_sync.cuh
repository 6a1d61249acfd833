// Hand-over between the blocks of one grid through a counter in global memory, for the
// benchmarks that compare or build on it (cuda_bench_sync, cuda_bench_persist): arrivals with
// release semantics, polling with acquire semantics (no separate fence either side).
#pragma once

namespace lmf::cuda::dev {

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// An arrival that also reads the count before it (acquire and release: the last of a group to
// arrive sees every other arrival's stores).
__device__ __forceinline__ unsigned atom_add_acq_rel(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

}  // namespace lmf::cuda::dev

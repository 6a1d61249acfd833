// Programmatic dependent launch (PDL) for the decode chain. A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the previous kernel in the
// stream is still finishing; it must execute griddepcontrol.wait (pdl_wait) before reading
// anything the previous kernel wrote or writing anything. The GEMVs issue their first weight
// loads (weights are never written on the device) before the wait, so the next layer's weight
// stream starts during the previous kernel's tail. Inside a CUDA graph capture the attribute
// becomes a programmatic edge (CUDA 12.3+), so replays keep the overlap.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"

namespace lmf::cuda::dev {

bool pdl_enabled();  // kernels_gemv.cu; set_programmatic_launch in kernels.h
// Which short kernels trigger early (kernels.h PdlEarly bits); kernels_gemv.cu, set_pdl_early_trigger.
int pdl_early_trigger();

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Lets the next PDL kernel be scheduled once every block of this grid has run this (blocks of
// the next kernel then take SM slots as they free up and prefetch their weights).
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The wait, and the trigger for the next kernel: after the wait (default), or before it (early,
// for the short kernels of the chain: the QKV epilogue, attention split and merge). Early, the
// next kernel's blocks can become resident while this one still waits, so e.g. o_proj issues its
// weight loads during the attention. No deadlock: a kernel is scheduled only once every block of
// its predecessor has triggered (is resident or done), so no block of the chain still needs a slot.
// In two halves for a kernel with work before its wait (loads of the host's position, the K/V
// copies): the early trigger first, so that work does not delay the next kernel's launch (a load
// of the position is an L2 round trip: docs/PERF.md, session 17), then the wait.
__device__ __forceinline__ void pdl_trigger_early(bool early) {
  if (early) pdl_launch_dependents();
}
__device__ __forceinline__ void pdl_wait_trigger_late(bool early) {
  pdl_wait();
  if (!early) pdl_launch_dependents();
}
__device__ __forceinline__ void pdl_wait_trigger(bool early) {
  pdl_trigger_early(early);
  pdl_wait_trigger_late(early);
}

template <class... Params, class... Args>
void launch_pdl(void (*k)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, k, std::forward<Args>(args)...));
}

}  // namespace lmf::cuda::dev

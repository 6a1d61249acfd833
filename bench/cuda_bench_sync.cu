// What a dependency between two phases of the decode step costs on this GPU, by the two ways a
// step can hand over (no gtest: runs on the bare GPU machine; docs/PERF.md, session 15):
//  (a) a kernel boundary with programmatic dependent launch, as the decode chain runs now: N
//      kernels of G blocks replayed in a CUDA graph, each waiting (griddepcontrol.wait) before it
//      reads what its predecessor wrote and triggering its successor after the wait;
//  (b) a grid barrier inside one persistent kernel of G co-resident blocks: N phases, each block
//      arriving on a counter in global memory (one atomic per block) and spinning on it until
//      every block has arrived, the form a persistent decode-layer kernel would use.
// Each phase or kernel does the least dependent work: thread 0 of block b reads the value block
// b+1 wrote in the previous phase (an L2 round trip) and writes its own, so the chain cannot be
// satisfied early. Blocks are 512 threads, one per SM (the wide GEMVs), or 256 threads, two per
// SM (the narrow GEMVs). Prints µs per joint.
//  (c) (session 22) a barrier of a thread-block cluster (C = 8 or 16 blocks, one per SM: 200 KB of
//      shared memory each, as the persistent prototype holds), the hand-over a cluster-local phase
//      would use: block r reads block r+1's value of the previous phase from its shared memory
//      (distributed shared memory), then the cluster barrier; and how many such clusters the GPU
//      holds at once (cudaOccupancyMaxActiveClusters).
//  (d) (session 28) a broadcast hand-over, the way a 0.6B GEMV gets its x: kernel i (one block of
//      256 threads per SM, PDL as in (a)) waits, then every block reads the whole vector of n
//      floats that kernel i-1 wrote (float4 t, t + 256, ... per thread, as gemv_stage_x), and
//      writes its slice of the next vector. With R > 1 the writers store R copies and block b
//      reads copy b % R: if the 132 readers of each L2 line are what makes the x staging arrive
//      late (docs/PERF.md S27-1/S27-5), R copies shorten the joint.
//  (e) (session 29) the timeline's clock: how often %globaltimer advances as one thread reads it
//      back to back (its smallest and typical step), against the SM clock over the same loop.
//  (f) (session 29) cold code: PDL chains (as (a), 132 blocks of 128 threads) whose kernels run
//      L straight-line instructions after the wait, cycling through D distinct kernels of the same
//      length. D x L x 16 bytes beyond the SM's instruction caches makes every launch fetch its
//      code again; the growth over D = 1 is what a kernel's cold code costs per launch.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"
#include "cuda_bench_util.cuh"
#include "grid_sync.cuh"

using lmf::cuda::bench::time_graph;
using lmf::cuda::dev::global_ns;
using lmf::cuda::dev::ld_acquire;
using lmf::cuda::dev::red_release;

namespace {


// One dependent hand-over per phase: block b reads block b+1's value of the previous phase.
__device__ __forceinline__ void touch(unsigned* vals, int phase) {
  if (threadIdx.x == 0) {
    const int G = int(gridDim.x), b = int(blockIdx.x);
    const unsigned* src = vals + size_t(phase & 1) * G;
    unsigned* dst = vals + size_t((phase + 1) & 1) * G;
    dst[b] = __ldcg(src + (b + 1) % G) + 1;
  }
}

__global__ void chain_kernel(unsigned* vals, int phase) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  touch(vals, phase);
}

// Grid barrier: form 0 = __threadfence + atomicAdd, spin on a volatile read; form 1 = red.release
// arrival, spin on ld.acquire; form 2 = a flag per block (st.release of the phase number, no
// contended address), thread t < G of every block polling flag t (ld.acquire), then the block
// barrier.
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

template <int FORM>
__global__ void persistent_kernel(unsigned* vals, unsigned* count, int phases) {
  for (int ph = 0; ph < phases; ++ph) {
    touch(vals, ph);
    __syncthreads();
    if (FORM == 2) {
      // count: G flags, zero at launch
      if (threadIdx.x == 0) st_release(count + blockIdx.x, unsigned(ph + 1));
      for (int t = int(threadIdx.x); t < int(gridDim.x); t += int(blockDim.x))
        while (ld_acquire(count + t) < unsigned(ph + 1)) {
        }
    } else if (threadIdx.x == 0) {
      const unsigned target = unsigned(ph + 1) * gridDim.x;
      if (FORM == 0) {
        __threadfence();
        atomicAdd(count, 1u);
        while (*reinterpret_cast<volatile unsigned*>(count) < target) {
        }
        __threadfence();
      } else {
        red_release(count, 1u);
        while (ld_acquire(count) < target) {
        }
      }
    }
    __syncthreads();
  }
}

// (c): N phases of one DSMEM read and a cluster barrier.
__global__ void cluster_kernel(unsigned* out, int phases) {
  namespace cg = cooperative_groups;
  __shared__ unsigned v[2];
  const cg::cluster_group cl = cg::this_cluster();
  const unsigned r = cl.block_rank(), n = cl.num_blocks();
  if (threadIdx.x == 0) v[0] = v[1] = r;
  cl.sync();
  for (int ph = 0; ph < phases; ++ph) {
    if (threadIdx.x == 0) v[(ph + 1) & 1] = cl.map_shared_rank(v, (r + 1) % n)[ph & 1] + 1;
    cl.sync();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = v[phases & 1];
}

// (d): vec holds 2 x R copies of n floats (phase parity x copy).
__global__ void broadcast_kernel(float* vec, int n, int R, int phase) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int G = int(gridDim.x), b = int(blockIdx.x), t = int(threadIdx.x), n4 = n / 4;
  const float4* src = reinterpret_cast<const float4*>(vec + (size_t(phase & 1) * R + b % R) * n);
  float acc = 0.f;
  for (int i = t; i < n4; i += int(blockDim.x)) {
    const float4 v = __ldcg(src + i);
    acc += (v.x + v.y) + (v.z + v.w);
  }
  // The block's slice of the next vector: float4s [b * chunk, (b + 1) * chunk), to every copy.
  const int chunk = (n4 + G - 1) / G, i4 = b * chunk + t;
  if (t < chunk && i4 < n4) {
    const float4 w = make_float4(acc * 1e-9f, 1.f, 1.f, 1.f);
    for (int r = 0; r < R; ++r)
      reinterpret_cast<float4*>(vec + (size_t((phase + 1) & 1) * R + r) * n)[i4] = w;
  }
}

// Launches kernel<<<G, T>>> on s, as a programmatic dependent of the previous launch when pdl.
template <typename... P, typename... A>
void launch_chained(void (*kernel)(P...), int G, int T, cudaStream_t s, bool pdl, A... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(G);
  cfg.blockDim = dim3(T);
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// (e): thread 0 of one block reads %globaltimer n times and keeps each step between successive
// distinct values; clocks[0..1] = globaltimer and clock64 at the start and the end.
__global__ void globaltimer_kernel(unsigned long long* steps, int n, unsigned long long* clocks, int* n_steps) {
  if (threadIdx.x != 0) return;
  const unsigned long long t0 = global_ns();
  const long long c0 = clock64();
  unsigned long long prev = t0;
  int k = 0;
  for (int i = 0; i < n; ++i) {
    const unsigned long long t = global_ns();
    if (t != prev) {
      steps[k++] = t - prev;
      prev = t;
    }
  }
  const long long c1 = clock64();
  clocks[0] = prev - t0;
  clocks[1] = static_cast<unsigned long long>(c1 - c0);
  *n_steps = k;
}

// (f): L independent-ish ALU instructions (four interleaved chains), distinct per ID.
template <int ID, int L>
__global__ void code_kernel(unsigned* vals, int phase) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  // k is read after the wait (an unused word, zero): the chain cannot move above the wait, and
  // ptxas cannot fold it
  const unsigned k = __ldcg(vals + 6 * gridDim.x) | 1u;
  unsigned v[4] = {threadIdx.x, threadIdx.x + 1u, threadIdx.x + 2u, threadIdx.x + 3u};
#pragma unroll
  for (int i = 0; i < L; ++i)
    asm volatile("mad.lo.u32 %0, %0, %1, %2;" : "+r"(v[i & 3]) : "r"(k), "r"(unsigned(ID * 4096 + i)));
  if ((v[0] ^ v[1] ^ v[2] ^ v[3]) == 0x9e3779b9u) vals[0] = 1u;  // keeps the chains
  touch(vals, phase);
}
template <int L, int... IDs>
constexpr void (*code_kernels[])(unsigned*, int) = {code_kernel<IDs, L>...};
template <int L>
constexpr auto& code_table() {
  return code_kernels<L, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15>;
}

}  // namespace

int main() {
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned *vals, *count;
  CUDA_CHECK(cudaMalloc(&vals, 2 * 4 * size_t(sms) * sizeof(unsigned)));
  CUDA_CHECK(cudaMalloc(&count, 2 * size_t(sms) * sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(vals, 0, 2 * 4 * size_t(sms) * sizeof(unsigned)));
  const int N = 512, reps = 20;
  std::printf("%d SMs, %d joints per replay, mean of %d replays\n", sms, N, reps);
  for (int per_sm : {1, 2}) {
    const int G = sms * per_sm, T = per_sm == 1 ? 512 : 256;
    for (bool pdl : {true, false}) {
      auto chain = [&] {
        for (int i = 0; i < N; ++i) launch_chained(chain_kernel, G, T, s, pdl, vals, i);
      };
      const double us = 1e3 * time_graph(s, chain, reps);
      std::printf("kernel chain (%s), %4d blocks x %3d threads: %7.3f us per joint\n", pdl ? "PDL  " : "plain", G, T,
                  us / N);
    }
    for (int form : {0, 1, 2}) {
      auto pers = [&] {
        CUDA_CHECK(cudaMemsetAsync(count, 0, size_t(G) * sizeof(unsigned), s));
        if (form == 0)
          persistent_kernel<0><<<G, T, 0, s>>>(vals, count, N);
        else if (form == 1)
          persistent_kernel<1><<<G, T, 0, s>>>(vals, count, N);
        else
          persistent_kernel<2><<<G, T, 0, s>>>(vals, count, N);
        CUDA_CHECK(cudaGetLastError());
      };
      const double us = 1e3 * time_graph(s, pers, reps);
      std::printf("grid barrier (%s), %4d blocks x %3d threads: %7.3f us per joint\n",
                  form == 0 ? "fence+atomicAdd " : form == 1 ? "red.release/acq" : "flag per block ", G, T, us / N);
    }
  }
  // (c) clusters of C blocks x 512 threads with 200 KB of dynamic shared memory (one per SM).
  CUDA_CHECK(cudaFuncSetAttribute(cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const int smem = 200 * 1024;
  CUDA_CHECK(cudaFuncSetAttribute(cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  for (int C : {8, 16}) {
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = unsigned(C);
    at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cfg.blockDim = dim3(512);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.gridDim = dim3(unsigned(C));
    int nc = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&nc, cluster_kernel, &cfg);
    if (e != cudaSuccess || nc == 0) {
      std::printf("cluster barrier, %2d blocks per cluster: not launchable (%s)\n", C,
                  e != cudaSuccess ? cudaGetErrorString(e) : "0 clusters fit");
      cudaGetLastError();
      continue;
    }
    cfg.gridDim = dim3(unsigned(nc * C));
    auto clus = [&] { CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_kernel, vals, N)); };
    const double us = 1e3 * time_graph(s, clus, reps);
    std::printf("cluster barrier, %2d blocks per cluster, %2d clusters co-resident (%3d SMs): %7.3f us per joint\n", C,
                nc, nc * C, us / N);
  }
  // (d) broadcast hand-overs: one 256-thread block per SM, n floats, R copies.
  {
    const int G = sms, T = 256, Rmax = 8, nmax = 3072;
    float* vec;
    CUDA_CHECK(cudaMalloc(&vec, size_t(2) * Rmax * nmax * sizeof(float)));
    CUDA_CHECK(cudaMemset(vec, 0, size_t(2) * Rmax * nmax * sizeof(float)));
    for (int n : {256, 1024, 3072})
      for (int R : {1, 2, 4, 8}) {
        auto chain = [&] {
          for (int i = 0; i < N; ++i) launch_chained(broadcast_kernel, G, T, s, true, vec, n, R, i);
        };
        const double us = 1e3 * time_graph(s, chain, reps);
        std::printf("broadcast hand-over (PDL), %4d blocks x %3d threads, %5d floats, %d copies: %7.3f us per joint\n",
                    G, T, n, R, us / N);
      }
    CUDA_CHECK(cudaFree(vec));
  }
  // (f) cold code: D distinct kernels of L instructions, cycled through in a PDL chain.
  for (int L : {256, 2048})
    for (int D : {1, 2, 4, 8, 16}) {
      auto* const* table = L == 256 ? code_table<256>() : code_table<2048>();
      auto chain = [&] {
        for (int i = 0; i < N; ++i) launch_chained(table[i % D], sms, 128, s, true, vals, i);
      };
      const double us = 1e3 * time_graph(s, chain, reps);
      std::printf("cold code (PDL), %4d blocks x 128 threads, %4d instructions (%3d KB), %2d kernels (%4d KB): %7.3f us "
                  "per joint\n",
                  sms, L, L * 16 / 1024, D, D * L * 16 / 1024, us / N);
    }
  // (e) the timeline clock's step.
  {
    const int n = 200000;
    unsigned long long *steps, *clocks;
    int* n_steps;
    CUDA_CHECK(cudaMalloc(&steps, size_t(n) * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMalloc(&clocks, 2 * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMalloc(&n_steps, sizeof(int)));
    for (int rep = 0; rep < 2; ++rep) {
      globaltimer_kernel<<<1, 32, 0, s>>>(steps, n, clocks, n_steps);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaStreamSynchronize(s));
    }
    int k = 0;
    unsigned long long c[2];
    CUDA_CHECK(cudaMemcpy(&k, n_steps, sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(c, clocks, sizeof(c), cudaMemcpyDeviceToHost));
    std::vector<unsigned long long> h(size_t(k > 0 ? k : 0));
    if (k > 0) CUDA_CHECK(cudaMemcpy(h.data(), steps, size_t(k) * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    std::sort(h.begin(), h.end());
    if (k > 0)
      std::printf("globaltimer: %d reads, %d steps over %llu ns (%llu SM cycles, %.3f GHz): step min %llu ns, "
                  "median %llu ns, max %llu ns\n",
                  n, k, c[0], c[1], double(c[1]) / double(c[0] ? c[0] : 1), h.front(), h[h.size() / 2], h.back());
    else
      std::printf("globaltimer: %d reads, no step\n", n);
    CUDA_CHECK(cudaFree(steps));
    CUDA_CHECK(cudaFree(clocks));
    CUDA_CHECK(cudaFree(n_steps));
  }
  CUDA_CHECK(cudaFree(vals));
  CUDA_CHECK(cudaFree(count));
  return 0;
}

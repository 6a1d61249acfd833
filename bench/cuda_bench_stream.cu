// Streaming-read limits of this GPU at the decode GEMVs' sizes (no gtest: runs on the bare GPU
// machine). How long does one kernel take to read N bytes that are not in L2, by
//  (a) 16-byte register loads as the GEMVs load weights (ld.global.nc, L1 no-allocate, L2
//      evict-first), 4 per lane issued before any is used (ptxas keeps about 4 in flight however
//      many the source batches, SASS), B = 1, 2, 4, 8 blocks of 8 warps per SM: 16 KB x B in
//      flight per SM; the buffer dealt grid-stride (each warp instruction reads 512 contiguous
//      bytes);
//  (b) the GEMV's own load pattern without its arithmetic: warps own row groups of 4 rows dealt
//      round-robin over the grid (as gemv_kernel), lane l reads one 16-byte piece per row per
//      step (512 contiguous bytes per row), batches of 2 steps, the next batch in flight while
//      one is used (ping-pong); with no scales, and with the Q4_0 scales in two layouts
//      (`--rows` runs only these);
//  (c) per-warp bulk copies (cp.async.bulk into a shared-memory ring of S slots of C bytes, one
//      mbarrier per slot, lane 0 refilling a slot as soon as the warp has read it), one block of
//      W warps per SM.
// Every launch reads its own region of a 2 GiB buffer (no L2 reuse); launches are replayed back
// to back in a CUDA graph (plain stream order, so each pays one launch joint). Prints µs per
// launch, GB/s and % of the copy bandwidth measured in the same run: how much of a GEMV's time
// over its bytes is the load path itself (docs/PERF.md, session 8).
// `--broadcast` instead: G blocks reading the same (or each its own) N bytes from L2, and the
// GEMVs' x staging alone, timed per block by %globaltimer (docs/PERF.md, session 10).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "bulk_copy.cuh"
#include "cuda_bench_util.cuh"

using namespace lmf;
using namespace lmf::cuda;
using namespace lmf::cuda::dev;

namespace {

constexpr unsigned kMagic = 0x9e3779b9u;  // an XOR that never comes out: keeps the loads alive

// The loads and their uses as volatile asm, so they stay in source order: all K loads of a batch
// are issued before the first use (ptxas otherwise interleaves them, ~5 in flight at K = 16).
__device__ __forceinline__ uint4 ld16(const void* p, uint64_t pol) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ void use16(unsigned& acc, const uint4& v) {
  asm volatile("lop3.b32 %0, %1, %2, %0, 0x96;" : "+r"(acc) : "r"(v.x), "r"(v.y));
  asm volatile("lop3.b32 %0, %1, %2, %0, 0x96;" : "+r"(acc) : "r"(v.z), "r"(v.w));
}

template <int K>
__global__ void __launch_bounds__(256) ldg_stream(const uint4* __restrict__ p, size_t n16, unsigned* sink) {
  const uint64_t pol = dev::evict_first_policy();
  const size_t T = size_t(gridDim.x) * blockDim.x;
  const size_t tid = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t full = n16 / (K * T) * (K * T);  // whole batches: loads without predicates
  unsigned acc = 0;
  for (size_t i0 = tid; i0 < full; i0 += K * T) {
    uint4 v[K];
#pragma unroll
    for (int j = 0; j < K; ++j) v[j] = ld16(p + i0 + j * T, pol);
#pragma unroll
    for (int j = 0; j < K; ++j) use16(acc, v[j]);
  }
  for (size_t i = full + tid; i < n16; i += T) use16(acc, ld16(p + i, pol));
  if (acc == kMagic) sink[0] = acc;
}

// (b): rows x row_bytes (a multiple of 512), 8 warps per block. SC = the Q4_0 scales as well
// (fp16 d per 32 elements, 1/8 of the quant bytes, placed after them): 0 none; 1 the engine's
// layout, [rows][nblk] (per step a lane loads 2 bytes for each of its 4 rows: four 64-byte pieces
// per warp, one row's scales apart, 256 bytes at K = 4096); 2 interleaved per row group,
// [rg][nblk][4] (per step one 8-byte load per lane: 256 contiguous bytes per warp). PERF.md S26-1.
__device__ __forceinline__ uint32_t ld2(const void* p, uint64_t pol) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ uint2 ld8(const void* p, uint64_t pol) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p), "l"(pol));
  return v;
}
template <int SC>
__global__ void __launch_bounds__(256) rows_stream(const uint8_t* __restrict__ p, int rows, int row_bytes,
                                                   unsigned* sink) {
  const uint64_t pol = dev::evict_first_policy();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_rg = rows / 4, steps = row_bytes / 512, bpr = (steps + 1) / 2;  // batches per row group
  const int nblk = row_bytes / 16;
  const uint8_t* sc = p + size_t(rows) * row_bytes;
  const int w0 = int(blockIdx.x) + int(gridDim.x) * warp, wstep = int(gridDim.x) * 8;
  auto rg_of = [&](int b) { return w0 + (b / bpr) * wstep; };
  struct Batch {
    uint4 v[2][4];
    uint32_t s[2][4];
  };
  auto load = [&](Batch& B, int b) {
    const int rg = rg_of(b), g = (b % bpr) * 2;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const bool ok = g + u < steps;
      const int c = (g + u) * 32 + lane;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        B.v[u][r] = ok ? ld16(p + size_t(rg * 4 + r) * row_bytes + (g + u) * 512 + lane * 16, pol) : make_uint4(0, 0, 0, 0);
        if constexpr (SC == 1) B.s[u][r] = ok ? ld2(sc + (size_t(rg * 4 + r) * nblk + c) * 2, pol) : 0u;
      }
      if constexpr (SC == 2) {
        const uint2 w = ok ? ld8(sc + (size_t(rg) * nblk + c) * 8, pol) : make_uint2(0, 0);
        B.s[u][0] = w.x;
        B.s[u][1] = w.y;
      }
    }
  };
  unsigned acc = 0;
  auto use = [&](const Batch& B) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
#pragma unroll
      for (int r = 0; r < 4; ++r) use16(acc, B.v[u][r]);
      if constexpr (SC == 1) use16(acc, make_uint4(B.s[u][0], B.s[u][1], B.s[u][2], B.s[u][3]));
      if constexpr (SC == 2) use16(acc, make_uint4(B.s[u][0], B.s[u][1], 0u, 0u));
    }
  };
  Batch A, B;
  if (rg_of(0) < n_rg) load(A, 0);
  if (rg_of(1) < n_rg) load(B, 1);
  for (int b = 0;; b += 2) {
    if (rg_of(b) >= n_rg) break;
    use(A);
    if (rg_of(b + 2) < n_rg) load(A, b + 2);
    if (rg_of(b + 1) >= n_rg) break;
    use(B);
    if (rg_of(b + 3) < n_rg) load(B, b + 3);
  }
  if (acc == kMagic) sink[0] = acc;
}

// (c): warp gw of the grid owns items [i0, i1) of C bytes (bytes % C == 0); slot s of its ring
// holds items i0 + s, i0 + s + S, ... (phase k of the slot's mbarrier = its k-th item).
template <int S, int C>
__global__ void bulk_stream(const uint8_t* __restrict__ p, size_t bytes, unsigned* sink) {
  extern __shared__ __align__(128) uint8_t ring[];  // [W][S][C], then [W][S] mbarriers
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = int(blockDim.x >> 5);
  uint8_t* my = ring + size_t(warp) * S * C;
  uint64_t* bars = reinterpret_cast<uint64_t*>(ring + size_t(W) * S * C) + warp * S;
  const size_t nw = size_t(gridDim.x) * W, gw = blockIdx.x * size_t(W) + warp, items = bytes / C;
  const size_t i0 = items * gw / nw, i1 = items * (gw + 1) / nw;
  const uint64_t pol = dev::evict_first_policy();
  if (lane == 0) {
    for (int s = 0; s < S; ++s) mbar_init(&bars[s], 1);
    mbar_init_fence();
    for (int s = 0; s < S && i0 + s < i1; ++s) {
      mbar_arrive_expect_tx(&bars[s], C);
      bulk_load(my + s * C, p + (i0 + s) * C, C, &bars[s], pol);
    }
  }
  __syncwarp();
  unsigned acc = 0;
  for (size_t i = i0; i < i1; ++i) {
    const int s = int((i - i0) % S);
    mbar_wait_parity(&bars[s], uint32_t(((i - i0) / S) & 1));
    const uint4* q = reinterpret_cast<const uint4*>(my + s * C);
#pragma unroll 4
    for (int k = lane; k < C / 16; k += 32) {
      use16(acc, q[k]);
    }
    __syncwarp();  // every lane has read the slot
    if (lane == 0 && i + S < i1) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the reads before the refill
      mbar_arrive_expect_tx(&bars[s], C);
      bulk_load(my + s * C, p + (i + S) * C, C, &bars[s], pol);
    }
  }
  if (acc == kMagic) sink[0] = acc;
}

struct Size {
  const char* name;
  size_t bytes;  // Q4_0 quant bytes of the shape (rows x cols / 2)
  int rows, row_bytes;
};

// Per-block %globaltimer stamps: start after a block barrier, end after another; thread 0 writes
// stamps[2 * block + 0/1].
__device__ __forceinline__ unsigned long long block_stamp_start() {
  __syncthreads();
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void block_stamp_end(unsigned long long* stamps, unsigned long long t0) {
  __syncthreads();
  unsigned long long t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (threadIdx.x == 0) {
    stamps[2 * blockIdx.x] = t0;
    stamps[2 * blockIdx.x + 1] = t1;
  }
}

// Every block reads the same `bytes` from L2 (distinct = false; the GEMVs' x staging) or its own
// `bytes` (distinct = true), float4 __ldg loads, kB per thread issued before any use; records
// per block %globaltimer at start and end (after block barriers): stamps[2 * block + 0/1].
template <int kB>
__global__ void bcast_read(const float4* __restrict__ p, int n4, bool distinct, unsigned long long* stamps,
                           unsigned* sink) {
  const unsigned long long t0 = block_stamp_start();
  const float4* src = p + (distinct ? size_t(blockIdx.x) * n4 : 0);
  float acc = 0.f;
  for (int base = 0; base < n4; base += kB * int(blockDim.x)) {
    float4 v[kB];
#pragma unroll
    for (int j = 0; j < kB; ++j) {
      const int i = base + j * int(blockDim.x) + int(threadIdx.x);
      v[j] = i < n4 ? __ldg(src + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int j = 0; j < kB; ++j) acc += v[j].x + v[j].y + v[j].z + v[j].w;
  }
  if (__float_as_uint(acc) == kMagic) *sink = 1;
  block_stamp_end(stamps, t0);
}

// The GEMVs' x staging alone (gemv_stage_x, Q4_0 int8 codes), no weights: per-block stamps.
// (The blockwise variants of docs/PERF.md session 10's table are in commit 6e1b3a6.)
template <Prologue PRO>
__global__ void __launch_bounds__(kGemvThreads<DType::Q4_0, kNarrowWarps>) stage_only(const __grid_constant__ GemvParams p,
                                                          unsigned long long* stamps) {
  extern __shared__ float4 xs4[];
  __shared__ float red[32];
  const unsigned long long t0 = block_stamp_start();
  gemv_stage_x<DType::Q4_0, PRO, kNarrowWarps>(p, xs4, red);
  block_stamp_end(stamps, t0);
}

constexpr size_t kPool = size_t(2) << 30;
constexpr size_t kRegionAlign = size_t(2) << 20;

// µs per launch of body(region) over `regions` distinct regions of the pool, replayed as a graph.
template <class F>
double per_launch_us(cudaStream_t s, size_t bytes, F body) {
  const size_t stride = (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign;
  const int regions = int(std::min<size_t>(32, kPool / stride));
  const double ms = bench::time_graph(s, [&] {
    for (int r = 0; r < regions; ++r) body(size_t(r) * stride);
  }, 10);
  return ms * 1e3 / regions;
}

void report(const char* what, const Size& z, size_t bytes, double us, double copy) {
  const double gbs = bytes / (us * 1e-6) / 1e9;
  std::printf("| %s | %s | %.1f | %.2f | %.0f | %.1f %% |\n", what, z.name, bytes / 1e6, us, gbs, 100.0 * gbs / copy);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const double copy = bench::copy_bandwidth();
    const int sms = device_sm_count();
    std::printf("copy bandwidth (D2D 1 GiB, read+write): %.1f GB/s, %d SMs\n", copy, sms);
    uint8_t* pool = nullptr;
    unsigned* sink = nullptr;
    CUDA_CHECK(cudaMalloc(&pool, kPool));
    CUDA_CHECK(cudaMalloc(&sink, 4));
    bench::fill_bits<<<1024, 256>>>(reinterpret_cast<uint32_t*>(pool), kPool / 4, 7, 0xFFFFFFFFu, 0);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    // `cuda_bench_stream --broadcast`: how long G blocks take to read the same N bytes from L2
    // (the GEMVs' x staging without its arithmetic) or N bytes each; median over launches 5..24.
    if (argc > 1 && std::string(argv[1]) == "--broadcast") {
      unsigned long long* stamps = nullptr;
      const int gmax = 4 * sms;
      CUDA_CHECK(cudaMalloc(&stamps, size_t(2) * gmax * 8));
      std::vector<unsigned long long> h(size_t(2) * gmax);
      // Median over launches 5..24 of launch(): {mean block duration, first start to last end}, µs.
      auto stamped = [&](int blocks, auto launch) {
        std::vector<double> mean, span;
        for (int it = 0; it < 25; ++it) {
          launch();
          CUDA_CHECK(cudaGetLastError());
          CUDA_CHECK(cudaMemcpyAsync(h.data(), stamps, size_t(2) * blocks * 8, cudaMemcpyDeviceToHost, s));
          CUDA_CHECK(cudaStreamSynchronize(s));
          if (it < 5) continue;
          unsigned long long lo = ~0ull, hi = 0;
          double sum = 0;
          for (int b = 0; b < blocks; ++b) {
            lo = std::min(lo, h[2 * b]);
            hi = std::max(hi, h[2 * b + 1]);
            sum += double(h[2 * b + 1] - h[2 * b]);
          }
          mean.push_back(sum / blocks / 1e3);
          span.push_back(double(hi - lo) / 1e3);
        }
        std::sort(mean.begin(), mean.end());
        std::sort(span.begin(), span.end());
        return std::pair{mean[mean.size() / 2], span[span.size() / 2]};
      };
      std::printf("| threads | blocks | KB per block | distinct | block mean µs | first start to last end µs | GB/s to SMs |\n"
                  "| ---: | ---: | ---: | --- | ---: | ---: | ---: |\n");
      for (int kb : {16, 48})
        for (bool distinct : {false, true})
          for (auto [threads, blocks] : {std::pair{256, sms}, {256, 2 * sms}, {256, 4 * sms}, {512, sms}, {1024, sms}}) {
            const int n4 = kb * 1024 / 16;
            const auto [mean, span] = stamped(blocks, [&] {
              bcast_read<4><<<blocks, threads, 0, s>>>(reinterpret_cast<const float4*>(pool), n4, distinct, stamps, sink);
            });
            std::printf("| %d | %d | %d | %s | %.2f | %.2f | %.0f |\n", threads, blocks, kb, distinct ? "yes" : "no", mean,
                        span, double(blocks) * kb * 1024 / (span * 1e-6) / 1e9);
          }
      // The staging itself (Q4_0 int8 codes) for the 8B shapes' x: down (12288, no prologue),
      // qkv/gate-up (4096, RMSNorm prologue), o (4096, none). x and gamma as activations look
      // (random sign, magnitude in [1, 2)), not random bits: a huge block maximum would send
      // 127 / max down the division's slow path.
      bench::fill_bits<<<256, 256>>>(reinterpret_cast<uint32_t*>(pool), (size_t(2) << 20) / 4, 11, 0x807FFFFFu, 0x3F800000u);
      CUDA_CHECK(cudaGetLastError());
      std::printf("| staging | blocks | block mean µs | first start to last end µs |\n| --- | ---: | ---: | ---: |\n");
      for (auto [cols, norm] : {std::pair{12288, false}, {4096, true}, {4096, false}})
        for (int blocks : {sms, 2 * sms}) {
          GemvParams p{};
          p.cols = cols;
          p.in = reinterpret_cast<const float*>(pool);
          p.gamma = reinterpret_cast<const float*>(pool + (1 << 20));
          p.eps = 1e-6f;
          const size_t smem = gemv_smem_bytes<DType::Q4_0>(cols);
          const auto [mean, span] = stamped(blocks, [&] {
            if (norm)
              stage_only<Prologue::Norm><<<blocks, kGemvThreads<DType::Q4_0, kNarrowWarps>, smem, s>>>(p, stamps);
            else
              stage_only<Prologue::None><<<blocks, kGemvThreads<DType::Q4_0, kNarrowWarps>, smem, s>>>(p, stamps);
          });
          std::printf("| %d cols%s | %d | %.2f | %.2f |\n", cols, norm ? " + norm" : "", blocks, mean, span);
        }
      CUDA_CHECK(cudaFree(stamps));
      return 0;
    }
    // The Qwen3-8B decode GEMVs' Q4_0 quant bytes (the scales add 1/8).
    const Size sizes[] = {{"8b.o 4096x4096", size_t(4096) * 2048, 4096, 2048},
                          {"8b.qkv 6144x4096", size_t(6144) * 2048, 6144, 2048},
                          {"8b.down 4096x12288", size_t(4096) * 6144, 4096, 6144},
                          {"8b.gateup 24576x4096", size_t(24576) * 2048, 24576, 2048},
                          {"2x 8b.gateup 49152x4096", size_t(49152) * 2048, 49152, 2048}};
    // `cuda_bench_stream --rows`: only the (b) rows (the GEMV's pattern with and without scales).
    const bool rows_only = argc > 1 && std::string(argv[1]) == "--rows";
    std::printf("| loads | shape | MB | µs per launch | GB/s | of copy |\n| --- | --- | ---: | ---: | ---: | ---: |\n");
    char what[96];
    for (const Size& z : sizes) {
      const size_t n16 = z.bytes / 16;
      for (int blocks : {1, 2, 4, 8}) {
        if (rows_only) break;
        const double us = per_launch_us(s, z.bytes, [&](size_t off) {
          ldg_stream<4><<<sms * blocks, 256, 0, s>>>(reinterpret_cast<const uint4*>(pool + off), n16, sink);
        });
        std::snprintf(what, sizeof what, "(a) registers, 4 x 16 B per lane, %d x 8 warps per SM", blocks);
        report(what, z, z.bytes, us, copy);
      }
      for (int blocks : {1, 2}) {
        const int n_rg = z.rows / 4;
        const int grid = std::max(1, std::min(n_rg, sms * blocks));
        static const char* kSc[] = {"", ", scales [rows][nblk]", ", scales [rg][nblk][4]"};
        auto run_rows = [&](auto kernel, int sc) {
          const size_t bytes = z.bytes + (sc ? z.bytes / 8 : 0);
          const double us = per_launch_us(s, bytes, [&](size_t off) {
            kernel<<<grid, 256, 0, s>>>(pool + off, z.rows, z.row_bytes, sink);
          });
          std::snprintf(what, sizeof what, "(b) GEMV pattern%s, %d x 8 warps per SM", kSc[sc], blocks);
          report(what, z, bytes, us, copy);
        };
        run_rows(rows_stream<0>, 0);
        run_rows(rows_stream<1>, 1);
        run_rows(rows_stream<2>, 2);
      }
      auto run_bulk = [&](auto kernel, int S, int C, int warps) {
        const size_t smem = size_t(warps) * S * C + size_t(warps) * S * 8;
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        const size_t bytes = z.bytes / C * C;
        const double us = per_launch_us(s, bytes, [&](size_t off) {
          kernel<<<sms, warps * 32, smem, s>>>(pool + off, bytes, sink);
        });
        std::snprintf(what, sizeof what, "(c) bulk copies, %d warps x %d slots x %d B per SM", warps, S, C);
        report(what, z, bytes, us, copy);
      };
      if (rows_only) continue;
      run_bulk(bulk_stream<4, 4096>, 4, 4096, 8);
      run_bulk(bulk_stream<6, 4096>, 6, 4096, 8);
      run_bulk(bulk_stream<3, 4096>, 3, 4096, 16);
      run_bulk(bulk_stream<6, 8192>, 6, 8192, 4);
      run_bulk(bulk_stream<3, 8192>, 3, 8192, 8);
    }
    const double empty = per_launch_us(s, 1, [&](size_t) { ldg_stream<4><<<sms, 256, 0, s>>>(
                                                          reinterpret_cast<const uint4*>(pool), 0, sink); });
    std::printf("a launch reading nothing (%d x 8 warps): %.2f µs\n", sms, empty);
    CUDA_CHECK(cudaFree(pool));
    CUDA_CHECK(cudaFree(sink));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

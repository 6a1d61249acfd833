// Micro-benchmark of the CUDA decode kernels (no gtest/benchmark dependency: runs on the bare
// GPU machine). Prints:
//  1. device copy bandwidth (cudaMemcpy D2D 1 GiB, read + write counted) - the reference ceiling;
//  2. each GEMV type at Qwen3-8B and Qwen3-0.6B projection shapes, timed by replaying a CUDA graph
//     of launches that cycle through enough weight copies to defeat the 50 MB L2;
//  3. the per-launch cost of an empty kernel inside a graph;
//  4. a decode-step chain per model (norm+QKV GEMV, its norm/rope/cache epilogue kernel, attention,
//     o_proj+residual, norm+gate/up+SiLU, down+residual, for every layer: the backend's default
//     launches) as one graph: time per token and % of
//     copy bandwidth for the bytes it must read (weights + KV cache), with and without
//     programmatic dependent launch;
//  5. with --timeline only: each chain launch's start, PDL release and end inside the replayed
//     graph (%globaltimer stamps written by the kernels), averaged over the layers.
#include <cuda_runtime.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <span>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/qkv_post.h"
#include "backend/cuda/timeline.h"
#include "cuda_bench_util.cuh"
#include "util/knobs.h"

using namespace lmf;
using namespace lmf::cuda;

namespace {

__global__ void fill_f32(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}
__global__ void empty_kernel() {}

using bench::capture_graph;
using bench::copy_bandwidth;
using bench::random_weight;
using bench::time_graph;

float* dev_floats(size_t n, float v = 0.01f) {
  float* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  fill_f32<<<256, 256>>>(p, n, v);
  CUDA_CHECK(cudaGetLastError());
  return p;
}

// Smallest step of %globaltimer seen by one thread (its resolution on this device).
__global__ void timer_tick(unsigned long long* out) {
  unsigned long long prev = dev::global_ns(), best = ~0ull;
  for (int i = 0; i < 200000; ++i) {
    const unsigned long long t = dev::global_ns();
    if (t != prev) {
      best = t - prev < best ? t - prev : best;
      prev = t;
    }
  }
  *out = best;
}

struct Shape {
  const char* name;
  int64_t rows, cols;
};

void bench_gemv(cudaStream_t s, double copy_gbs, DType t, const Shape& sh, Prologue pro, Epilogue epi,
                const char* label) {
  const size_t one = bench::packed_bytes(t, sh.rows, sh.cols);
  const int copies = int(std::max<size_t>(2, std::min<size_t>(64, (size_t(600) << 20) / one)));
  std::vector<DeviceWeight> ws;
  for (int i = 0; i < copies; ++i) ws.push_back(random_weight(t, sh.rows, sh.cols, 1234 + i));
  float* x = dev_floats(sh.cols);
  float* gamma = dev_floats(sh.cols, 1.f);
  float* res = dev_floats(sh.cols);
  float* rout = dev_floats(sh.cols);
  float* y = dev_floats(sh.rows);
  const int launches = std::max(copies, 32);
  auto body = [&] {
    for (int i = 0; i < launches; ++i) {
      GemvArgs a;
      a.w = &ws[i % copies];
      a.in = x;
      a.gamma = gamma;
      a.residual = res;
      a.residual_out = rout;
      a.y = y;
      a.y_residual = y;
      gemv(pro, epi, a, s);
    }
  };
  const double ms = time_graph(s, body, 10) / launches;
  const double gbs = weight_bytes(ws[0]) / (ms * 1e-3) / 1e9;
  std::printf("gemv %-5s %-14s %-10s %6lldx%-6lld %8.2f us %8.1f GB/s %6.1f %% of copy\n", dtype_name(t),
              label, sh.name, (long long)sh.rows, (long long)sh.cols, ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
  for (auto& w : ws) free_weight(w);
  for (float* p : {x, gamma, res, rout, y}) CUDA_CHECK(cudaFree(p));
}

struct ModelShape {
  const char* name;
  int n_layer, hidden, n_head, n_kv, hd, ffn;
};

constexpr int kChainLaunches = 7;  // per layer: qkv GEMV, QKV epilogue, attention split + merge, o, gate/up, down
constexpr const char* kChainNames[kChainLaunches] = {"qkv gemv (norm)", "qkv epilogue", "attention split",
                                                      "attention merge", "o gemv (+res)", "gate/up gemv (norm, silu)",
                                                      "down gemv (+res)"};

// timeline: instead of the timing line, the per-launch timeline of the same graph (TimelineSlots,
// backend/cuda/timeline.h), averaged over the layers.

void bench_decode_chain(cudaStream_t s, double copy_gbs, const ModelShape& m, DType t, int pos,
                        bool timeline = false) {
  // GEMV block width as the backend picks it for this model (LMFUSE_GEMV_WIDE: 0/1/auto); the
  // producer-quantized x of o_proj (LMFUSE_ATTN_XQ, auto as the backend) and down (LMFUSE_GEMV_XQ = 1).
  const Knobs kn = Knobs::from_env();
  const bool large = large_decode_model(m.hidden);
  set_gemv_wide(tri_resolve(kn.gemv_wide, large));
  set_gemv_split_k(kn.gemv_split_k);
  const int64_t n_ctx = 4096;
  const int qkv_rows = (m.n_head + 2 * m.n_kv) * m.hd;
  struct Layer {
    DeviceWeight qkv, o, gu, down;
    uint16_t *kc, *vc;
  };
  std::vector<Layer> L(m.n_layer);
  size_t bytes = 0;
  for (int l = 0; l < m.n_layer; ++l) {
    L[l].qkv = random_weight(t, qkv_rows, m.hidden, 10 * l + 1);
    L[l].o = random_weight(t, m.hidden, m.n_head * m.hd, 10 * l + 2);
    L[l].gu = random_weight(t, 2 * m.ffn, m.hidden, 10 * l + 3);
    L[l].down = random_weight(t, m.hidden, m.ffn, 10 * l + 4);
    bytes += weight_bytes(L[l].qkv) + weight_bytes(L[l].o) + weight_bytes(L[l].gu) + weight_bytes(L[l].down);
    const size_t cn = size_t(m.n_kv) * n_ctx * m.hd;
    CUDA_CHECK(cudaMalloc(&L[l].kc, cn * 2));
    CUDA_CHECK(cudaMalloc(&L[l].vc, cn * 2));
    CUDA_CHECK(cudaMemset(L[l].kc, 0, cn * 2));
    CUDA_CHECK(cudaMemset(L[l].vc, 0, cn * 2));
  }
  const size_t kv_bytes = size_t(m.n_layer) * 2 * m.n_kv * (pos + 1) * m.hd * 2;
  float* hidden = dev_floats(m.hidden);
  float* gamma = dev_floats(m.hidden, 1.f);
  float* hn = dev_floats(m.hd, 1.f);
  float* q = dev_floats(m.n_head * m.hd);
  float* att = dev_floats(m.n_head * m.hd);
  float* act = dev_floats(m.ffn);
  const bool xq = kn.gemv_xq == Tri::On;
  uint8_t* xq_buf = nullptr;
  if (xq) CUDA_CHECK(cudaMalloc(&xq_buf, gemv_xq_bytes(m.ffn)));
  // As the backend: automatic = on from the wide GEMVs' hidden size (session 13).
  const bool xq_o = tri_resolve(kn.attn_xq, large);
  const bool staged = tri_resolve(kn.attn_staged, kAttnStagedAuto);  // as the backend
  uint8_t* xq_o_buf = nullptr;
  if (xq_o) CUDA_CHECK(cudaMalloc(&xq_o_buf, gemv_xq_bytes(int64_t(m.n_head) * m.hd)));
  float* raw = dev_floats(qkv_rows);
  int* d_pos;
  CUDA_CHECK(cudaMalloc(&d_pos, sizeof(int)));
  CUDA_CHECK(cudaMemcpy(d_pos, &pos, sizeof(int), cudaMemcpyHostToDevice));
  const int splits = attn_plan_splits(m.n_kv, n_ctx);
  float* part = dev_floats(attn_scratch_floats(m.n_head, m.hd, splits));
  const int n_slots = m.n_layer * kChainLaunches;
  std::unique_ptr<TimelineSlots> tslots;
  if (timeline) tslots = std::make_unique<TimelineSlots>(n_slots);
  unsigned long long* slots = tslots ? tslots->slot(0) : nullptr;
  auto slot = [&](int l, int k) { return slots ? slots + size_t(l * kChainLaunches + k) * dev::kTlWords : nullptr; };
  // Experiment (bench only): LMFUSE_CHAIN_NARROW=qkv,o,gu,down runs the named GEMVs as 8-warp
  // blocks whatever the model's width.
  const char* nenv = std::getenv("LMFUSE_CHAIN_NARROW");
  const std::string narrow = nenv ? std::string(",") + nenv + "," : "";
  auto width = [&](const char* g) { return narrow.find(std::string(",") + g + ",") != std::string::npos ? Tri::Off : Tri::Auto; };
  auto body = [&] {
    for (int l = 0; l < m.n_layer; ++l) {
      // The backend's default QKV path: a Store GEMV into raw q|k|v, then the epilogue kernel
      // (q/k norm, RoPE, KV append; LMFUSE_ROPE_FUSION unset).
      GemvArgs a;
      a.w = &L[l].qkv;
      a.in = hidden;
      a.gamma = gamma;
      a.y = raw;
      a.tl = slot(l, 0);
      a.wide = width("qkv");
      gemv(Prologue::Norm, Epilogue::Store, a, s);
      QkvPostArgs pa;
      pa.raw = raw;
      pa.n_head = m.n_head;
      pa.n_kv_head = m.n_kv;
      pa.head_dim = m.hd;
      pa.q_norm = hn;
      pa.k_norm = hn;
      pa.pos = d_pos;
      pa.q_out = q;
      pa.k_cache = L[l].kc;
      pa.v_cache = L[l].vc;
      pa.n_ctx = n_ctx;
      pa.pdl = true;  // LMFUSE_QKV_POST_PDL automatic (session 7)
      pa.tl = slot(l, 1);
      qkv_post(pa, s);
      AttnArgs at;
      at.q = q;
      at.k_cache = L[l].kc;
      at.v_cache = L[l].vc;
      at.n_head = m.n_head;
      at.n_kv_head = m.n_kv;
      at.head_dim = m.hd;
      at.n_ctx = n_ctx;
      at.pos = d_pos;
      at.out = att;
      at.n_splits = splits;
      at.partial = part;
      at.tl = slot(l, 2);  // and slot(l, 3) for the merge
      at.xq = xq_o_buf;
      at.staged = staged;
      at.single_split = tri_resolve(kn.attn_single_split, kAttnSingleSplitAuto);  // as the backend
      attention_decode(at, s);
      GemvArgs o;
      o.w = &L[l].o;
      o.in = att;
      o.xq = xq_o_buf;
      o.y = hidden;
      o.y_residual = hidden;
      o.tl = slot(l, 4);
      o.wide = width("o");
      gemv(xq_o ? Prologue::Int8 : Prologue::None, Epilogue::Residual, o, s);
      GemvArgs gu;
      gu.w = &L[l].gu;
      gu.in = hidden;
      gu.gamma = gamma;
      gu.y = act;
      gu.tl = slot(l, 5);
      gu.wide = width("gu");
      gu.xq = xq_buf;
      gemv(Prologue::Norm, xq ? Epilogue::SiluMulQ : Epilogue::SiluMul, gu, s);
      GemvArgs d;
      d.w = &L[l].down;
      d.in = act;
      d.xq = xq_buf;
      d.y = hidden;
      d.y_residual = hidden;
      d.tl = slot(l, 6);
      d.wide = width("down");
      gemv(xq ? Prologue::Int8 : Prologue::None, Epilogue::Residual, d, s);
    }
  };
  if (timeline) {
    // Per launch kind, mean over layers 1.. (layer 0 has no predecessor in the graph), in µs:
    // adds = end - previous end (its share of the step), early = previous end - start (blocks
    // resident before the previous kernel's last warp exits), release = wait - previous end
    // (the PDL dependency's latency), after = end - wait (its work once released).
    cudaGraphExec_t ge = capture_graph(s, body);
    const std::vector<SlotTimes> tl = tslots->replay(ge, s);
    CUDA_CHECK(cudaGraphExecDestroy(ge));
    // phase = latest end of a block's first phase (GEMV: x staged; others: the wait) - wait;
    // late = the last block's start - previous end; phase_mean = the first phase per block.
    double adds[kChainLaunches] = {}, early[kChainLaunches] = {}, rel[kChainLaunches] = {}, after[kChainLaunches] = {},
           phase[kChainLaunches] = {}, mk0[kChainLaunches] = {}, mk1[kChainLaunches] = {}, late[kChainLaunches] = {},
           phase_mean[kChainLaunches] = {}, mk0_first[kChainLaunches] = {};
    // A launch that did not run (the merge kernel under the merge fusion) has no stamps: it is
    // skipped, and the one after it is measured against the launch before it.
    bool ran[kChainLaunches];
    for (int k = 0; k < kChainLaunches; ++k) ran[k] = tl[size_t(kChainLaunches + k)].stamped;
    for (int l = 1; l < m.n_layer; ++l)
      for (int k = 0; k < kChainLaunches; ++k) {
        if (!ran[k]) continue;
        int kp = k - 1;
        while (kp >= 0 && !ran[kp]) --kp;
        const auto& c = tl[size_t(l * kChainLaunches + k)];
        const auto& p = kp >= 0 ? tl[size_t(l * kChainLaunches + kp)] : tl[size_t(l * kChainLaunches - 1)];
        const double n = m.n_layer - 1;
        adds[k] += (c.end - p.end) / 1e3 / n;
        early[k] += (p.end - c.start) / 1e3 / n;
        rel[k] += (c.wait - p.end) / 1e3 / n;
        after[k] += (c.end - c.wait) / 1e3 / n;
        phase[k] += (c.phase_end - c.wait) / 1e3 / n;
        late[k] += (c.last_start - p.end) / 1e3 / n;
        phase_mean[k] += c.phase_mean / 1e3 / n;
        if (c.mark0 > 0) mk0[k] += (c.mark0 - c.wait) / 1e3 / n;
        if (c.first_mark0 > 0) mk0_first[k] += (c.first_mark0 - c.wait) / 1e3 / n;
        if (c.mark1 > 0) mk1[k] += (c.mark1 - c.wait) / 1e3 / n;
      }
    std::printf("timeline %s %s pos %d: step %.1f us (first start to last end, mean of 5 replays); per layer (us):\n",
                m.name, dtype_name(t), pos, tl.back().end / 1e3);
    std::printf("| launch | adds to the step | resident before prev end | released after prev end | end - release | "
                "last phase-1 end - release | phase 1 per block (mean) | last block start - prev end | "
                "last mark 0 / 1 - release | first mark 0 - release |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    double sum = 0;
    for (int k = 0; k < kChainLaunches; ++k) {
      if (!ran[k]) {
        std::printf("| %s | not launched | | | | | | | | |\n", kChainNames[k]);
        continue;
      }
      std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f / %.2f | %.2f |\n", kChainNames[k],
                  adds[k], early[k], rel[k], after[k], phase[k], phase_mean[k], late[k], mk0[k], mk1[k], mk0_first[k]);
      sum += adds[k];
    }
    std::printf("| layer | %.2f | | | | | | | | |\n", sum);
  } else {
    const double ms = time_graph(s, body, 10);
    const double gbs = (bytes + kv_bytes) / (ms * 1e-3) / 1e9;
    std::printf("decode chain %-10s %-5s pos %5d: %d launches, %8.3f ms/token (%7.1f tok/s), %8.1f GB/s, %5.1f %% of "
                "copy (weights %.1f MB, kv %.1f MB)\n",
                m.name, dtype_name(t), pos, m.n_layer * kChainLaunches, ms, 1e3 / ms, gbs, 100.0 * gbs / copy_gbs,
                bytes / 1e6, kv_bytes / 1e6);
  }
  for (auto& l : L) {
    free_weight(l.qkv);
    free_weight(l.o);
    free_weight(l.gu);
    free_weight(l.down);
    CUDA_CHECK(cudaFree(l.kc));
    CUDA_CHECK(cudaFree(l.vc));
  }
  for (float* p : {hidden, gamma, hn, q, att, act, raw, part}) CUDA_CHECK(cudaFree(p));
  CUDA_CHECK(cudaFree(d_pos));
  if (xq_buf) CUDA_CHECK(cudaFree(xq_buf));
  if (xq_o_buf) CUDA_CHECK(cudaFree(xq_o_buf));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const double copy = copy_bandwidth();
    std::printf("copy bandwidth (D2D 1 GiB, read+write): %.1f GB/s\n", copy);

    const ModelShape q8b{"qwen3-8b", 36, 4096, 32, 8, 128, 12288};
    const ModelShape q06{"qwen3-0.6b", 28, 1024, 16, 8, 128, 3072};
    const ModelShape q4b{"qwen3-4b", 36, 2560, 32, 8, 128, 9728};
    const Shape s8[] = {{"8b.qkv", 6144, 4096}, {"8b.o", 4096, 4096}, {"8b.gateup", 24576, 4096}, {"8b.down", 4096, 12288}};
    const Shape s06[] = {{"0.6b.qkv", 4096, 1024}, {"0.6b.o", 1024, 2048}, {"0.6b.gateup", 6144, 1024}, {"0.6b.down", 1024, 3072}};
    const Shape s4[] = {{"4b.qkv", 6144, 2560}, {"4b.o", 2560, 4096}, {"4b.gateup", 19456, 2560}, {"4b.down", 2560, 9728}};
    // Shapes beside 4B gate/up (19456 x 2560: 4,864 row groups for 2,112 warp slots, the last of
    // its three 32-block column groups half full): the same columns with exactly two row groups
    // per slot, and the same rows with full column groups (docs/PERF.md S19).
    const Shape ssyn[] = {{"syn.2rounds", 16896, 2560}, {"syn.k2048", 19456, 2048}, {"syn.k3072", 19456, 3072},
                          {"syn.8b.gateup2x", 49152, 4096}};
    // `cuda_bench_gemv --sweep SUBSTR`: the Q4_0 plain GEMVs whose shape name contains SUBSTR, in
    // each block width (LMFUSE_GEMV_WIDE) and split-K mode (LMFUSE_GEMV_SPLIT_K): isolated rates.
    if (argc > 2 && std::string(argv[1]) == "--sweep") {
      using Set = std::span<const Shape>;
      for (Set set : {Set(s8), Set(s4), Set(s06), Set(ssyn)})
        for (const auto& sh : set) {
          if (std::string(sh.name).find(argv[2]) == std::string::npos) continue;
          for (bool wide : {false, true})
            for (Tri sk : {Tri::Off, Tri::On}) {
              set_gemv_wide(wide);
              set_gemv_split_k(sk);
              const std::string label = std::string(wide ? "wide" : "narrow") + (sk == Tri::On ? "-splitk" : "");
              bench_gemv(s, copy, DType::Q4_0, sh, Prologue::None, Epilogue::Store, label.c_str());
            }
        }
      set_gemv_wide(false);
      set_gemv_split_k(Tri::Auto);
      return 0;
    }
    // `cuda_bench_gemv --timeline`: only the decode chains' launch timelines (Q4_0, 8B and 0.6B,
    // positions 0 and 1023), after the resolution of the timer they are read from.
    if (argc > 1 && std::string(argv[1]) == "--timeline") {
      unsigned long long* tick = nullptr;
      CUDA_CHECK(cudaMalloc(&tick, 8));
      timer_tick<<<1, 1, 0, s>>>(tick);
      CUDA_CHECK(cudaStreamSynchronize(s));
      unsigned long long h = 0;
      CUDA_CHECK(cudaMemcpy(&h, tick, 8, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(tick));
      std::printf("globaltimer: smallest step seen %llu ns\n", h);
      auto timed_chains = [&] {  // both models at positions 0, 64, 1023, timed
        for (int pos : {0, 64, 1023}) {
          bench_decode_chain(s, copy, q8b, DType::Q4_0, pos);
          bench_decode_chain(s, copy, q06, DType::Q4_0, pos);
        }
      };
      for (int pos : {0, 64, 1023}) {
        bench_decode_chain(s, copy, q8b, DType::Q4_0, pos, true);
        bench_decode_chain(s, copy, q06, DType::Q4_0, pos, true);
      }
      // The same at pos 0 with the short kernels triggering after their wait (knob
      // LMFUSE_PDL_EARLY_TRIGGER=0), then the timed chains both ways.
      set_pdl_early_trigger(0);
      std::printf("pdl_early_trigger=0:\n");
      bench_decode_chain(s, copy, q8b, DType::Q4_0, 0, true);
      bench_decode_chain(s, copy, q06, DType::Q4_0, 0, true);
      bench_decode_chain(s, copy, q8b, DType::Q4_0, 64, true);
      timed_chains();
      set_pdl_early_trigger(kEarlyAll);
      std::printf("pdl_early_trigger=1:\n");
      timed_chains();
      return 0;
    }
    // `cuda_bench_gemv --chain 8b|4b|0.6b POS [timeline]`: only that Q4_0 decode chain, timed (a
    // short run for a profiler, e.g. scripts/gpu_ncu.sh on the attention kernels), or its launch
    // timeline (POS up to 4095).
    if (argc > 3 && std::string(argv[1]) == "--chain") {
      const std::string mn = argv[2];
      const ModelShape& m = mn == "8b" ? q8b : mn == "4b" ? q4b : q06;
      // The early trigger as the backend picks it for this model (LMFUSE_PDL_EARLY_TRIGGER).
      set_pdl_early_trigger(pdl_early_mask(Knobs::from_env().pdl_early_trigger, m.hidden));
      bench_decode_chain(s, copy, m, DType::Q4_0, std::atoi(argv[3]), argc > 4 && std::string(argv[4]) == "timeline");
      return 0;
    }
    // `cuda_bench_gemv SUBSTR`: only the Q4_0 plain GEMVs whose shape name contains SUBSTR (a short
    // run for a profiler, e.g. ncu --launch-skip 40 --launch-count 1).
    if (argc > 1) {
      // (block width and activation codes from the knobs: LMFUSE_GEMV_WIDE, LMFUSE_CUDA_ACT16)
      const Knobs kn = Knobs::from_env();
      set_gemv_wide(tri_resolve(kn.gemv_wide, false));
      set_gemv_act16(tri_resolve(kn.cuda_act16, kCudaAct16Auto));
      for (const auto* set : {&s8, &s4, &s06})
        for (const auto& sh : *set)
          if (std::string(sh.name).find(argv[1]) != std::string::npos)
            bench_gemv(s, copy, DType::Q4_0, sh, Prologue::None, Epilogue::Store, "plain");
      return 0;
    }
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16}) {
      for (const auto& sh : s8) bench_gemv(s, copy, t, sh, Prologue::None, Epilogue::Store, "plain");
      for (const auto& sh : s06) bench_gemv(s, copy, t, sh, Prologue::None, Epilogue::Store, "plain");
    }
    // In-block split-K (set_gemv_split_k; knob LMFUSE_GEMV_SPLIT_K) on the same Q4_0 shapes.
    set_gemv_split_k(Tri::On);
    for (const auto& sh : s8) bench_gemv(s, copy, DType::Q4_0, sh, Prologue::None, Epilogue::Store, "plain-splitk");
    for (const auto& sh : s06) bench_gemv(s, copy, DType::Q4_0, sh, Prologue::None, Epilogue::Store, "plain-splitk");
    set_gemv_split_k(Tri::Off);
    for (const auto& sh : s8) bench_gemv(s, copy, DType::Q4_0, sh, Prologue::None, Epilogue::Store, "plain-nosplit");
    set_gemv_split_k(Tri::Auto);
    // Blocks per SM (set_gemv_coresident; knob LMFUSE_GEMV_CORESIDENT): every shape with one
    // block per SM (room for the next launch's blocks beside it) and with as many as fit (2 for
    // Q4_0, the automatic choice used by the rows above).
    for (Tri mode : {Tri::On, Tri::Off}) {
      set_gemv_coresident(mode);
      const char* label = mode == Tri::On ? "plain-1blk" : "plain-2blk";
      for (const auto& sh : s8) bench_gemv(s, copy, DType::Q4_0, sh, Prologue::None, Epilogue::Store, label);
      for (const auto& sh : s06) bench_gemv(s, copy, DType::Q4_0, sh, Prologue::None, Epilogue::Store, label);
      bench_decode_chain(s, copy, q8b, DType::Q4_0, 0);
      bench_decode_chain(s, copy, q06, DType::Q4_0, 0);
    }
    set_gemv_coresident(Tri::Auto);
    // Fused variants (Q4_0): the prologue/epilogue cost on top of the plain GEMV.
    bench_gemv(s, copy, DType::Q4_0, s8[0], Prologue::AddNorm, Epilogue::Store, "addnorm");
    bench_gemv(s, copy, DType::Q4_0, s8[2], Prologue::Norm, Epilogue::SiluMul, "norm+silu");
    bench_gemv(s, copy, DType::Q4_0, s8[3], Prologue::None, Epilogue::Residual, "residual");

    const double empty_ms = time_graph(s, [&] { for (int i = 0; i < 200; ++i) empty_kernel<<<1, 32, 0, s>>>(); }, 10) / 200;
    std::printf("empty kernel in a graph: %.2f us per launch\n", empty_ms * 1e3);

    for (int pos : {0, 1023}) {
      bench_decode_chain(s, copy, q8b, DType::Q4_0, pos);
      bench_decode_chain(s, copy, q06, DType::Q4_0, pos);
    }
    bench_decode_chain(s, copy, q8b, DType::Q8_0, 1023);
    bench_decode_chain(s, copy, q8b, DType::BF16, 1023);
    // The same chains without programmatic dependent launch (the overlap it buys).
    set_programmatic_launch(false);
    std::printf("without PDL:\n");
    bench_decode_chain(s, copy, q8b, DType::Q4_0, 1023);
    bench_decode_chain(s, copy, q06, DType::Q4_0, 1023);
    set_programmatic_launch(true);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

// The prefill routing sweep (issue 6): for every projection shape of qwen3-0.6b .. 32b
// (src/model/presets.cpp) and M = 2 .. 16384 tokens, times the two prefill routes of prefill.h
// on the same weight and activations:
//   outer     : activations -> fp16, weight -> fp16 scratch, cuBLAS GEMM (matmul_prefill Outer)
//   in-kernel : activations -> int8 blocks, int8 tensor-core GEMM on the packed weight (InKernel)
//   gemv      : (M <= 16 only) the decode GEMV once per token, for the small-M question
// Shapes: qkv (Q|K|V), o, gate (one of gate/up, unfused), gu (gate|up fused), down.
// and prints one row per (shape, M) with the times, the winner, the fitted rule's choice and the
// tuner's choice (PrefillTuner, prefill_tune.h: the backend's default, timed per shape before the
// row's own timing) and what each loses against the better forced route. Weights rotate through enough copies to exceed the 50 MB L2
// (in a model each weight is read once per prefill run, cold). Also measures the cuBLAS bf16
// GEMM peak (8192^3) that prefill figures are reported against.
//
// Usage: cuda_bench_prefill [--type q4_0|q4_1|q8_0] [--models a,b] [--m 2,16,512] [--reps N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill.h"
#include "backend/cuda/prefill_tune.h"
#include "cuda_bench_util.cuh"

using namespace lmf;
using namespace lmf::cuda;

namespace {

using bench::random_weight;

struct Shape {
  const char* model;
  const char* name;
  int64_t n, k;
};

// From src/model/presets.cpp: hidden, heads, kv heads, head_dim 128, ff.
std::vector<Shape> shapes_for(const std::string& model) {
  struct P {
    const char* name;
    int64_t hidden, heads, kv, ff;
  };
  static const P ps[] = {{"qwen3-0.6b", 1024, 16, 8, 3072},  {"qwen3-1.7b", 2048, 16, 8, 6144},
                         {"qwen3-4b", 2560, 32, 8, 9728},    {"qwen3-8b", 4096, 32, 8, 12288},
                         {"qwen3-14b", 5120, 40, 8, 17408},  {"qwen3-32b", 5120, 64, 8, 25600}};
  for (const auto& p : ps)
    if (model == p.name) {
      const int64_t q = p.heads * 128, kv = p.kv * 128;
      return {{p.name, "qkv", q + 2 * kv, p.hidden},
              {p.name, "o", p.hidden, q},
              {p.name, "gate", p.ff, p.hidden},
              {p.name, "gu", 2 * p.ff, p.hidden},  // gate|up as one product (prefill gate/up fusion)
              {p.name, "down", p.hidden, p.ff}};
    }
  std::fprintf(stderr, "unknown model %s\n", model.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  DType type = DType::Q4_0;
  std::vector<std::string> models = {"qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b"};
  std::vector<int64_t> Ms = {2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--type") {
      if (v != "q4_0" && v != "q4_1" && v != "q8_0") {
        std::fprintf(stderr, "--type: expected q4_0, q4_1 or q8_0, got '%s'\n", v.c_str());
        return 2;
      }
      type = v == "q4_1" ? DType::Q4_1 : v == "q8_0" ? DType::Q8_0 : DType::Q4_0;
    } else if (a == "--models") {
      models = split(v);
    } else if (a == "--m") {
      Ms.clear();
      for (auto& x : split(v)) Ms.push_back(std::stoll(x));
    } else if (a == "--reps") {
      reps = std::stoi(v);
    } else {
      std::fprintf(stderr, "unknown option %s (--type, --models, --m, --reps)\n", a.c_str());
      return 2;
    }
  }
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  GemmHandle* gh = gemm_create(s);
  const double peak = gemm_bf16_peak_flops(gh, s) / 1e12;
  std::printf("# device %s, cuBLAS bf16 GEMM 8192^3: %.1f TFLOP/s\n", prop.name, peak);
  std::printf("# type %s; times in us (median of %d); rule = prefill_route_auto; loss = rule / min(outer, in-kernel) - 1\n",
              dtype_name(type), reps);
  std::printf("%-11s %-5s %6s %6s %6s %10s %10s %10s %-9s %-9s %6s %-9s %6s %8s\n", "model", "shape", "N", "K", "M",
              "outer", "in-kernel", "gemv", "best", "rule", "loss%", "tuned", "loss%", "TFLOP/s");

  const int64_t maxM = *std::max_element(Ms.begin(), Ms.end());
  int64_t maxK = 0;
  for (auto& m : models)
    for (auto& sh : shapes_for(m)) maxK = std::max(maxK, sh.k);
  // Scratch as the backend sizes it (prefill.h), for maxM tokens.
  PrefillScratch sc;
  sc.x_elems = size_t(2 * maxM * maxK);
  sc.w_elems = size_t(2) * 25600 * 5120;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sc.x), sc.x_elems * 2));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sc.w), sc.w_elems * 2));
  const int64_t nb4 = mmq_nblk4(maxK);
  sc.xq_bytes = size_t(maxM * nb4 * 32);
  sc.xd_elems = size_t(maxM * nb4);
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sc.xq), sc.xq_bytes));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sc.xd), sc.xd_elems * 4));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sc.xs), sc.xd_elems * 4));
  float *x = nullptr, *y = nullptr;
  CUDA_CHECK(cudaMalloc(&x, size_t(maxM * maxK) * 4));
  fill_random_f32(x, size_t(maxM * maxK), 7);
  size_t maxN = 0;
  for (auto& m : models)
    for (auto& sh : shapes_for(m)) maxN = std::max(maxN, size_t(sh.n));
  CUDA_CHECK(cudaMalloc(&y, maxN * size_t(maxM) * 4));

  int worse = 0, rows = 0, worse_tuned = 0;
  double worst_loss = 0, worst_tuned = 0;
  for (auto& model : models) {
    for (auto& sh : shapes_for(model)) {
      const size_t wbytes = bench::packed_bytes(type, sh.n, sh.k);
      const int copies = int(std::max<size_t>(1, (size_t(160) << 20) / wbytes + 1));
      std::vector<DeviceWeight> ws;
      for (int c = 0; c < std::min(copies, 8); ++c) ws.push_back(random_weight(type, sh.n, sh.k, 11 + c));
      int rot = 0;
      PrefillTuner tuner;  // fresh per shape, as a backend meets the shape
      std::vector<const DeviceWeight*> wcopies;
      for (auto& w : ws) wcopies.push_back(&w);
      for (int64_t M : Ms) {
        PrefillMatmul tm;
        tm.w = &ws[0];
        tm.x = x;
        tm.T = M;
        tm.y = y;
        const PrefillRoute tuned = tuner.route(gh, tm, wcopies, sc, s);
        auto time_route = [&](int route) {  // 0 outer, 1 in-kernel, 2 gemv per token
          auto once = [&] {
            const DeviceWeight& w = ws[size_t(rot++ % int(ws.size()))];
            if (route == 2) {
              for (int64_t t = 0; t < M; ++t) {
                GemvArgs ga;
                ga.w = &w;
                ga.in = x + t * sh.k;
                ga.y = y + t * sh.n;
                gemv(Prologue::None, Epilogue::Store, ga, s);
              }
              return;
            }
            PrefillMatmul mm;
            mm.w = &w;
            mm.x = x;
            mm.T = M;
            mm.y = y;
            matmul_prefill(gh, mm, sc, route == 1 ? PrefillRoute::InKernel : PrefillRoute::Outer, s);
          };
          once();
          // GPU time only (queued behind a spin), as the tuner measures (prefill.h gpu_spin).
          return gpu_median_ms(s, reps, once, kTimingSpinUs) * 1000.0;
        };
        const double to = time_route(0), ti = time_route(1), tg = M <= 16 ? time_route(2) : 0.0;
        const PrefillRoute rule = prefill_route_auto(type, sh.n, sh.k, M);
        double best = std::min(to, ti);
        const char* bname = ti <= to ? "in-kernel" : "outer";
        if (tg > 0 && tg < best) {
          best = tg;
          bname = "gemv";
        }
        const double tr = rule == PrefillRoute::InKernel ? ti : rule == PrefillRoute::Gemv && tg > 0 ? tg : to;
        // The issue's measure: against the better of the two forced routes (knob 1 / knob 0).
        const double loss = (tr / std::min(to, ti) - 1) * 100;
        worst_loss = std::max(worst_loss, loss);
        worse += loss > 3.0;
        const double tt = tuned == PrefillRoute::InKernel ? ti : tuned == PrefillRoute::Gemv && tg > 0 ? tg : to;
        const double tloss = (tt / std::min(to, ti) - 1) * 100;
        worst_tuned = std::max(worst_tuned, tloss);
        worse_tuned += tloss > 3.0;
        ++rows;
        std::printf("%-11s %-5s %6lld %6lld %6lld %10.1f %10.1f %10.1f %-9s %-9s %6.1f %-9s %6.1f %8.1f\n", sh.model,
                    sh.name, (long long)sh.n, (long long)sh.k, (long long)M, to, ti, tg, bname, route_name(rule), loss,
                    route_name(tuned), tloss, 2.0 * sh.n * sh.k * M / (std::min(to, ti) * 1e-6) / 1e12);
        std::fflush(stdout);
      }
      for (auto& w : ws) {
        cudaFree(const_cast<uint8_t*>(w.q));
        cudaFree(const_cast<uint8_t*>(w.scales));
      }
    }
  }
  std::printf("# %d of %d rows: the rule loses > 3%% against the better forced route (outer, in-kernel); worst %.1f%%\n",
              worse, rows, worst_loss);
  std::printf("# %d of %d rows: the tuner loses > 3%% against the better forced route; worst %.1f%%\n", worse_tuned,
              rows, worst_tuned);
  gemm_destroy(gh);
  return 0;
}

// CPU matmul micro-benchmarks on Qwen3-0.6B projection shapes (rows x cols):
// q 2048x1024, k/v 1024x1024, o 1024x2048, gate/up 3072x1024, down 1024x3072.
// GEMV (T=1) is bound by reading the weights: the "GB/s" counter is weight bytes per second.
// Each iteration reads a different copy of the weight (copies totalling >= 256 MiB), so the
// weights come from DRAM as in a real decode step, not from the last-level cache.
// GEMM (T>1) reports tokens/s and effective GFLOP/s too.
//   bench_matmul --benchmark_filter=q4_0   (env LMFUSE_CPU_ISA, LMFUSE_BENCH_THREADS=1|2|...,
//   LMFUSE_BENCH_HOT=1, LMFUSE_BENCH_ACT16=1)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "format/quant/quantize.h"

namespace {

using namespace lmf;

struct Shape {
  const char* name;
  int64_t rows, cols;
};
const Shape kShapes[] = {{"q", 2048, 1024}, {"kv", 1024, 1024}, {"o", 1024, 2048},
                         {"gate_up", 3072, 1024}, {"down", 1024, 3072}};

ThreadPool& pool() {
  static ThreadPool p([] {
    const char* e = std::getenv("LMFUSE_BENCH_THREADS");
    return e ? std::atoi(e) : 0;
  }());
  return p;
}

// LMFUSE_BENCH_ACT16=1: 16-bit activation blocks (the engine's default, knob cpu_act16).
cpu::ActBits act_bits() {
  const char* e = std::getenv("LMFUSE_BENCH_ACT16");
  return e && std::atoi(e) == 1 ? cpu::ActBits::Int16 : cpu::ActBits::Int8;
}

struct Fixture {
  std::vector<uint8_t> bytes;  // all copies, back to back
  std::vector<Weight> w;       // one per copy
  size_t weight_bytes = 0;
};

std::unique_ptr<Fixture> make(DType t, int64_t rows, int64_t cols) {
  auto f = std::make_unique<Fixture>();
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t rb = row_bytes(t, cols), wb = rb * size_t(rows);
  // LMFUSE_BENCH_HOT=1: one copy, read from cache (kernel speed without DRAM).
  const bool hot = std::getenv("LMFUSE_BENCH_HOT") && std::atoi(std::getenv("LMFUSE_BENCH_HOT")) == 1;
  const size_t copies = hot ? 1 : std::max<size_t>(2, (size_t(256) << 20) / wb);
  f->weight_bytes = wb;
  f->bytes.resize(wb * copies);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = g(rng);
    quantize_row(t, row.data(), f->bytes.data() + size_t(r) * rb, cols);
  }
  for (size_t c = 0; c < copies; ++c) {
    if (c) std::memcpy(f->bytes.data() + c * wb, f->bytes.data(), wb);
    Weight w;
    w.type = t;
    w.rows = rows;
    w.cols = cols;
    w.data = f->bytes.data() + c * wb;
    w.nbytes = wb;
    f->w.push_back(w);
  }
  return f;
}

void BM_matmul(benchmark::State& st, DType type, Shape s, int64_t T) {
  auto f = make(type, s.rows, s.cols);
  std::vector<float> x(static_cast<size_t>(T * s.cols)), y(static_cast<size_t>(T * s.rows));
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& v : x) v = g(rng);
  cpu::MatmulScratch scratch;
  size_t c = 0;
  // LMFUSE_BENCH_X16=1: Q4_0 / Q4_K weights repacked in 16-row panels (backend/cpu/repack.h).
  std::vector<cpu::X16Weight> x16;
  if (std::getenv("LMFUSE_BENCH_X16") && std::atoi(std::getenv("LMFUSE_BENCH_X16")) == 1)
    for (const Weight& w : f->w)
      if (cpu::x16_supported(w)) x16.push_back(cpu::repack_x16(w));
  for (auto _ : st) {
    cpu::MatmulTask task{&f->w[c], y.data(), s.rows, nullptr, x16.empty() ? nullptr : &x16[c]};
    c = (c + 1) % f->w.size();
    cpu::matmul({&task, 1}, x.data(), T, s.cols, pool(), scratch, cpu::active_isa(), act_bits());
    benchmark::DoNotOptimize(y.data());
  }
  const double it = double(st.iterations());
  st.counters["GB/s"] = benchmark::Counter(it * double(f->weight_bytes) / 1e9, benchmark::Counter::kIsRate);
  st.counters["tok/s"] = benchmark::Counter(it * double(T), benchmark::Counter::kIsRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(it * 2.0 * double(T * s.rows * s.cols) / 1e9, benchmark::Counter::kIsRate);
  st.SetLabel(std::string(cpu::isa_name(cpu::active_isa())) + " threads=" + std::to_string(pool().size()) +
              (act_bits() == cpu::ActBits::Int16 ? " act16" : ""));
}

int register_all() {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (const Shape& s : kShapes)
      for (int64_t T : {1, 2, 4, 8, 16, 32, 64, 512}) {
        const bool unit_k = t == DType::Q4_K || t == DType::Q6_K;  // the two types of a Q4_K_M file
        if (T > 1 && t != DType::Q4_0 && t != DType::F16 && !unit_k) continue;
        if ((T == 2 || T == 4) && t != DType::Q4_K && t != DType::Q4_0) continue;  // batched decode rows
        if (T == 512 && t != DType::Q4_0 && !unit_k) continue;  // prefill shape (pp512)
        const std::string name = std::string(dtype_name(t)) + "/" + s.name + "/" +
                                 std::to_string(s.rows) + "x" + std::to_string(s.cols) + "/T" +
                                 std::to_string(T);
        // On a shared machine the best repetition is the meaningful one: with
        // --benchmark_repetitions=N, read the "_max" row for GB/s (and "_min" for time).
        benchmark::RegisterBenchmark(name.c_str(), BM_matmul, t, s, T)
            ->UseRealTime()
            ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); })
            ->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
      }
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();

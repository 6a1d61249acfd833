// Measured prefill routes (issue 6, item 3): which route (prefill.h) each product shape takes at
// T tokens, timed on this GPU instead of read from a fitted rule.
//
// Why: the fitted rule prefill_route_auto lost up to 19 % against the better forced route at the
// crossovers of the H200 sweep (docs/PERF.md), because where in-kernel and outer cross depends on
// the shape, the epilogue and the GPU in ways three size buckets do not capture. The tuner times
// the routes the first time a product shape is run at a T it has not seen: it measures the two
// points of a fixed T grid that bracket T (T itself when it is a grid point) and keeps them for
// the life of the backend, so each shape costs a few milliseconds once, and a given process picks
// the same route for the same (shape, T) every time (routes differ in rounding, not in meaning:
// prefill.h "Outer route precision").
//
// Measurement: the product exactly as it will run (weight type and shape, row range, bias,
// residual and SiLU-pairs epilogues), on scratch inputs of random values, rotating through every
// layer's copy of the weight so that each timed run reads its weight from DRAM as a forward pass
// does; one warm-up, then the median of 5 runs timed with CUDA events, per route. Each timed run
// is queued behind a 150 µs spin kernel (gpu_spin), so the events see the GPU's time only: in a
// forward pass the host runs ahead of the GPU, and host launch jitter (~5-20 µs at the small
// shapes, first measured as route "noise") must not decide the route. Between grid
// points each route's time is interpolated linearly in T and the faster is taken; above the last
// grid point the winner at the last point is kept (from there the dequantization pass is
// amortized and the vendor GEMM's rate decides).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/prefill.h"

namespace lmf::cuda {

class PrefillTuner {
 public:
  PrefillTuner() = default;
  PrefillTuner(const PrefillTuner&) = delete;
  PrefillTuner& operator=(const PrefillTuner&) = delete;
  ~PrefillTuner();

  // The faster route for m (m.w, m.T and the epilogue flags; m.x / m.y / m.residual are not
  // touched). copies: every weight of m.w's type and shape (m.w among them), rotated while timing.
  // Launches and synchronizes on s the first time a (shape, grid point) is needed; sc is the
  // caller's prefill scratch, clobbered by the timing runs.
  PrefillRoute route(GemmHandle* g, const PrefillMatmul& m, const std::vector<const DeviceWeight*>& copies,
                     const PrefillScratch& sc, cudaStream_t s);
  // One line per measured (shape, T): "type NxK [flags] T=..: outer .. in-kernel .. gemv .. us".
  std::string report() const;
  // T values that are measured (ascending).
  static const std::vector<int64_t>& grid();

 private:
  using Key = std::tuple<int, int64_t, int64_t, int64_t, bool, bool, bool>;  // type, rows, cols, n, silu, resid, bias
  struct Point {
    double us[3] = {-1.0, -1.0, -1.0};  // by PrefillRoute (Outer, InKernel, Gemv); < 0: cannot take it
  };
  const Point& measure(GemmHandle* g, const PrefillMatmul& m, const std::vector<const DeviceWeight*>& copies,
                       const PrefillScratch& sc, cudaStream_t s, const Key& key, int64_t T);
  void ensure_buffers(size_t x_elems, size_t y_elems, cudaStream_t s);

  std::map<Key, std::map<int64_t, Point>> table_;
  float* x_ = nullptr;  // [T][cols] random activations
  float* y_ = nullptr;  // [T][n] output
  float* r_ = nullptr;  // [T][n] residual input
  size_t x_elems_ = 0, y_elems_ = 0;
  int rot_ = 0;
};

}  // namespace lmf::cuda

// PrefillTuner (prefill_tune.h): per-shape route timing at the T grid points around each T.
#include "backend/cuda/prefill_tune.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "backend/cuda/cuda_check.h"

namespace lmf::cuda {

namespace {
constexpr int kReps = 5;  // timed runs per route and point (median)
// GEMV once per token grows linearly in T: past this it never wins on the sweep (docs/PERF.md:
// at T = 8 it is already 1.5-2x the other routes on every shape), so it is not timed.
constexpr int64_t kGemvMaxT = 8;
}  // namespace

const std::vector<int64_t>& PrefillTuner::grid() {
  static const std::vector<int64_t> g = {2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512};
  return g;
}

PrefillTuner::~PrefillTuner() {
  cudaFree(x_);
  cudaFree(y_);
  cudaFree(r_);
}

void PrefillTuner::ensure_buffers(size_t x_elems, size_t y_elems, cudaStream_t s) {
  if (x_elems > x_elems_) {
    CUDA_CHECK(cudaStreamSynchronize(s));
    cudaFree(x_);
    x_ = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&x_), x_elems * sizeof(float)));
    x_elems_ = x_elems;
    fill_random_f32(x_, x_elems, 0x5eedu, s);
  }
  if (y_elems > y_elems_) {
    CUDA_CHECK(cudaStreamSynchronize(s));
    cudaFree(y_);
    cudaFree(r_);
    y_ = r_ = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&y_), y_elems * sizeof(float)));
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&r_), y_elems * sizeof(float)));
    y_elems_ = y_elems;
    fill_random_f32(r_, y_elems, 0x7e57u, s);
  }
}

const PrefillTuner::Point& PrefillTuner::measure(GemmHandle* g, const PrefillMatmul& m,
                                                 const std::vector<const DeviceWeight*>& copies,
                                                 const PrefillScratch& sc, cudaStream_t s, const Key& key, int64_t T) {
  auto& pts = table_[key];
  auto it = pts.find(T);
  if (it != pts.end()) return it->second;
  const int64_t n = m.n > 0 ? m.n : m.w->rows;
  ensure_buffers(size_t(T * m.w->cols), size_t(T * n), s);
  PrefillMatmul t = m;
  t.T = T;
  t.x = x_;
  t.y = y_;
  t.residual = m.residual ? r_ : nullptr;
  Point p;
  for (PrefillRoute r : {PrefillRoute::Outer, PrefillRoute::InKernel, PrefillRoute::Gemv}) {
    if (r == PrefillRoute::Gemv && T > kGemvMaxT) continue;
    if (prefill_usable_route(t, r) != r) continue;  // this product cannot take the route
    auto once = [&] {
      t.w = copies.empty() ? m.w : copies[size_t(rot_++) % copies.size()];
      matmul_prefill(g, t, sc, r, s);
    };
    // Queued behind a spin: the events time the GPU alone (prefill_tune.h).
    p.us[int(r)] = gpu_median_ms(s, kReps, once, kTimingSpinUs) * 1e3;
  }
  return pts.emplace(T, p).first->second;
}

PrefillRoute PrefillTuner::route(GemmHandle* g, const PrefillMatmul& m, const std::vector<const DeviceWeight*>& copies,
                                 const PrefillScratch& sc, cudaStream_t s) {
  if (!mmq_supported(m.w->type) || m.T < 2) return prefill_usable_route(m, PrefillRoute::Outer);
  const int64_t n = m.n > 0 ? m.n : m.w->rows;
  const Key key{int(m.w->type), m.w->rows, m.w->cols, n, m.silu_pairs, m.residual != nullptr, m.bias != nullptr};
  const auto& gr = grid();
  const int64_t T = std::min(m.T, gr.back());
  const auto hi_it = std::lower_bound(gr.begin(), gr.end(), T);  // first grid point >= T
  const int64_t b = *hi_it, a = *hi_it == T ? T : *(hi_it - 1);
  const Point pa = measure(g, m, copies, sc, s, key, a);
  const Point pb = measure(g, m, copies, sc, s, key, b);
  PrefillRoute best = PrefillRoute::Outer;
  double best_us = -1.0;
  for (int r = 0; r < 3; ++r) {
    if (pa.us[r] < 0 || pb.us[r] < 0) continue;
    const double f = b == a ? 0.0 : double(T - a) / double(b - a);
    const double us = pa.us[r] + f * (pb.us[r] - pa.us[r]);
    if (best_us < 0 || us < best_us) {
      best_us = us;
      best = PrefillRoute(r);
    }
  }
  return best;
}

std::string PrefillTuner::report() const {
  std::ostringstream o;
  char buf[256];
  for (const auto& [k, pts] : table_) {
    const auto& [type, rows, cols, n, silu, resid, bias] = k;
    for (const auto& [T, p] : pts) {
      std::snprintf(buf, sizeof buf, "%s %lldx%lld n %lld%s%s%s T=%lld: outer %.1f in-kernel %.1f gemv %.1f us\n",
                    dtype_name(DType(type)), (long long)rows, (long long)cols, (long long)n, silu ? " silu" : "",
                    resid ? " resid" : "", bias ? " bias" : "", (long long)T, p.us[0], p.us[1], p.us[2]);
      o << buf;
    }
  }
  return o.str();
}

}  // namespace lmf::cuda

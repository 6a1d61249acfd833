// GEMV dispatch: argument validation, grid sizing, and the per-type instance launchers.
#include <atomic>
#include <mutex>
#include <map>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_grid.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels/gemv_launch.cuh"

namespace lmf::cuda {
namespace dev {
int launch_gemv_q4_0(Prologue, Epilogue, const GemvParams&, bool, bool, cudaStream_t);
int launch_gemv_q4_1(Prologue, Epilogue, const GemvParams&, bool, bool, cudaStream_t);
int launch_gemv_q8_0(Prologue, Epilogue, const GemvParams&, bool, bool, cudaStream_t);
int launch_gemv_f16(Prologue, Epilogue, const GemvParams&, bool, bool, cudaStream_t);
int launch_gemv_bf16(Prologue, Epilogue, const GemvParams&, bool, bool, cudaStream_t);
int launch_gemv_q4_k(Prologue, Epilogue, const GemvParams&, bool, bool, cudaStream_t);
int launch_gemv_q5_k(Prologue, Epilogue, const GemvParams&, bool, bool, cudaStream_t);
int launch_gemv_q6_k(Prologue, Epilogue, const GemvParams&, bool, bool, cudaStream_t);

// Blocks of an instance (`threads` per block) resident per SM with `smem` bytes of dynamic
// shared memory (0: does not fit), cached per (instance, smem).
static int gemv_occupancy(const void* func, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<const void*, size_t>, int> occ_cache;
  std::lock_guard<std::mutex> lk(mu);
  auto it = occ_cache.find({func, smem});
  if (it != occ_cache.end()) return it->second;
  int occ = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, func, threads, smem));
  occ_cache[{func, smem}] = occ;
  return occ;
}

// The grid of a launch (gemv_grid.h gemv_grid_plan): the shape's row groups and batches, the
// instance's occupancy, the launch's spare / fit SMs and blocks per SM.
GemvGrid gemv_grid(const void* func, int threads, int rows, size_t smem, int rg_batches, const GemvParams& p) {
  GemvGridShape g;
  g.sms = device_sm_count();
  g.occ = std::max(1, gemv_occupancy(func, threads, smem));
  g.warps = threads / 32;
  g.row_groups = (rows + kRows - 1) / kRows;
  g.rg_batches = rg_batches;
  g.coresident = p.coresident == Tri::Auto ? gemv_coresident_mode() : p.coresident;
  return gemv_grid_plan(g, p.spare_sms, p.spare_same_rounds, p.fit_sms);
}
}  // namespace dev

namespace {
std::atomic<bool> g_pdl{true};
std::atomic<int> g_split_k{int(Tri::Auto)};
std::atomic<int> g_coresident{int(Tri::Auto)};
std::atomic<int> g_pdl_early{kEarlyAll};
std::atomic<bool> g_wide{false};
std::atomic<bool> g_act16{false};
std::atomic<bool> g_keep_x{kGemvKeepXAuto};
std::atomic<bool> g_split3{kGemvSplit3Auto};
}  // namespace
void set_gemv_split3(bool on) { g_split3.store(on, std::memory_order_relaxed); }
bool gemv_split3() { return g_split3.load(std::memory_order_relaxed); }
void set_gemv_keep_x(bool on) { g_keep_x.store(on, std::memory_order_relaxed); }
bool gemv_keep_x() { return g_keep_x.load(std::memory_order_relaxed); }
void set_gemv_wide(bool on) { g_wide.store(on, std::memory_order_relaxed); }
bool gemv_wide() { return g_wide.load(std::memory_order_relaxed); }
void set_gemv_act16(bool on) { g_act16.store(on, std::memory_order_relaxed); }
bool gemv_act16() { return g_act16.load(std::memory_order_relaxed); }
bool gemv_runs_wide(DType t, Tri wide) {
  return int8_dot(t) && (wide == Tri::Auto ? gemv_wide() : wide == Tri::On);
}
int dev::pdl_early_trigger() { return g_pdl_early.load(std::memory_order_relaxed); }
void set_pdl_early_trigger(int mask) { g_pdl_early.store(mask, std::memory_order_relaxed); }
bool dev::pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }
Tri dev::gemv_split_k_mode() { return Tri(g_split_k.load(std::memory_order_relaxed)); }
Tri dev::gemv_coresident_mode() { return Tri(g_coresident.load(std::memory_order_relaxed)); }
void set_gemv_coresident(Tri mode) { g_coresident.store(int(mode), std::memory_order_relaxed); }
void set_gemv_split_k(Tri mode) { g_split_k.store(int(mode), std::memory_order_relaxed); }
void set_programmatic_launch(bool on) { g_pdl.store(on, std::memory_order_relaxed); }

int device_sm_count() {
  static int cached_dev = -1, cached = 0;
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  if (d != cached_dev) {
    CUDA_CHECK(cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, d));
    cached_dev = d;
  }
  return cached;
}

bool gemv_supported(DType t, Prologue pro, Epilogue epi) {
  if (!int8_dot(t) && t != DType::F16 && t != DType::BF16) return false;
#define LMF_GEMV_SUPPORTED(PRO_, EPI_) \
  if (pro == Prologue::PRO_ && epi == Epilogue::EPI_) return true;
  LMF_GEMV_ALLOW_LIST_PLAIN(LMF_GEMV_SUPPORTED)
  if (int8_dot(t)) {
    LMF_GEMV_ALLOW_LIST_XQ(LMF_GEMV_SUPPORTED)
  }
#undef LMF_GEMV_SUPPORTED
  return false;
}

int gemv(Prologue pro, Epilogue epi, const GemvArgs& a, cudaStream_t s) {
  if (!a.w || !a.w->q) LMF_FAIL("cuda gemv: weight not uploaded");
  const DeviceWeight& w = *a.w;
  if (!gemv_supported(w.type, pro, epi))
    LMF_FAIL("cuda gemv: (", dtype_name(w.type), ", prologue ", int(pro), ", epilogue ",
             int(epi), ") is not in the instance allow-list");
  if (w.cols % 32 != 0 || w.cols <= 0 || w.rows <= 0)
    LMF_FAIL("cuda gemv: cols must be a positive multiple of 32, got ", w.rows, "x", w.cols);
  if (kquant(w.type) && w.cols % 256 != 0)
    LMF_FAIL("cuda gemv: ", dtype_name(w.type), " needs cols % 256 == 0, got ", w.cols);
  if (w.rows > (int64_t(1) << 30) || w.cols > (1 << 20))
    LMF_FAIL("cuda gemv: shape too large: ", w.rows, "x", w.cols);
  if (pro == Prologue::Int8 ? !a.xq : !a.in) LMF_FAIL("cuda gemv: missing input");
  if (epi == Epilogue::SiluMulQ) {
    if (!a.xq) LMF_FAIL("cuda gemv: SiluMulQ needs xq");
    if ((w.rows / 2) % 32 != 0) LMF_FAIL("cuda gemv: SiluMulQ needs rows/2 % 32 == 0, got ", w.rows);
  }
  // The staging reads the inputs (and AddNorm writes residual_out, SiluMulQ xq) in 16-byte words.
  auto misaligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) != 0; };
  if ((pro == Prologue::Int8 || epi == Epilogue::SiluMulQ) && misaligned(a.xq))
    LMF_FAIL("cuda gemv: xq must be 16-byte aligned");
  const bool norm = pro == Prologue::Norm || pro == Prologue::AddNorm;
  if (norm && !a.gamma) LMF_FAIL("cuda gemv: norm prologue needs gamma");
  if (pro == Prologue::AddNorm) {
    if (!a.residual || !a.residual_out) LMF_FAIL("cuda gemv: AddNorm needs residual and residual_out");
    if (a.residual_out == a.in || a.residual_out == a.residual)
      LMF_FAIL("cuda gemv: residual_out must not alias the inputs (other blocks still read them)");
  }
  if (misaligned(a.in) || (norm && misaligned(a.gamma)) ||
      (pro == Prologue::AddNorm && (misaligned(a.residual) || misaligned(a.residual_out))))
    LMF_FAIL("cuda gemv: input, gamma, residual and residual_out must be 16-byte aligned");
  if (epi == Epilogue::Residual && !a.y_residual) LMF_FAIL("cuda gemv: Residual needs y_residual");
  if ((epi == Epilogue::SiluMul || epi == Epilogue::SiluMulQ) && w.rows % dev::kRows != 0)
    LMF_FAIL("cuda gemv: SiluMul needs rows % ", dev::kRows, " == 0, got ", w.rows);
  if (epi != Epilogue::QKV && !a.y) LMF_FAIL("cuda gemv: missing output");
  if (epi == Epilogue::QKV) {
    const QkvParams& q = a.qkv;
    if (q.head_dim != 32 && q.head_dim != 64 && q.head_dim != 128)
      LMF_FAIL("cuda gemv QKV: head_dim must be 32, 64 or 128, got ", q.head_dim);
    if (int64_t(q.n_head + 2 * q.n_kv_head) * q.head_dim != w.rows)
      LMF_FAIL("cuda gemv QKV: rows ", w.rows, " != (n_head + 2 n_kv_head) * head_dim = ",
               int64_t(q.n_head + 2 * q.n_kv_head) * q.head_dim);
    if (!q.pos || !q.q_out || !q.k_cache || !q.v_cache || !q.raw || !q.counters || q.n_ctx <= 0)
      LMF_FAIL("cuda gemv QKV: missing pos/q_out/cache/scratch pointer");
  }
  dev::GemvParams p{};
  p.q = w.q;
  p.scales = w.scales;
  p.rows = int(w.rows);
  p.cols = int(w.cols);
  p.in = a.in;
  p.residual = a.residual;
  p.residual_out = a.residual_out;
  p.gamma = a.gamma;
  p.eps = a.eps;
  p.y = a.y;
  p.y_residual = a.y_residual;
  p.bias = a.bias;
  p.qkv = a.qkv;
  p.xq = a.xq;
  p.tl = a.tl;  // ignored by the Epilogue::QKV instances
  if (const int sms = device_sm_count(); a.spare_sms < 0 || a.spare_sms >= sms)
    LMF_FAIL("cuda gemv: spare_sms must be in [0, ", sms, "), got ", a.spare_sms);
  p.spare_sms = a.spare_sms;
  p.spare_same_rounds = a.spare_same_rounds;
  p.coresident = a.coresident;
  if (a.fit_sms < 0) LMF_FAIL("cuda gemv: fit_sms must be >= 0, got ", a.fit_sms);
  p.fit_sms = a.fit_sms;
  const bool wide = gemv_runs_wide(w.type, a.wide);
  const bool x16 = gemv_act16() && int8_dot(w.type);
  if (x16 && (pro == Prologue::Int8 || epi == Epilogue::SiluMulQ))
    LMF_FAIL("cuda gemv: 16-bit activation codes (cuda_act16) cannot take or make the 8-bit codes of "
             "Prologue::Int8 / Epilogue::SiluMulQ");
  int spare = -1;
  switch (w.type) {
    case DType::Q4_0: spare = dev::launch_gemv_q4_0(pro, epi, p, wide, x16, s); break;
    case DType::Q4_1: spare = dev::launch_gemv_q4_1(pro, epi, p, wide, x16, s); break;
    case DType::Q8_0: spare = dev::launch_gemv_q8_0(pro, epi, p, wide, x16, s); break;
    case DType::F16: spare = dev::launch_gemv_f16(pro, epi, p, wide, x16, s); break;
    case DType::BF16: spare = dev::launch_gemv_bf16(pro, epi, p, wide, x16, s); break;
    case DType::Q4_K: spare = dev::launch_gemv_q4_k(pro, epi, p, wide, x16, s); break;
    case DType::Q5_K: spare = dev::launch_gemv_q5_k(pro, epi, p, wide, x16, s); break;
    case DType::Q6_K: spare = dev::launch_gemv_q6_k(pro, epi, p, wide, x16, s); break;
    default: break;
  }
  LMF_CHECK(spare >= 0, "gemv instance missing");
  return spare;
}

size_t gemv_xq_bytes(int64_t cols) { return size_t(cols / 32) * 40; }

unsigned* qkv_counters_alloc(int n_head, int n_kv_head) {
  unsigned* c = nullptr;
  const size_t n = size_t(n_head + 2 * n_kv_head);
  CUDA_CHECK(cudaMalloc(&c, n * sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(c, 0, n * sizeof(unsigned)));
  return c;
}

DeviceWeight upload_weight(const HostPacked& h, cudaStream_t s) {
  DeviceWeight w;
  w.type = h.type;
  w.rows = h.rows;
  w.cols = h.cols;
  w.q_bytes = h.q.size();
  w.scale_bytes = h.scales.size();
  uint8_t* q = nullptr;
  uint8_t* sc = nullptr;
  CUDA_CHECK(cudaMalloc(&q, w.q_bytes));
  CUDA_CHECK(cudaMemcpyAsync(q, h.q.data(), w.q_bytes, cudaMemcpyHostToDevice, s));
  if (w.scale_bytes) {
    CUDA_CHECK(cudaMalloc(&sc, w.scale_bytes));
    CUDA_CHECK(cudaMemcpyAsync(sc, h.scales.data(), w.scale_bytes, cudaMemcpyHostToDevice, s));
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  w.q = q;
  w.scales = sc;
  return w;
}

void free_weight(DeviceWeight& w) {
  if (w.q) CUDA_CHECK(cudaFree(const_cast<uint8_t*>(w.q)));
  if (w.scales) CUDA_CHECK(cudaFree(const_cast<uint8_t*>(w.scales)));
  w.q = w.scales = nullptr;
}

}  // namespace lmf::cuda

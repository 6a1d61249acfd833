// Shared helpers of the CUDA op tests: device buffers with NaN guard zones, random GGUF weights,
// double-precision references.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "format/quant/half.h"
#include "format/quant/kquants.h"
#include "format/quant/quantize.h"
#include "format/quant/types.h"
#include "util/status.h"

namespace lmfct_cuda {
using namespace lmf;

constexpr size_t kGuard = 256;  // bytes of 0xFF (a NaN pattern) on each side of every buffer

// The arguments of one GEMV launch with its prologue's inputs (in, residual, gamma), AddNorm's
// residual_out and the output y set; the rest (epilogue inputs, grid settings) as GemvArgs has them.
inline lmf::cuda::GemvArgs prologue_args(const lmf::cuda::DeviceWeight& w, const float* in, const float* residual,
                                         float* residual_out, const float* gamma, float* y) {
  lmf::cuda::GemvArgs a;
  a.w = &w;
  a.in = in;
  a.residual = residual;
  a.residual_out = residual_out;
  a.gamma = gamma;
  a.y = y;
  return a;
}

// Puts a process-wide switch of kernels.h (set_gemv_keep_x, set_gemv_wide, ...) back to the value
// it had when the scope began, however the scope ends.
struct SwitchRestore {
  void (*set)(bool);
  bool before;
  ~SwitchRestore() { set(before); }
};

// Device buffer of n T's inside guard zones; the whole allocation starts as 0xFF bytes, so an
// element never written reads as NaN ("poisoned output"), and a write outside [0, n) changes a
// guard byte.
template <class T>
struct DevBuf {
  uint8_t* base = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t n_) : n(n_) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base), n * sizeof(T) + 2 * kGuard));
    CUDA_CHECK(cudaMemset(base, 0xFF, n * sizeof(T) + 2 * kGuard));
  }
  DevBuf(const std::vector<T>& h) : DevBuf(h.size()) { upload(h); }
  ~DevBuf() { cudaFree(base); }
  DevBuf(const DevBuf&) = delete;
  T* p() const { return reinterpret_cast<T*>(base + kGuard); }
  void upload(const std::vector<T>& h) {
    CUDA_CHECK(cudaMemcpy(p(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> get() const {
    std::vector<T> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), p(), n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  bool guards_intact() const {
    std::vector<uint8_t> a(kGuard), b(kGuard);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(a.data(), base, kGuard, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b.data(), base + kGuard + n * sizeof(T), kGuard, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < kGuard; ++i)
      if (a[i] != 0xFF || b[i] != 0xFF) return false;
    return true;
  }
};

inline bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

inline double rel_l2(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  return rel_l2(got, std::vector<double>(ref.begin(), ref.end()));
}

inline std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Random GGUF rows of type t (random codes and plausible scales), [rows][row_bytes].
inline std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> out(rb * rows);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> sc(0.002f, 0.03f), mn(-0.1f, 0.0f);
  std::normal_distribution<float> nd(0.f, 0.05f);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = out.data() + rb * r;
    if (t == DType::F16 || t == DType::BF16) {
      auto* h = reinterpret_cast<uint16_t*>(row);
      for (int64_t i = 0; i < cols; ++i) h[i] = t == DType::F16 ? f32_to_fp16(nd(rng)) : f32_to_bf16(nd(rng));
      continue;
    }
    if (lmf::cuda::kquant(t)) {
      // Random bytes everywhere (every code and scale/min bit pattern), plausible fp16 super-block
      // scales: d (and dmin) where the layout keeps them.
      const size_t bb = row_bytes(t, QK_K);
      for (size_t i = 0; i < rb; ++i) row[i] = uint8_t(byte(rng));
      for (int64_t b = 0; b < cols / QK_K; ++b) {
        uint8_t* blk = row + bb * size_t(b);
        const uint16_t d = f32_to_fp16(sc(rng) / 16), dm = f32_to_fp16(sc(rng) / 16);
        if (t == DType::Q6_K) {
          std::memcpy(blk + 208, &d, 2);
        } else {
          std::memcpy(blk, &d, 2);
          std::memcpy(blk + 2, &dm, 2);
        }
      }
      continue;
    }
    for (int64_t b = 0; b < cols / QK; ++b) {
      if (t == DType::Q4_0) {
        auto* blk = reinterpret_cast<BlockQ4_0*>(row) + b;
        blk->d = f32_to_fp16(sc(rng));
        for (auto& q : blk->qs) q = uint8_t(byte(rng));
      } else if (t == DType::Q4_1) {
        auto* blk = reinterpret_cast<BlockQ4_1*>(row) + b;
        blk->d = f32_to_fp16(sc(rng));
        blk->m = f32_to_fp16(mn(rng));
        for (auto& q : blk->qs) q = uint8_t(byte(rng));
      } else {
        auto* blk = reinterpret_cast<BlockQ8_0*>(row) + b;
        blk->d = f32_to_fp16(sc(rng) / 8);
        for (auto& q : blk->qs) q = int8_t(std::clamp(byte(rng) - 128, -127, 127));
      }
    }
  }
  return out;
}

// Reference W (dequantized with format/quant's dequantize_row), [rows][cols] as double.
inline std::vector<double> dequant(DType t, const std::vector<uint8_t>& rows_data, int64_t rows, int64_t cols) {
  std::vector<double> w(size_t(rows) * cols);
  std::vector<float> tmp(cols);
  const size_t rb = row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t, rows_data.data() + rb * r, tmp.data(), cols);
    for (int64_t i = 0; i < cols; ++i) w[size_t(r) * cols + i] = tmp[i];
  }
  return w;
}

inline std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    const double* wr = w.data() + size_t(r) * cols;
    for (int64_t i = 0; i < cols; ++i) s += wr[i] * x[i];
    y[r] = s;
  }
  return y;
}

inline std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<float>& g, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * g[i];
  return y;
}

// RoPE of one head in place (double), pair index i uses angle pos * theta^(-2i/d) / ff[i] (ff:
// frequency divisors, or null).
// Llama 3.1's RoPE frequency divisors for head size d (factor 8, low/high frequency factors 1 and
// 4, original context 8192), as llama.cpp's converter writes them to rope_freqs.weight: 1 for
// wavelengths under 2048, 8 over 8192, a smooth ramp between. theta 5e5 or 1e6 hits all three.
inline std::vector<float> llama3_rope_factors(int d, double theta) {
  std::vector<float> f(size_t(d / 2));
  for (int i = 0; i < d / 2; ++i) {
    const double wavelen = 2 * M_PI / std::pow(theta, -2.0 * i / d);
    const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
    f[size_t(i)] = wavelen < 2048 ? 1.f : wavelen > 8192 ? 8.f : float(1.0 / ((1 - smooth) / 8.0 + smooth));
  }
  return f;
}
inline void rope_ref(double* h, int d, lmf::cuda::RopeStyle st, double theta, int pos, const float* ff = nullptr) {
  for (int i = 0; i < d / 2; ++i) {
    const int a = st == lmf::cuda::RopeStyle::NeoX ? i : 2 * i;
    const int b = st == lmf::cuda::RopeStyle::NeoX ? i + d / 2 : 2 * i + 1;
    const double ang = pos * std::pow(theta, -2.0 * i / d) / (ff ? double(ff[i]) : 1.0);
    const double c = std::cos(ang), s = std::sin(ang), va = h[a], vb = h[b];
    h[a] = va * c - vb * s;
    h[b] = vb * c + va * s;
  }
}

inline std::vector<double> to_d(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The quantized GEMVs (Q4_0/Q4_1/Q8_0) quantize x to int8 per block of 32 before the integer
// dot products, as the CPU backend does (src/backend/cpu/act_quant.h): amax = max|x|,
// id = 127/amax, q = rne(x*id), dx = amax/127, all in fp32. Returns dx*q in double, so that
// matvec(W, act_quant_ref(x)) is the exact result of the integer path ("same quantization"
// reference, tight tolerance).
inline bool act_quantized(DType t) { return lmf::cuda::int8_dot(t); }
// kmax 32767: the 16-bit codes of set_gemv_act16 (knob cuda_act16; the CPU's ActBlock16 rule).
inline std::vector<double> act_quant_ref(const std::vector<float>& x, float kmax = 127.f) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b + 32 <= x.size(); b += 32) {
    float am = 0.f;
    for (size_t i = 0; i < 32; ++i) am = std::max(am, std::fabs(x[b + i]));
    const float id = am > 0.f ? kmax / am : 0.f, dx = am / kmax;
    for (size_t i = 0; i < 32; ++i) out[b + i] = double(dx) * std::nearbyint(x[b + i] * id);
  }
  return out;
}
// Expected rel-L2 gap between the int8-activation result and the exact fp result: block-of-32
// int8 rounding of Gaussian(-times-Gaussian) inputs costs 0.5-0.8% (numpy estimate for these
// test distributions); 1.5e-2 leaves room for the smallest shapes' sampling spread.
constexpr double kActQuantTol = 1.5e-2;
// The x the GEMV kernel quantizes for a Norm/AddNorm prologue: the normalized vector exactly as
// the unfused rmsnorm_rows kernel computes it on the device (the fused prologue is specified to be
// bit-identical to it; rmsnorm_rows itself is checked against rmsnorm_ref in the elementwise
// tests). h = in (+ res, fp32 add as the kernel does).
inline std::vector<float> device_normed_x(const std::vector<float>& in, const std::vector<float>* res,
                                          const std::vector<float>& gamma) {
  std::vector<float> h(in);
  if (res)
    for (size_t i = 0; i < h.size(); ++i) h[i] = in[i] + (*res)[i];
  DevBuf<float> d_h(h), d_g(gamma), d_x(h.size());
  lmf::cuda::rmsnorm_rows(d_h.p(), d_g.p(), d_x.p(), 1, int(h.size()), 1e-6f);
  return d_x.get();
}

// Reference y = W x for what the kernel computes: float x for F16/BF16; for the quantized
// types the int8-quantized x (of in, or of the normalized vector for Norm/AddNorm).
inline std::vector<double> gemv_kernel_ref(DType t, const std::vector<double>& W, int64_t rows, int64_t cols,
                               const std::vector<float>& in, const std::vector<float>* res,
                               const std::vector<float>* gamma, float kmax = 127.f) {
  if (!act_quantized(t)) {
    std::vector<double> h = to_d(in);
    if (res)
      for (int64_t i = 0; i < cols; ++i) h[i] = double(in[i] + (*res)[i]);
    if (gamma) h = rmsnorm_ref(h, *gamma, 1e-6);
    return matvec(W, h, rows, cols);
  }
  return matvec(W, act_quant_ref(gamma ? device_normed_x(in, res, *gamma) : in, kmax), rows, cols);
}
// Whether f() throws lmf::Error (the standalone harness has no EXPECT_THROW) whose message holds
// `what`.
template <class F>
bool throws_error(F f, const char* what = "") {
  try {
    f();
  } catch (const lmf::Error& e) {
    return std::string(e.what()).find(what) != std::string::npos;
  }
  return false;
}
// Arguments of one decode attention over the given caches (splits planned for n_ctx).
inline lmf::cuda::AttnArgs attn_args(const float* q, uint16_t* k, uint16_t* v, int n_head, int n_kv, int hd,
                                     int64_t n_ctx, const int* pos, float* out, float* partial) {
  lmf::cuda::AttnArgs a;
  a.q = q;
  a.k_cache = k;
  a.v_cache = v;
  a.n_head = n_head;
  a.n_kv_head = n_kv;
  a.head_dim = hd;
  a.n_ctx = n_ctx;
  a.pos = pos;
  a.out = out;
  a.n_splits = lmf::cuda::attn_plan_splits(n_kv, n_ctx);
  a.partial = partial;
  return a;
}
// fp16 K and V caches [n_kv][n_ctx][hd]: positions below len random normal (k then v per
// element), the rest 0xFFFF (NaN), so reading past the length shows.
struct KvCaches {
  std::vector<uint16_t> k, v;
};
inline KvCaches random_kv_caches(int n_kv, int64_t n_ctx, int hd, int len, std::mt19937& rng) {
  KvCaches c{std::vector<uint16_t>(size_t(n_kv) * n_ctx * hd, 0xFFFF), {}};
  c.v = c.k;
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int h = 0; h < n_kv; ++h)
    for (int t = 0; t < len; ++t)
      for (int d = 0; d < hd; ++d) {
        const size_t i = (size_t(h) * n_ctx + t) * hd + d;
        c.k[i] = f32_to_fp16(nd(rng));
        c.v[i] = f32_to_fp16(nd(rng));
      }
  return c;
}
inline std::vector<float> fp16_to_f(const std::vector<uint16_t>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = fp16_to_f32(v[i]);
  return o;
}

}  // namespace lmfct_cuda

// The Q/K/V epilogue as its own kernel: per-head RMSNorm of q and k (Qwen3), RoPE, q to its
// buffer, k and v appended to the fp16 KV cache at the position read from device memory. It
// follows a plain Store GEMV over the concatenated Q|K|V weight, as the alternative to the
// epilogue inside the GEMV (knob LMFUSE_ROPE_FUSION: 1 = inside the GEMV, 0 = this kernel).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace lmf::cuda {

struct QkvPostArgs {
  // [T][(n_head + 2 n_kv) * head_dim]: q | k | v per token (bias already added); token t is at
  // position *pos + t and writes q_out [T][n_head * head_dim] row t (prefill: T > 1).
  const float* raw = nullptr;
  int T = 1;
  int n_head = 0, n_kv_head = 0, head_dim = 0;  // head_dim 32, 64 or 128
  const float* q_norm = nullptr;  // [head_dim] or null
  const float* k_norm = nullptr;
  float eps = 1e-6f;
  RopeStyle rope = RopeStyle::NeoX;
  float theta = 1e6f;
  const float* rope_ff = nullptr;  // DEVICE [head_dim / 2] RoPE frequency divisors or null (common.cuh rope_inv_freq)
  const int* pos = nullptr;  // DEVICE
  // A batch step (paged.h): row t is at position row_pos[t] and its k, v go to cache slot
  // row_slot[t] (n_ctx = the pools' slots); pos is then unused. Both DEVICE [T], or null.
  const int* row_pos = nullptr;
  const int* row_slot = nullptr;
  // RoPE's (cos, sin) per position and pair, [n_ctx][head_dim / 2] (rope_table_alloc), or null:
  // the kernel computes them (rope_cs). The same values either way.
  const float2* rope_cs = nullptr;
  float* q_out = nullptr;    // [n_head * head_dim]
  uint16_t* k_cache = nullptr;  // fp16 [n_kv][n_ctx][head_dim]
  uint16_t* v_cache = nullptr;
  int64_t n_ctx = 0;
  // Decode: launch with programmatic dependent launch (like the GEMVs and the attention), so its
  // blocks may start during the QKV GEMV's tail and the attention's during its own (knob
  // LMFUSE_QKV_POST_PDL). Off: a plain launch after the GEMV has finished.
  bool pdl = false;
  unsigned long long* tl = nullptr;  // launch timeline slot (measurement; common.cuh tl_*)
  bool early = false;  // set by qkv_post from set_pdl_early_trigger (pdl_launch.cuh)
};
void qkv_post(const QkvPostArgs& a, cudaStream_t s);

// RoPE's (cos, sin) for positions 0..n_pos-1 and pairs 0..head_dim/2-1 in device memory, computed
// by rope_cs (kernels/common.cuh), so a kernel that reads them gets the bits it would compute.
// ff: the frequency divisors (DEVICE, [head_dim / 2]) or null. Free with cudaFree.
float2* rope_table_alloc(int64_t n_pos, int head_dim, float theta, const float* ff, cudaStream_t s);
inline uint64_t rope_table_bytes(int64_t n_pos, int head_dim) { return uint64_t(n_pos) * uint64_t(head_dim / 2) * 8; }

// The same epilogue run inside the QKV GEMV (Epilogue::QKV): its parameters from these, with the
// GEMV's raw scratch and head counters.
inline QkvParams gemv_qkv_params(const QkvPostArgs& e, float* raw, unsigned* counters) {
  QkvParams q;
  q.n_head = e.n_head;
  q.n_kv_head = e.n_kv_head;
  q.head_dim = e.head_dim;
  q.q_norm = e.q_norm;
  q.k_norm = e.k_norm;
  q.norm_eps = e.eps;
  q.rope = e.rope;
  q.theta = e.theta;
  q.rope_ff = e.rope_ff;
  q.pos = e.pos;
  q.q_out = e.q_out;
  q.k_cache = e.k_cache;
  q.v_cache = e.v_cache;
  q.n_ctx = e.n_ctx;
  q.raw = raw;
  q.counters = counters;
  return q;
}

}  // namespace lmf::cuda

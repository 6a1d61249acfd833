// CPU reference ops (other than matmul, see matmul.h). These are the reference every other
// backend is tested against, op by op. Activations are fp32 row-major [T, n]; the KV cache is
// fp16, per layer [n_ctx, n_kv_heads * head_dim] for K and for V.
#pragma once
#include <cstdint>

#include "format/tensor.h"
#include "util/threadpool.h"

namespace lmf::cpu {

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * gamma, rows of n.
void rms_norm(const float* x, const float* gamma, float* y, int64_t rows, int64_t n, float eps);
// Per-head RMSNorm: each row holds n_heads heads of head_dim; gamma has head_dim entries.
void head_norm(const float* x, const float* gamma, float* y, int64_t rows, int n_heads, int head_dim, float eps);
// RoPE on rows of n_heads * head_dim at positions pos0 + t. neox: pairs (i, i + hd/2);
// otherwise adjacent pairs (2i, 2i+1). theta_i = pos * base^(-2i/hd) / factors[i]; factors
// (Llama 3.1+ frequency divisors, [head_dim / 2]) may be null.
void rope(const float* x, float* y, int64_t rows, int n_heads, int head_dim, int64_t pos0, float base,
          const float* factors, bool neox);
// Writes k, v rows (T of them) into the fp16 cache at positions pos0..pos0+T-1.
void kv_store(const float* k, const float* v, uint16_t* kc, uint16_t* vc, int64_t T, int64_t kv_dim, int64_t pos0);
// Causal attention of T queries at positions pos0..pos0+T-1 over cache positions 0..pos.
// GQA: query head h reads kv head h / (n_head / n_head_kv). Scale 1/sqrt(head_dim).
void attention(const float* q, const uint16_t* kc, const uint16_t* vc, float* out, int64_t T, int64_t pos0,
               int n_head, int n_head_kv, int head_dim, ThreadPool& pool);

// Paged KV: position p of a sequence is row (blocks[p / B] * B + p % B) of the pools
// ([rows, kv_dim] fp16 each), B = 1 << block_shift.
struct PagedSeq {
  const float* q = nullptr;  // [T, n_head * head_dim]
  float* out = nullptr;      // [T, n_head * head_dim]
  int64_t T = 0, pos0 = 0;
  const int32_t* blocks = nullptr;  // covers positions [0, pos0 + T)
};
// Writes k, v rows (T of them) of one sequence at positions pos0..pos0+T-1 into its pages.
void kv_store_paged(const float* k, const float* v, uint16_t* kc, uint16_t* vc, int64_t T, int64_t kv_dim,
                    int64_t pos0, const int32_t* blocks, int block_shift);
// attention() for several sequences in one parallel region, each over its own pages; a query's
// result is the same bits as attention() over a contiguous cache of the same contents.
void attention_paged(const PagedSeq* seqs, int64_t n_seqs, const uint16_t* kc, const uint16_t* vc, int block_shift,
                     int n_head, int n_head_kv, int head_dim, ThreadPool& pool);
void add(const float* a, const float* b, float* y, int64_t n);
void silu_mul(const float* g, const float* u, float* y, int64_t n);
void silu_mul(const float* g, const float* u, float* y, int64_t n, ThreadPool& pool);  // threaded
// Row `token` of a token-embedding weight of any supported type, as fp32.
void embed_row(const Weight& w, int32_t token, float* y);
// Converts a whole 1-D weight to fp32 (norm gammas and biases are f32 already).
const float* as_f32(const Weight& w);

}  // namespace lmf::cpu

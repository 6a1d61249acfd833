// Vectorized attention inner loop (attention_avx2.cpp), used by cpu::attention when the CPU has
// AVX2; the scalar loop in ops.cpp is the fallback. One call covers a tile of query rows that
// share one KV head (several positions x the heads of a GQA group). Every query's arithmetic
// (its dot products, softmax and weighted sum, each in key order) is the same whatever tile it is
// in, so a prompt evaluated in one pass or token by token gives the same bits.
#pragma once
#include <cstdint>

namespace lmf::cpu {

constexpr int kAttnMaxQueries = 32;

struct AttnTileArgs {
  const float* q[kAttnMaxQueries];  // [head_dim] each
  float* out[kAttnMaxQueries];      // [head_dim] each
  int64_t n_keys[kAttnMaxQueries];  // causal limit + 1 of each query
  int nq = 0;
  const uint16_t* k = nullptr;  // fp16 K of this KV head in row 0 of the pool; position j at row(j)
  const uint16_t* v = nullptr;
  int64_t kv_stride = 0;
  // Paged cache: position j is pool row blocks[j >> block_shift] << block_shift | (j & mask);
  // null blocks: row j (one contiguous sequence).
  const int32_t* blocks = nullptr;
  int block_shift = 0;
  int64_t row(int64_t j) const {
    if (!blocks) return j;
    return int64_t(blocks[j >> block_shift]) << block_shift | (j & ((int64_t(1) << block_shift) - 1));
  }
  int head_dim = 0;             // multiple of 8, <= 256
  float scale = 1.0f;
  float* scores = nullptr;      // scratch [nq][round_up(max n_keys, 8)]
  float* acc = nullptr;         // scratch [nq][head_dim]
};

void attention_tile_avx2(const AttnTileArgs& a);

}  // namespace lmf::cpu

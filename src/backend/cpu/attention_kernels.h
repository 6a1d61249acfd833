// Vectorized attention inner loop (attention_avx2.cpp), used by cpu::attention when the CPU has
// AVX2; the scalar loop in ops.cpp is the fallback. Both are per query position, so the result
// for a position never depends on how many tokens one call processes.
#pragma once
#include <cstdint>

namespace lmf::cpu {

struct AttnGroupArgs {
  const float* q[8];     // the group's query heads, [head_dim] each
  float* out[8];         // [head_dim] each
  int group = 1;         // query heads sharing this KV head (<= 8)
  const uint16_t* k;     // fp16 K of this KV head at position 0; row j at k + j * kv_stride
  const uint16_t* v;
  int64_t kv_stride = 0;
  int64_t n = 0;         // keys 0..n-1 (causal limit + 1)
  int head_dim = 0;      // multiple of 8
  float scale = 1.0f;
  float* scores = nullptr;   // scratch [group][n]
  float* inv_sum = nullptr;  // scratch [group]
};

void attention_group_avx2(const AttnGroupArgs& a);

}  // namespace lmf::cpu

// Host API of the batch-step kernels over the runtime's paged KV cache (runtime/kv_cache.h,
// Backend::paged_kv). A batch step is T rows of several sequences, each row at its own position;
// the rows' positions, cache slots and sequences come from DEVICE arrays the backend uploads
// once per step. The pools are fp16 head-major [n_kv][n_slots][head_dim] per layer, n_slots =
// n_blocks * block_size: position j of a sequence lives in slot
// table[j >> block_shift] * block_size + (j & (block_size - 1)).
// RoPE, the K/V append and the Q/K/V epilogue are the prefill kernels with per-row positions
// (prefill.h rope_rows / kv_store_rows, qkv_post.h QkvPostArgs::row_pos); the attention is here.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace lmf::cuda {

// Positions per split of the paged attention: a row of length L (its position + 1) runs
// ceil(L / kPagedSlice) splits, whatever the other rows of the step are, so its result does not
// depend on what it is batched with.
constexpr int kPagedSlice = 128;

struct PagedAttnArgs {
  const float* q = nullptr;  // [T][n_head * head_dim]
  float* out = nullptr;      // [T][n_head * head_dim]
  const uint16_t* k_pool = nullptr;  // fp16 [n_kv][n_slots][head_dim]
  const uint16_t* v_pool = nullptr;
  int64_t n_slots = 0;
  int T = 0, n_head = 0, n_kv_head = 0, head_dim = 0;  // head_dim 32, 64 or 128; n_head / n_kv <= 8
  const int* row_pos = nullptr;  // DEVICE [T]: row t's position (it sees keys 0 .. row_pos[t])
  const int* row_seq = nullptr;  // DEVICE [T]: row t's sequence (index into tab_off)
  const int* tab_off = nullptr;  // DEVICE [n_seq]: where each sequence's block table starts in tables
  const int* tables = nullptr;   // DEVICE: the block tables, one after another
  int block_shift = 0;
  int max_len = 0;               // host: the longest row's length (sizes the grid)
  float* partial = nullptr;      // scratch, paged_attn_scratch_floats(...) floats
};
size_t paged_attn_scratch_floats(int T, int n_head, int head_dim, int max_len);
// Causal attention of each row over its own sequence's pages (split over positions, then merged).
void attention_paged(const PagedAttnArgs& a, cudaStream_t s = nullptr);

// y[i][:] = x[rows[i]][:] for i < n (rows: DEVICE), cols floats per row.
void gather_rows(const float* x, int64_t cols, const int* rows, int n, float* y, cudaStream_t s = nullptr);

}  // namespace lmf::cuda

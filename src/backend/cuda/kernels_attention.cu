// Decode attention launchers (kernels/attention.cuh); instances: head_dim {32, 64, 128} x
// query heads per KV head {1, 2, 4, 8} (G is rounded up to the next instance).
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/attention_staged.cuh"

namespace lmf::cuda {

int attn_plan_splits(int n_kv_head, int64_t n_ctx) {
  // About two blocks per SM at full length; never slices shorter than 16 positions.
  // (3, 4 and 6 per SM measured slower at depth 4096 with the batched merge: docs/PERF.md, session 7)
  const int want = (2 * device_sm_count() + n_kv_head - 1) / n_kv_head;
  const int64_t cap = std::max<int64_t>(1, n_ctx / 16);
  return int(std::max<int64_t>(1, std::min<int64_t>(want, cap)));
}

size_t attn_scratch_floats(int n_head, int head_dim, int n_splits) {
  return size_t(n_head) * n_splits * (head_dim + 2);
}

namespace dev {
// Slices of at least 2 block steps of the register form (16 positions at head_dim 128); the
// staged form with AttnArgs::single_split also takes lengths up to one stage (kStagePos = 64
// positions) in a single split.
// Measured (docs/PERF.md, S15-3/S15-4, chain, staged form): one split beats 2-5 short ones by
// 2-4 % per token at L = 17 and 41 on 0.6B, 4B and 8B, is even at L = 65, and loses 1-2 % at
// L = 128 (a block's stages are serial); longer minimum slices or fewer splits lose at 64-1023.
AttnSliceRule attn_slice_rule(int head_dim, bool single) {
  return AttnSliceRule{kMinSliceSteps * kAttnWarps * (32 / (head_dim / 8)), single ? kStagePos : 0};
}
}  // namespace dev

namespace {
// The staged split kernel's shared memory (above the 48 KB default), set once per instance.
template <int HD, int GMAX>
void launch_staged(const dev::AttnParams& p, dim3 grid, cudaStream_t s) {
  constexpr size_t smem = dev::attn_staged_smem<HD, GMAX>();
  auto* kernel = &dev::attn_staged_kernel<HD, GMAX, false>;
  static const bool ready = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)ready;
  dev::launch_pdl(kernel, grid, dim3(dev::kAttnWarps * 32), smem, s, p);
}
// Pass 1 in the staged or register form.
template <int HD, int GMAX>
void launch_pass1(const dev::AttnParams& p, dim3 grid, bool staged, cudaStream_t s) {
  if (staged) {
    launch_staged<HD, GMAX>(p, grid, s);
  } else {
    auto* kernel = &dev::attn_split_kernel<HD, GMAX>;
    dev::launch_pdl(kernel, grid, dim3(dev::kAttnWarps * 32), 0, s, p);
  }
}

// Dynamic shared memory the o_proj-fused instance may request: the device's opt-in maximum less
// the kernel's static shared memory.
int smem_optin() {
  static const int v = [] {
    int dev = 0, r = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&r, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, &dev::attn_staged_kernel<128, 1, true>));
    return r - int(fa.sharedSizeBytes);
  }();
  return v;
}
size_t oproj_smem(int o_rows) {
  return std::max(dev::kStagedSmemRequest, dev::attn_oproj_offset<128, 1>() + dev::attn_oproj_slice_bytes(o_rows));
}
// The o_proj-fused direct launch (AttnParams::o_acc): grid n_head x (rows / o_rows), shared
// memory for the stages plus the o_proj slice (the instance opted in once to the maximum).
void launch_oproj(const dev::AttnParams& p, int64_t rows, cudaStream_t s) {
  auto* kernel = &dev::attn_staged_kernel<128, 1, true>;
  static const bool ready = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin()));
    return true;
  }();
  (void)ready;
  dev::launch_pdl(kernel, dim3(p.n_head, unsigned(rows / p.o_rows)), dim3(dev::kAttnWarps * 32), oproj_smem(p.o_rows),
                  s, p);
}

template <int HD, int GMAX>
void launch(const dev::AttnParams& p, bool staged, cudaStream_t s) {
  const dim3 grid(p.n_head / p.hpb, p.direct_only ? 1 : p.n_splits);  // pass 1, either form (hpb = G: n_kv)
  launch_pass1<HD, GMAX>(p, grid, staged, s);
  if (!p.direct_only) {
    dev::AttnParams pm = p;
    pm.early = (dev::pdl_early_trigger() & kEarlyMerge) != 0;
    dev::launch_pdl(p.xq ? &dev::attn_merge_kernel<HD, true> : &dev::attn_merge_kernel<HD, false>, dim3(p.n_head),
                    dim3(HD), dev::attn_merge_smem(p.n_splits), s, pm);
  }
}
// The instance for `heads` query heads per block (rounded up to GMAX 1, 2, 4 or 8).
template <int HD>
void launch_g(const dev::AttnParams& p, int heads, bool staged, cudaStream_t s) {
  if (heads <= 1) launch<HD, 1>(p, staged, s);
  else if (heads <= 2) launch<HD, 2>(p, staged, s);
  else if (heads <= 4) launch<HD, 4>(p, staged, s);
  else launch<HD, 8>(p, staged, s);
}
}  // namespace

int attn_oproj_rows(int n_head, int64_t rows) {
  // About one block per SM: R = SMs / n_head row slices (8B/4B: 4, 0.6B: 8; swept in docs/PERF.md
  // S23-1: 8B R = 2, 8, 16 and 4B R = 2, 16 slower, 4B R = 8 +1 %), the largest divisor
  // of rows not above it whose slice fits in shared memory (else the smallest above it).
  const int64_t want = std::max(1, device_sm_count() / std::max(1, n_head));
  auto fits = [&](int64_t R) { return rows % R == 0 && oproj_smem(int(rows / R)) <= size_t(smem_optin()); };
  for (int64_t R = std::min(want, rows); R >= 1; --R)
    if (fits(R)) return int(rows / R);
  for (int64_t R = want + 1; R <= rows; ++R)
    if (fits(R)) return int(rows / R);
  LMF_FAIL("cuda attention: no o_proj slice of ", rows, " rows fits in shared memory");
}

void attention_decode(const AttnArgs& a, cudaStream_t s) {
  if (a.head_dim != 32 && a.head_dim != 64 && a.head_dim != 128)
    LMF_FAIL("cuda attention: head_dim must be 32, 64 or 128, got ", a.head_dim);
  if (a.n_kv_head <= 0 || a.n_head % a.n_kv_head != 0 || a.n_head / a.n_kv_head > 8)
    LMF_FAIL("cuda attention: n_head ", a.n_head, " must be a multiple (<= 8x) of n_kv_head ",
             a.n_kv_head);
  if (!a.q || !a.k_cache || !a.v_cache || !a.pos || !a.out || !a.partial || a.n_splits < 1 ||
      a.n_ctx <= 0 || a.n_ctx > (int64_t(1) << 30))
    LMF_FAIL("cuda attention: missing pointer or bad n_ctx/n_splits");
  dev::AttnParams p{};
  p.q = a.q;
  p.k = reinterpret_cast<const __half*>(a.k_cache);
  p.v = reinterpret_cast<const __half*>(a.v_cache);
  p.n_head = a.n_head;
  p.n_kv = a.n_kv_head;
  p.n_ctx = int(a.n_ctx);
  p.n_splits = a.n_splits;
  p.pos = a.pos;
  p.out = a.out;
  p.part_o = a.partial;
  p.part_ml = a.partial + size_t(a.n_head) * a.n_splits * a.head_dim;
  p.scale = 1.0f / std::sqrt(float(a.head_dim));
  p.tl = a.tl;
  p.early = (dev::pdl_early_trigger() & (a.direct ? kEarlyDirect : kEarlySplit)) != 0;
  p.direct_only = a.direct;
  p.slice = dev::attn_slice_rule(a.head_dim, a.staged && a.single_split);
  if ((reinterpret_cast<uintptr_t>(a.xq) & 15) != 0) LMF_FAIL("cuda attention: xq must be 16-byte aligned");
  p.xq = a.xq;
  const int G = a.n_head / a.n_kv_head;
  const int hpb = a.heads_per_block == 0 ? G : a.heads_per_block;
  if (hpb != G && (hpb < 1 || G % hpb != 0 || !a.direct || !a.staged))
    LMF_FAIL("cuda attention: heads_per_block ", a.heads_per_block, " needs a direct staged launch and a divisor of ", G);
  p.hpb = hpb;
  if (a.wo) {
    if (a.head_dim != 128 || hpb != 1 || !a.direct || !a.staged || a.xq)
      LMF_FAIL("cuda attention: the o_proj fusion needs a direct staged launch with one query head per block, "
               "head_dim 128 and no int8 codes");
    if (a.wo->type != DType::Q4_0 || a.wo->cols != int64_t(a.n_head) * a.head_dim || !a.o_acc || !a.o_zero ||
        a.wo->rows > (int64_t(1) << 24))
      LMF_FAIL("cuda attention: the o_proj fusion needs a Q4_0 o_proj of n_head * head_dim columns and accumulators");
    p.wo_q = a.wo->q;
    p.wo_s = a.wo->scales;
    p.wo_nblk = int(a.wo->cols / 32);
    p.o_rows = attn_oproj_rows(a.n_head, a.wo->rows);
    p.o_acc = a.o_acc;
    p.o_zero = a.o_zero;
    p.o_zero_n = int(a.wo->rows);
    launch_oproj(p, a.wo->rows, s);
    return;
  }
  if (a.head_dim == 32) launch_g<32>(p, hpb, a.staged, s);
  else if (a.head_dim == 64) launch_g<64>(p, hpb, a.staged, s);
  else launch_g<128>(p, hpb, a.staged, s);
}

}  // namespace lmf::cuda

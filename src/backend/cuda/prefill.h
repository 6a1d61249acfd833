// Host API of the batched prefill kernels (T tokens per run, issue 6). Plain C++ like
// kernels.h; same conventions: launchers only launch (no allocation or sync inside, except
// gemm_create), positions are read from DEVICE memory, activations are fp32 row-major [T, n],
// the KV cache is fp16 head-major [n_kv][n_ctx][head_dim] per layer (kernels.h).
//
// Matrix products (matmul_prefill) take one of three routes, picked per product by timing them on
// this GPU (PrefillTuner, prefill_tune.h), by the fitted rule prefill_route_auto
// (prefill_route.cpp, LMFUSE_PREFILL_ROUTE_TUNE=0), or forced by LMFUSE_PREFILL_INKERNEL_DEQUANT:
//  - in-kernel (prefill_mmq.cu): int8 x int8 tensor-core GEMM on the packed 4/8-bit weight, the
//    activations quantized per block of 32 exactly as the decode GEMV and the CPU backend do
//    (amax/127, round to nearest even): the decode's block arithmetic, no fp16 copy of the weight;
//  - outer: the weight (or a row range of it) unpacked to fp16 into one scratch buffer reused by
//    every projection, then cuBLAS (fp16 in, fp32 accumulate and out);
//  - gemv: the decode GEMV once per token (a few tokens).
//
// Outer route precision ("parts"). Quantized weights: one fp16 rounding of each factor (the int8
// block-quantized activations and d*(q-8)), ~2^-12 relative; on the small golden models that
// moves int8 activation codes of the next layer and the route ends ~1e-2 (rel-L2) from the
// in-kernel/decode arithmetic, within the quantized-weight tolerance (docs/PERF.md). Float
// weights: the activations are split into an fp16 hi part and an fp16 lo part (x - hi) and the
// GEMM runs over K' = 2K on [Xhi|Xlo] . [W|W] (W is exact in fp16), so the products are exact in
// the fp32 accumulator, as the decode GEMV's fp32 activations are (lo parts below 6e-5 lose bits
// as fp16 subnormals).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "backend/cuda/kernels.h"

namespace lmf::cuda {

// out[t][:] = row tokens[t] of the GGUF embedding table (types as embed_lookup), t < T.
// tokens: DEVICE [T].
void embed_rows(DType t, const void* table, int64_t cols, const int* tokens, int T, float* out,
                cudaStream_t s = nullptr);
// In place over x [T][n_heads*head_dim]; row t is at position *pos0 + t (pos0 in DEVICE memory),
// or row_pos[t] when row_pos (DEVICE) is set (a batch step, paged.h); ff as for rope (kernels.h).
void rope_rows(float* x, int T, int n_heads, int head_dim, RopeStyle st, float theta, const float* ff, const int* pos0,
               cudaStream_t s = nullptr, const int* row_pos = nullptr);
// k, v [T][n_kv*head_dim] fp32 -> fp16 caches at positions *pos0 .. *pos0 + T - 1, or at slots
// row_slot[t] of paged pools of n_ctx slots when row_slot (DEVICE) is set (paged.h).
void kv_store_rows(const float* k, const float* v, uint16_t* k_cache, uint16_t* v_cache, int T, int n_kv,
                   int head_dim, int64_t n_ctx, const int* pos0, cudaStream_t s = nullptr,
                   const int* row_slot = nullptr);

// Causal attention of T queries (query t at position *pos0 + t sees keys 0 .. *pos0 + t) over the
// layer's cache, which must already hold those keys (kv_store_rows first). GQA: query head h reads
// KV head h / (n_head / n_kv_head). Flash style: one block per (tile of 16 queries, query head),
// online softmax in fp32 over tiles of 32 keys. head_dim 32, 64 or 128.
struct PrefillAttnArgs {
  const float* q = nullptr;  // [T][n_head*head_dim]
  const uint16_t* k_cache = nullptr;
  const uint16_t* v_cache = nullptr;
  int T = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  int64_t n_ctx = 0;
  const int* pos0 = nullptr;  // DEVICE
  float* out = nullptr;       // [T][n_head*head_dim]
};
void attention_prefill(const PrefillAttnArgs& a, cudaStream_t s = nullptr);
// Throws lmf::Error naming `who` and what is wrong with a (shared by both attention kernels).
void check_prefill_attn_args(const PrefillAttnArgs& a, const char* who);
// The same on tensor cores (prefill_attention_tc.cu): flash attention with mma.sync, fp16 K/V
// from the cache and Q/P split into hi+lo fp16 parts for fp32-level accuracy. head_dim 32/64/128.
void attention_prefill_tc(const PrefillAttnArgs& a, cudaStream_t s = nullptr);

// fp32 [rows][cols] -> fp16 [rows][cols]; int8_blocks: quantize each block of 32 to int8 first
// (see the header comment). cols % 32 == 0.
// parts 1: y [rows][cols] = fp16(x); 2: y [rows][2 cols] = hi | lo.
void act_to_f16(const float* x, uint16_t* y, int64_t rows, int cols, bool int8_blocks, int parts = 1,
                cudaStream_t s = nullptr);
// Rows r0, r0 + step, ..., r0 + (n-1)*step of a repacked weight (kernels.h layout) -> fp16
// out [n][parts * w.cols] (values computed in fp32): parts 1: fp16(w); 2: w | w (float weights,
// exact in fp16). step 2 picks gate or up rows out of an interleaved gate/up weight.
void dequant_rows_f16(const DeviceWeight& w, int64_t r0, int64_t step, int64_t n, uint16_t* out, int parts = 1,
                      cudaStream_t s = nullptr);
// y[t][i] += bias[i] for t < rows, i < n; row stride ldy.
void add_bias_rows(float* y, const float* bias, int64_t rows, int n, int64_t ldy, cudaStream_t s = nullptr);
// y[t][j] (+)= silu(x[t][2j]) * x[t][2j+1], j < n; x row stride 2n, y row stride n.
void silu_pairs_rows(const float* x, float* y, int64_t rows, int64_t n, bool accumulate, cudaStream_t s = nullptr);
// y [rows][n] = silu(x[t][2j]) * x[t][2j+1] (x row stride 2n) and, in the same pass, x16
// [rows][n] = fp16 of y quantized per block of 32 to int8 (act_to_f16 with int8_blocks, value for
// value). n % 32 == 0.
void silu_pairs_rows_q8f16(const float* x, float* y, uint16_t* x16, int64_t rows, int64_t n, cudaStream_t s = nullptr);
// y[t][i] += x[t][i] (rows x n, contiguous)
void add_rows(const float* x, float* y, int64_t elems, cudaStream_t s = nullptr);

// cuBLAS handle bound to one stream.
struct GemmHandle;
GemmHandle* gemm_create(cudaStream_t s);
void gemm_destroy(GemmHandle* h);
// cuBLAS bf16 GEMM 8192^3 (bf16 in/out, fp32 accumulate), median of 10: the FLOP/s that prefill
// figures are reported against (issue 6). Allocates and frees 384 MiB.
double gemm_bf16_peak_flops(GemmHandle* h, cudaStream_t s);
// y [T][ldy], columns [0, N) = x [T][K] (fp16) * w [N][K]^T (fp16), fp32 accumulate and output.
void gemm_f16(GemmHandle* h, const uint16_t* x, const uint16_t* w, float* y, int64_t T, int64_t N, int64_t K,
              int64_t ldy);
// y = c + x w^T (cuBLASLt; c [T][ldy] may be y itself or another buffer: the residual epilogue
// without a copy of the residual into y first). Same layouts as gemm_f16; the GEMM's stream.
void gemm_f16_c(GemmHandle* h, const uint16_t* x, const uint16_t* w, const float* c, float* y, int64_t T, int64_t N,
                int64_t K, int64_t ldy);

// ---------------------------------------------------------------------------------------------
// In-kernel route (prefill_mmq.cu): int8 x int8 tensor-core GEMM over the repacked Q4_0/Q4_1/
// Q8_0 weight, activations quantized per block of 32 as the decode GEMV does (so the block dot
// products are the decode's, exactly). Activation buffers: xq int8 [T][nblk4*32] (blocks past
// nblk zero), xd float [T][nblk4] block scales, xs float [T][nblk4] block sums of xq (Q4_1 only,
// else may be null); nblk4 = mmq_nblk4(cols) (cols/32 rounded up to the kernel's stage of 4).
bool mmq_supported(DType t);
int mmq_nblk4(int64_t cols);
void mmq_quantize(const float* x, int64_t T, int64_t cols, int8_t* xq, float* xd, float* xs, cudaStream_t s);
struct MmqArgs {
  DType type = DType::Q4_0;
  const uint8_t* q = nullptr;       // DeviceWeight::q
  const uint8_t* scales = nullptr;  // DeviceWeight::scales
  int nblk = 0;                     // blocks of 32 per weight row (cols / 32)
  int64_t r0 = 0, step = 1;         // output column i uses weight row r0 + i*step
  int64_t n = 0;                    // output columns
  const int8_t* xq = nullptr;
  const float* xd = nullptr;
  const float* xs = nullptr;
  int T = 0, nblk4 = 0;
  float* y = nullptr;  // [T][ldy]
  int64_t ldy = 0;
  const float* bias = nullptr;  // [n] or null
  const float* residual = nullptr;  // [T][ldy] or null: y = residual + result (may alias y)
  // Gate/up epilogue: output columns are interleaved gate/up pairs (repack_gate_up); y [T][ldy]
  // receives silu(col 2j) * col 2j+1 at column j (n even; no bias, no residual).
  bool silu_pairs = false;
};
void mmq_gemm(const MmqArgs& a, cudaStream_t s);

// Which route a prefill matrix product takes (matmul_prefill).
// Gemv: the decode GEMV once per token (small T: reads the weight T times but needs no tile
// padding; measured to win at T <= 4 on the H200).
enum class PrefillRoute { Outer, InKernel, Gemv };
const char* route_name(PrefillRoute r);  // "outer", "in-kernel", "gemv"
// The measured routing rule (see the comment at its definition and docs/PERF.md, "prefill
// routing sweep"): in-kernel or outer for a weight of n x k of type t at T tokens.
PrefillRoute prefill_route_auto(DType t, int64_t n, int64_t k, int64_t T);

// What the outer route's activation scratch (PrefillScratch::x) holds, when it holds the converted
// input of the NEXT product: fp16(int8-blocks(src)) for src [T][cols], written by the gate/up
// product's SiLU pass (one kernel writes y and its conversion) so that the down projection that
// reads y skips its own conversion pass (~100 MB of traffic per 8B layer at T = 2048). Every
// matmul_prefill call clears it on entry (it may overwrite x), so only the very next product can
// use it; the caller clears it at the start of each prefill run.
struct X16Tag {
  const float* src = nullptr;
  int64_t T = 0, cols = 0;
};

// Scratch of the outer-dequant path, owned by the caller: w holds w_elems fp16 (3 x the largest
// weight, or a chunk of rows of a larger one), x holds x_elems fp16 (3 x T x the widest input).
// The in-kernel route's activation buffers (xq/xd/xs above) sized for T x the widest input.
struct PrefillScratch {
  uint16_t* w = nullptr;
  size_t w_elems = 0;
  uint16_t* x = nullptr;
  size_t x_elems = 0;
  int8_t* xq = nullptr;
  size_t xq_bytes = 0;
  float* xd = nullptr;  // xd_elems floats
  float* xs = nullptr;  // xd_elems floats
  size_t xd_elems = 0;
  float* pairs = nullptr;  // outer route's gate/up product before the SiLU pairs: pairs_elems floats
  size_t pairs_elems = 0;
  X16Tag* x16 = nullptr;   // optional (caller-owned): enables the SiLU -> down handoff above
};
// Y [T][n] (+ bias) = X [T][w.cols] * (rows r0 + i*step of w)^T: converts X, then dequantizes and
// multiplies in chunks of rows that fit the scratch.
struct PrefillMatmul {
  const DeviceWeight* w = nullptr;
  int64_t r0 = 0, step = 1, n = 0;  // n = 0: all rows of w
  const float* x = nullptr;
  int64_t T = 0;
  float* y = nullptr;
  const float* bias = nullptr;  // [n] or null
  const float* residual = nullptr;  // [T][n] or null: y = residual + X W^T (may alias y exactly)
  bool silu_pairs = false;      // w is an interleaved gate/up weight: y [T][n/2] = silu(gate) * up
};
// Routes: InKernel needs a type mmq_supported; Gemv needs the whole weight (r0 0, step 1) and
// not bias + accumulate together; a route that cannot take the product falls back to InKernel,
// then Outer. Float weights always take the outer route.
// The outer route multiplies fp16(int8-block-quantized x) by fp16(w) in one GEMM for quantized
// weights (one fp16 rounding per factor: ~1e-3 from the decode arithmetic, docs/PERF.md) and
// the split-fp16 form (parts 2, exact activations) for float weights.
void matmul_prefill(GemmHandle* h, const PrefillMatmul& m, const PrefillScratch& sc, PrefillRoute route,
                    cudaStream_t s);
// The route matmul_prefill takes for m when `want` is asked for (the fallbacks above).
PrefillRoute prefill_usable_route(const PrefillMatmul& m, PrefillRoute want);
// Spin used by every prefill timing run (PrefillTuner, cuda_bench_prefill): covers the host's
// enqueueing of one run (up to 8 GEMV launches, or cuBLAS' host path).
constexpr int kTimingSpinUs = 150;
// One thread busy-waits us microseconds on the GPU (%globaltimer). Timing runs enqueue it before
// their start event so the host has queued the whole run before the GPU reaches it: the events
// then time the GPU's work, not the host's launch overheads and their jitter.
void gpu_spin(int us, cudaStream_t s = nullptr);
// Median GPU time in ms of `reps` runs of run() on s, each between two events (after one untimed
// warm-up run); spin_us > 0 queues each timed run behind gpu_spin(spin_us). Synchronizes s.
double gpu_median_ms(cudaStream_t s, int reps, const std::function<void()>& run, int spin_us = 0);
// x[i] = a pseudo-random value in [-1, 1) from (seed, i): inputs of timing runs.
void fill_random_f32(float* x, size_t n, uint32_t seed, cudaStream_t s = nullptr);

}  // namespace lmf::cuda

// Host API of the CUDA decode kernels (batch 1). Everything here is plain C++ (no CUDA headers
// beyond the runtime API), so the backend and the tests include it from .cpp files.
//
// Conventions
//  - Activations are fp32 on the device. Weights are repacked at load (repack_* below).
//  - Every launcher only launches (no allocation, no sync, no host reads of device data): a chain
//    of them can be captured in a CUDA graph and replayed. Positions and lengths are read from
//    DEVICE memory (`const int* pos`), so a replay needs no re-capture.
//  - KV cache layout (per layer, K and V alike), fp16 bits:
//        cache[kv_head][n_ctx][head_dim]          (head-major)
//    Why head-major rather than [n_ctx][n_kv*head_dim]: decode attention streams one KV head's
//    keys for a range of positions; head-major makes that range one contiguous run of memory
//    (full DRAM pages, no strided rows), and appending one position writes n_kv runs of
//    head_dim*2 bytes either way.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "format/quant/types.h"
#include "util/tri.h"

namespace lmf {
class ThreadPool;  // util/threadpool.h
}

namespace lmf::cuda {

// ---------------------------------------------------------------------------------------------
// Repacked weights.
//
// Layout ("16-byte tiled"). A row of `cols` elements is nblk = cols/32 blocks of 32 elements.
// Each block's data is P 16-byte pieces (P = 1 for Q4_0/Q4_1: the 16 nibble bytes, GGUF nibble
// order kept: byte j = element j (low) and j+16 (high); P = 2 for Q8_0: 32 int8; P = 4 for
// F16/BF16: 32 x 2 bytes). Blocks are grouped by 32 (one per lane of a warp); group g holds
// gb = min(32, nblk - 32g) blocks and stores piece p of its block l at
//     q + row*row_stride + g*32*P*16 + (p*gb + l)*16          (row_stride = nblk*P*16)
// so each load instruction of a warp reads gb*16 contiguous bytes (fully coalesced, 16 B per
// lane). Scales are separate: Q4_0/Q8_0: fp16 d [rows][nblk]; Q4_1: {fp16 d, fp16 m} [rows][nblk].
// F16/BF16 have no scales. cols must be a multiple of 32 (every supported model dimension is).
//
// K-quants (Q4_K, Q5_K, Q6_K; cols a multiple of 256). Every 32 elements become one block of the
// same tiling: its 16 nibble bytes in Q4_0's order (byte j = element j low, j+16 high), so the
// 4-bit dot products of Q4_0/Q4_1 serve them unchanged. The code bits above 4 follow the row's
// tiles as a plane of hb bytes per block (Q5_K 4, Q6_K 8; row_stride = nblk*(16 + hb)), block c at
// row + nblk*16 + c*hb:
//   Q5_K: word H, bit k of byte j (k < 4) = bit 4 of element 4k+j, bit 4+k of byte j = of element
//         16+4k+j: for nibble word w, ((H >> w) & 0x01010101) and ((H >> 4+w) & 0x01010101) are
//         the fifth bits of its low and high nibbles, byte for byte.
//   Q6_K: words {H0, H1}, bits 2k..2k+1 of byte j of H0 = bits 4-5 of element 4k+j (H1: 16+4k+j).
// Scales per row: nblk 2-byte block records, then nblk/8 4-byte super-block records (so a row's
// scales are contiguous, as for every type: nblk*5/2 bytes):
//   Q4_K/Q5_K: block {u8 sc, u8 m} (the 6-bit codes), super-block {fp16 d, fp16 dmin}:
//              x = (d*sc)*q - (dmin*m), both products exact in fp32.
//   Q6_K:      block {s8 scale of elements 0-15, s8 scale of 16-31}, super-block {fp16 d, 0}:
//              x = (d*scale)*(q - 32).
// The GGUF bytes are only rearranged: dequantizing the packed form gives format/quant's values.
struct HostPacked {
  DType type = DType::F16;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> q;       // [rows][row_stride] tiled data
  std::vector<uint8_t> scales;  // [rows][nblk] fp16 d (or d,m pairs); empty for F16/BF16
};

// `src` holds `rows` GGUF rows of `cols` elements back to back (row_bytes(t, cols) each).
// Supported: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, F16, BF16. Throws lmf::Error on other types,
// cols % 32 != 0, or (K-quants) cols % 256 != 0.
// pool: rows packed on its threads (the same bytes; the backend's load passes one), null = this
// thread.
HostPacked repack_rows(DType t, const void* src, int64_t rows, int64_t cols, ThreadPool* pool = nullptr);
// Q|K|V (or any list): the rows of each part, concatenated in order, as one weight.
struct RowsRef {
  const void* data;
  int64_t rows;
};
HostPacked repack_concat(DType t, const std::vector<RowsRef>& parts, int64_t cols, ThreadPool* pool = nullptr);
// gate/up for the SiLU-mul epilogue: output rows interleaved gate0, up0, gate1, up1, ...
HostPacked repack_gate_up(DType t, const void* gate, const void* up, int64_t rows, int64_t cols,
                          ThreadPool* pool = nullptr);

// The same packing in pieces, into memory the caller owns (the load's pinned staging buffers,
// upload.h). A RowSource gives output row r's GGUF bytes: concat_source for a concatenation,
// gate_up_source for the gate/up interleave (rows 2i and 2i+1 are gate i and up i). pack_rows
// writes output rows [r0, r1) to q (packed_q_bytes each) and scales (packed_scale_bytes each),
// row r0 first; HostPacked's q and scales are those rows for [0, rows).
using RowSource = std::function<const uint8_t*(int64_t)>;
RowSource concat_source(DType t, const std::vector<RowsRef>& parts, int64_t cols);
RowSource gate_up_source(DType t, const void* gate, const void* up, int64_t cols);
size_t packed_q_bytes(DType t, int64_t cols);      // per row; throws for an unsupported type
size_t packed_scale_bytes(DType t, int64_t cols);  // per row; 0 for F16/BF16
void pack_rows(DType t, int64_t cols, int64_t r0, int64_t r1, const RowSource& src, uint8_t* q, uint8_t* scales,
               ThreadPool* pool = nullptr);

// Per-SM tile layout (Q4_0 only; the persistent decode step prototyped in
// bench/cuda_bench_persist.cu, docs/PERF.md session 20). rows % 32 == 0, cols % 128 == 0. Row
// group g (rows 32g .. 32g+31) is cols/128 tiles; tile t of group g starts at byte
// (g * cols/128 + t) * kTileBytes and holds blocks 4t .. 4t+3 of its 32 rows: the 16 nibble bytes
// of block b, row r (GGUF order) at (b*32 + r) * 16, then the fp16 scale d at
// kTileQBytes + (b*32 + r) * 2. A contiguous range of row groups is one SM's contiguous stream,
// and lane r of a warp reading a tile reads consecutive 16-byte words.
constexpr int kTileRows = 32, kTileBlocks = 4;
constexpr int kTileQBytes = kTileRows * kTileBlocks * 16, kTileBytes = kTileQBytes + kTileRows * kTileBlocks * 2;
struct HostTiles {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;  // (rows/32) * (cols/128) tiles
};
// As repack_concat / repack_gate_up, into tiles. Throws lmf::Error for another type or a shape
// off the tile grid.
HostTiles repack_tiles_concat(DType t, const std::vector<RowsRef>& parts, int64_t cols);
HostTiles repack_tiles_gate_up(DType t, const void* gate, const void* up, int64_t rows, int64_t cols);

// Device copy of a HostPacked weight (owns its memory through upload/free below).
struct DeviceWeight {
  DType type = DType::F16;
  int64_t rows = 0, cols = 0;
  const uint8_t* q = nullptr;
  const uint8_t* scales = nullptr;
  size_t q_bytes = 0, scale_bytes = 0;
};
DeviceWeight upload_weight(const HostPacked& h, cudaStream_t s = nullptr);
void free_weight(DeviceWeight& w);
// Bytes a GEMV over w reads from weights (for bandwidth figures).
inline size_t weight_bytes(const DeviceWeight& w) { return w.q_bytes + w.scale_bytes; }

// ---------------------------------------------------------------------------------------------
// GEMV y = W x (W [rows, cols]) with a fused prologue and epilogue, one launch.
enum class Prologue {
  None,     // x given: x = in
  Norm,     // x = rmsnorm(in) * gamma                       (in [cols])
  AddNorm,  // h = in + residual; x = rmsnorm(h) * gamma; block 0 writes h to residual_out
  Int8,     // x given already quantized by its producer (SiluMulQ): xq [gemv_xq_bytes(cols)];
            // the integer-dot types only (int8_dot), in unused
};
enum class Epilogue {
  Store,     // y[r] = (W x)[r] (+ bias[r])                                   y [rows]
  Residual,  // y[r] = (W x)[r] + y_residual[r]   (y may alias y_residual)    y [rows]
  SiluMul,   // W from repack_gate_up: y[i] = silu((Wx)[2i]) * (Wx)[2i+1]     y [rows/2]
  QKV,       // W = Q|K|V rows: bias, per-head RMSNorm of q,k, RoPE, q -> q_out, k,v -> cache
  SiluMulQ,  // SiluMul, and y also quantized into xq for an Int8-prologue consumer (y [rows/2],
             // rows/2 % 32 == 0; each block makes whole 32-blocks of y); int8_dot types only
};
enum class RopeStyle { NeoX, Adjacent };  // NeoX: pairs (i, i+d/2) (qwen2/3); Adjacent: (2i, 2i+1)

struct QkvParams {
  int n_head = 0, n_kv_head = 0, head_dim = 0;  // head_dim 32, 64 or 128
  const float* q_norm = nullptr;                // [head_dim] or null (no per-head norm)
  const float* k_norm = nullptr;                // [head_dim] or null
  float norm_eps = 1e-6f;
  RopeStyle rope = RopeStyle::NeoX;
  float theta = 1e6f;
  const float* rope_ff = nullptr;  // DEVICE [head_dim / 2] RoPE frequency divisors or null
  const int* pos = nullptr;     // DEVICE: position of this token
  float* q_out = nullptr;       // [n_head*head_dim]
  uint16_t* k_cache = nullptr;  // fp16 [n_kv_head][n_ctx][head_dim] (this layer)
  uint16_t* v_cache = nullptr;
  int64_t n_ctx = 0;
  // Scratch (DEVICE): `raw` [rows] fp32, and `counters` [n_head + 2*n_kv_head] uint32 that must
  // be zero before the first launch (qkv_counters_alloc); the kernel leaves them zero again.
  float* raw = nullptr;
  unsigned* counters = nullptr;
};

struct GemvArgs {
  const DeviceWeight* w = nullptr;
  const float* in = nullptr;        // [cols]
  const float* residual = nullptr;  // AddNorm: [cols]
  // AddNorm: [cols] receives in + residual. Must NOT alias in or residual: other blocks are
  // still reading those while block 0 writes (the graph memory plan gives it its own buffer).
  float* residual_out = nullptr;
  const float* gamma = nullptr;  // Norm/AddNorm: [cols]
  float eps = 1e-6f;
  float* y = nullptr;                 // see Epilogue
  const float* y_residual = nullptr;  // Residual epilogue
  const float* bias = nullptr;        // Store/QKV: [rows] or null
  QkvParams qkv;                      // QKV epilogue
  unsigned long long* tl = nullptr;   // launch timeline slot (measurement; common.cuh tl_*)
  // x quantized once, by its producer (SiluMulQ writes it, the Int8 prologue reads it): the int8
  // codes and {dx, sum q} of each 32-block of a vector of `cols`, in the layout the integer-dot
  // GEMVs stage x in shared memory (gemv.cuh header comment), gemv_xq_bytes(cols) bytes.
  uint8_t* xq = nullptr;
  // Integer-dot types: one 16-warp block per SM (On) or 8-warp blocks (Off); Auto = set_gemv_wide.
  Tri wide = Tri::Auto;
  // SMs the grid leaves free, so the kernel launched after this one finds whole SMs for its
  // blocks while this one runs (knobs qkv_post_room, o_room, gateup_room). Same results: every
  // row group is still summed by the same warps' arithmetic. 0 <= spare_sms < SMs.
  int spare_sms = 0;
  // spare_sms is a ceiling: the grid leaves only as many SMs free as keep the number of rounds
  // its warps take through the row groups (ceil(row groups / warps on the grid)) what it is on
  // every SM (knob gateup_room: a fourth round on 8B gate/up costs 4 %, docs/PERF.md S34-3).
  bool spare_same_rounds = false;
  // Blocks per SM for this launch: On one, Off as many as are resident; Auto = the global mode
  // (set_gemv_coresident, which itself chooses by shape: gemv_grid.h gemv_grid_blocks).
  Tri coresident = Tri::Auto;
  // > 0: run one block per SM on at most this many SMs, the fewest that take the row groups in
  // one round with a warp per block to spare, where each warp's row group is wholly in the loads
  // it issues before the PDL wait (gemv_grid.h gemv_fit_spare); else the grid above. Knob
  // down_fit: down on the SMs gate/up leaves free. Same results.
  int fit_sms = 0;
};

// Validates the arguments (throws lmf::Error naming what is wrong) and launches. Grid sizes come
// from a per-device table computed on first use (cached), so this is capture-safe after one
// warm-up call per (type, prologue, epilogue).
// Returns the SMs the grid left free (GemvArgs::spare_sms / fit_sms as resolved).
int gemv(Prologue pro, Epilogue epi, const GemvArgs& a, cudaStream_t s = nullptr);
bool gemv_supported(DType t, Prologue pro, Epilogue epi);  // the allow-list
unsigned* qkv_counters_alloc(int n_head, int n_kv_head);   // zeroed device counters
size_t gemv_xq_bytes(int64_t cols);                        // 40 bytes per 32 columns

// ---------------------------------------------------------------------------------------------
// Decode attention over the fp16 KV cache (flash-decoding: n_splits blocks per KV head, then a
// log-sum-exp merge). Length = *pos + 1, read on the device; any length up to n_ctx.
struct AttnArgs {
  const float* q = nullptr;  // [n_head][head_dim]
  const uint16_t* k_cache = nullptr;
  const uint16_t* v_cache = nullptr;  // [n_kv_head][n_ctx][head_dim] fp16
  int n_head = 0, n_kv_head = 0, head_dim = 0;  // head_dim 32, 64 or 128; n_head/n_kv_head <= 8
  int64_t n_ctx = 0;
  const int* pos = nullptr;  // DEVICE
  float* out = nullptr;      // [n_head][head_dim]
  int n_splits = 1;          // from attn_plan
  float* partial = nullptr;  // scratch, attn_scratch_floats(...) floats
  unsigned long long* tl = nullptr;  // launch timeline: two slots, split then merge (measurement)
  // Optional (written by the merge kernel, or by the split of a direct launch): out also quantized to int8 for the o_proj GEMV's Int8 prologue,
  // gemv_xq_bytes(n_head * head_dim) bytes, 16-byte aligned (knob LMFUSE_ATTN_XQ).
  uint8_t* xq = nullptr;
  // Pass 1 from shared-memory stages, a lane per position (kernels/attention_staged.cuh; knob
  // LMFUSE_ATTN_STAGED, automatic on) instead of the register form (kernels/attention.cuh). Same
  // partials and merge.
  bool staged = false;
  // With staged: lengths up to one stage (64 positions) in a single split, whose merge is a copy
  // (knob LMFUSE_ATTN_SINGLE_SPLIT, automatic kAttnSingleSplitAuto); else slices of >= 16.
  bool single_split = false;
  // One block per KV head over the whole length, writing out (and xq) itself: no partials, no
  // merge kernel, one launch instead of two. Correct at any length, meant for short ones (the
  // backend's second decode graph, knob LMFUSE_ATTN_DIRECT).
  bool direct = false;
  // With direct and staged: query heads per block, a divisor of the group size
  // n_head / n_kv_head (0 = the whole group, one block per KV head). Fewer heads per block spread
  // the direct launch's per-head work (scores, softmax, P.V) over n_head / heads_per_block
  // blocks, each reading its KV head's rows (from L2 after the first); knob LMFUSE_ATTN_HEAD_SPLIT.
  int heads_per_block = 0;
  // Optional, with direct, staged, heads_per_block 1, head_dim 128 and no xq: o_proj
  // in the same launch (knob LMFUSE_ATTN_O_FUSION; kernels/attention_staged.cuh, OPROJ). wo is the
  // Q4_0 o_proj [rows][n_head * head_dim]; o_acc[rows] (zero before the launch) receives
  // wo * out by atomics (so its last bits vary run to run), and o_zero[rows] is zeroed after the
  // launch's PDL wait (the previous layer's accumulator). out is still written.
  const DeviceWeight* wo = nullptr;
  float* o_acc = nullptr;
  float* o_zero = nullptr;
};
// Rows of o_proj per block of the fused launch (AttnArgs::wo), for n_head heads.
int attn_oproj_rows(int n_head, int64_t rows);
// LMFUSE_ATTN_STAGED automatic: on (docs/PERF.md, S14-8, `--ab attn_staged`: tg128 0.6B 1.001,
// 4B 0.999, 8B 1.015; 8B at depth 4096 1.143). Read by the backend and the chain benchmark.
constexpr bool kAttnStagedAuto = true;
constexpr bool kAttnSingleSplitAuto = true;  // docs/PERF.md S15-3/S15-4
// Knob LMFUSE_ATTN_DIRECT: decode steps at lengths up to attn_direct_max (below) replay a second graph
// whose attention is direct (AttnArgs::direct), without the early trigger. Measured (docs/PERF.md
// S18-1..S18-3, `lmfuse bench --ab attn_direct`): tg128 with the bound at 128 0.6B 1.047-1.064,
// 4B 1.024, 8B 1.032 (at 64: 1.036 / 0.996 / 1.003, with the early trigger on 4B/8B); past 128
// the one block per KV head loses (bound 256 at positions 128-255: 4B 0.995, 8B 0.992, 0.6B
// 1.011; bound 512 at 256-383: 0.6B 0.899, 8B 0.958).
constexpr bool kAttnDirectAuto = true;
// Knob LMFUSE_ATTN_HEAD_SPLIT: the direct launch takes one query head per block
// (AttnArgs::heads_per_block = 1) instead of the KV head's whole group (docs/PERF.md S19-2:
// tg128 8B 1.047, 4B 1.040, 0.6B 1.012-1.020).
constexpr bool kAttnHeadSplitAuto = true;
int attn_plan_splits(int n_kv_head, int64_t n_ctx);  // plan-time split count for this device
size_t attn_scratch_floats(int n_head, int head_dim, int n_splits);
void attention_decode(const AttnArgs& a, cudaStream_t s = nullptr);

// ---------------------------------------------------------------------------------------------
// Unfused building blocks (fallbacks, prefill helpers, and references for the fused paths).
// `raw` embedding: GGUF rows (not repacked), types F32, F16, BF16, Q4_0, Q4_1, Q8_0.
// The kernel lets the next PDL-launched kernel (the first QKV GEMV) launch as it starts when
// the early-trigger mask has kEarlyEmbed (set_pdl_early_trigger).
void embed_lookup(DType t, const void* table, int64_t cols, const int* token, float* out,
                  cudaStream_t s = nullptr);
// y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * gamma, rows of n (per-head norm: n = head_dim).
void rmsnorm_rows(const float* x, const float* gamma, float* y, int64_t rows, int n, float eps,
                  cudaStream_t s = nullptr);
// In place, x [n_heads][head_dim], position from device memory; ff: DEVICE [head_dim / 2]
// frequency divisors (Llama 3.1+ rope_freqs) or null.
void rope(float* x, int n_heads, int head_dim, RopeStyle st, float theta, const float* ff, const int* pos,
          cudaStream_t s = nullptr);
// k, v [n_kv][head_dim] fp32 -> caches at *pos.
void kv_store(const float* k, const float* v, uint16_t* k_cache, uint16_t* v_cache, int n_kv,
              int head_dim, int64_t n_ctx, const int* pos, cudaStream_t s = nullptr);
void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s = nullptr);
// y[i] = silu(g[i]) * u[i]
void silu_mul(const float* g, const float* u, float* y, int64_t n, cudaStream_t s = nullptr);
// Greedy: *out = smallest index of the maximum of x[n] (NaN never wins). One launch; scratch
// from argmax_scratch_alloc (self-resetting).
struct ArgmaxScratch {
  void* partial = nullptr;  // device
  unsigned* counter = nullptr;
  int blocks = 0;
};
ArgmaxScratch argmax_scratch_alloc();
void argmax_scratch_free(ArgmaxScratch& a);
// Where a decode step's picked id also goes in chained decode (StepInput::chain_next, queue):
// io[0] = id and io[1] = next_pos (the next step's token and position words), *host = id (mapped
// pinned memory, read by the host after the step's event). Null pointers: not written.
struct ChainOut {
  int* io = nullptr;
  int next_pos = 0;
  int* host = nullptr;
  bool any() const { return io || host; }
};
void argmax(const float* x, int64_t n, int* out, const ArgmaxScratch& scratch,
            cudaStream_t s = nullptr, ChainOut chain = {});
// out[r] = argmax of row r of x [rows][n] (DEVICE), the rule above; one block per row.
void argmax_rows(const float* x, int64_t rows, int64_t n, int* out, cudaStream_t s = nullptr);
// The same outputs from an id already on the device (after sampling): one thread.
void chain_id(const int* id, ChainOut chain, cudaStream_t s);

int device_sm_count();  // current device, cached

// Programmatic dependent launch for gemv and attention_decode (default on): each may start while
// the previous kernel in the stream finishes, prefetching weights before it waits for that
// kernel's results (griddepcontrol.wait). Capture-safe; off = plain stream order. Set it before
// capturing a graph (the launch attribute is recorded at capture).
void set_programmatic_launch(bool on);
// The short kernels of the decode chain (QKV epilogue, attention split and merge) let the next
// kernel launch before their own PDL wait instead of after it (pdl_launch.cuh pdl_wait_trigger;
// knob LMFUSE_PDL_EARLY_TRIGGER), each kernel chosen by a bit. Set before capture.
// kEarlyDirect: the split of a direct launch (AttnArgs::direct), whose next kernel is o_proj.
// kEarlyEmbed: the decode step's embedding lookup (a plain launch, the graph's first kernel),
// whose next kernel is the first layer's QKV GEMV: it triggers as it starts, having no wait.
enum PdlEarly : int {
  kEarlyQkvPost = 1,
  kEarlySplit = 2,
  kEarlyMerge = 4,
  kEarlyDirect = 8,
  kEarlyEmbed = 16,
  kEarlyAll = 31
};
void set_pdl_early_trigger(int mask);
// In-block split-K (gemv.cuh, "Split-K inside a block"): several warps share a row group. Off:
// never. On: every shape the rule of gemv_ksplit gives more than one warp. Auto: the deep shapes
// only, those of more than two column batches per row group (down_proj), whose row group is not
// all loaded before the PDL wait (docs/PERF.md S19). The count of warps depends only on the shape
// and type, so results are deterministic and every prologue/epilogue/width of a shape sums in
// the same order. Measured (docs/PERF.md S19-1, tg128, auto vs off): 8B 1.022-1.027, 4B
// 1.009-1.014, 0.6B untouched (no deep shape); on every shape it loses on qkv and o (4B: 1.007
// against auto's 1.011; sessions 5, 8, 13). Set before capture.
void set_gemv_split_k(Tri mode);
// In 16-warp blocks, 3 warps per row group instead of 2 where 2 would leave each first warp a
// column batch to load after the PDL wait and 3 load them all before it in one round
// (gemv_grid.h gemv_ksplit_rule: 4B down among the benchmark models). Changes that shape's
// summation order, so its bits differ from the narrow block's. Process-wide, set before capture
// (knob LMFUSE_GEMV_SPLIT3).
void set_gemv_split3(bool on);
bool gemv_split3();
// Knob gemv_split3 unset: on (docs/PERF.md S43-2, `--ab gemv_split3` 4B tg128 1.007-1.008; no
// other benchmark model has a shape that takes 3).
constexpr bool kGemvSplit3Auto = true;
// One GEMV block per SM instead of as many as fit (2 for the integer-dot types), so that a block
// of the next PDL-launched kernel fits beside it and issues its weight loads while this one runs.
// Auto (default) = Off, measured slower end to end (docs/PERF.md, session 5); On: every GEMV
// (knob LMFUSE_GEMV_CORESIDENT). Set before capture.
void set_gemv_coresident(Tri mode);
// Integer-dot GEMVs (int8_dot) as one block of 16 warps per SM instead of two of 8: x is
// staged (normalized, quantized) once per SM instead of twice. Same sums, same bits. Default off;
// the backend turns it on for whole models by hidden size (knob LMFUSE_GEMV_WIDE, kWideMinEmbd).
// Set before capture.
void set_gemv_wide(bool on);
bool gemv_wide();
// Integer-dot GEMVs with the Norm prologue (Store and SiluMul epilogues; wide blocks up to hidden
// size 4096, narrow ones from 1056 to 2048) stage x from h and gamma loaded once and kept in
// registers, instead of reloading both after the norm's block reduction. Same bits.
// Process-wide, set before capture (knob LMFUSE_GEMV_KEEP_X).
void set_gemv_keep_x(bool on);
bool gemv_keep_x();
// Knob gemv_keep_x unset: on (docs/PERF.md S42-5, `--ab gemv_keep_x` tg128: 8B 1.020, 4B 1.035).
constexpr bool kGemvKeepXAuto = true;
// Integer-dot GEMVs quantize x to 16-bit codes (the CPU backend's cpu_act16 rule: ~1e-3 of the
// float result on a real model where int8 codes give ~1e-1) instead of int8; the Int8 prologue
// and SiluMulQ (8-bit producer codes) are refused then. Process-wide, like set_gemv_wide (the
// backend sets it from knob cuda_act16 before each launch sequence).
void set_gemv_act16(bool on);
bool gemv_act16();
// Knob cuda_act16 unset: whether the backend takes the 16-bit codes (docs/PERF.md S40).
constexpr bool kCudaAct16Auto = false;
// The K-quant weight types the CUDA backend runs (256-element super-blocks, the packed form above).
constexpr bool kquant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }
// The weight types whose decode GEMVs take the integer-dot path (x quantized to int8, dp4a).
constexpr bool int8_dot(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0 || kquant(t);
}
// Whether a GEMV over type t with GemvArgs::wide = wide runs the 16-warp block (the integer-dot
// types only; the decision gemv() takes).
bool gemv_runs_wide(DType t, Tri wide = Tri::Auto);
// Automatic wide GEMV blocks from this hidden size on, for every GEMV of the model: measured
// (docs/PERF.md session 12, lmfuse bench --ab gemv_wide) 8B (4096) +4.2 %, 4B (2560) +1.0 %,
// 0.6B (1024) -6.8 %; a mix (wide only for the large matrices) lost on 4B (a 16-warp block
// holds all registers of an SM, so it cannot start beside the previous kernel's narrow block).
// The same threshold decides the other size-dependent decode choices (session 13: the PDL early
// trigger and o_proj's x quantized by the merge), so it is asked of large_decode_model.
constexpr int64_t kWideMinEmbd = 2560;
constexpr bool large_decode_model(int64_t n_embd) { return n_embd >= kWideMinEmbd; }
// Whether the direct attention split quantizes o_proj's x (knob attn_xq in direct steps; the
// split + merge steps follow large_decode_model): 8B, not 4B or 0.6B (docs/PERF.md S36-2/S36-3).
constexpr bool attn_xq_direct_auto(int64_t n_embd) { return n_embd >= 4096; }
// The direct graph's length bound. One block per query head (S19-3, `-n 128 -d D`, direct vs
// split + merge over the 128 steps after D): D = 128 0.6B 1.011, 4B 1.043, 8B 1.063; D = 256
// 0.6B 0.911, 4B 1.009, 8B 1.028; D = 384 4B 0.971, 8B 0.987. So 384 from the wide GEMVs'
// hidden size, else 256. One block per KV head: 128 (kAttnDirectAuto's figures).
constexpr int attn_direct_max(bool head_split, int64_t n_embd) {
  return !head_split ? 128 : large_decode_model(n_embd) ? 384 : 256;
}
// The automatic early-trigger mask (docs/PERF.md, S15-3 to S15-6): the QKV epilogue and the split
// on every model (0.6B tg128: 1,769.9 / 1,771.8 t/s against 1,710.4 / 1,718.6 with none), the
// merge too on large models, where o_proj's weights, loaded during the split once the merge has
// triggered, pay for slowing the split (8B: with the merge 555.0 / 551.9, without 546.8 / 546.3;
// 4B with the single split: with 703.3 / 708.8, without 698.9 / 696.7; 0.6B: with 1,708.0,
// without 1,747.8). Re-measured with the trigger as each kernel's first step (S17-5): the merge's
// still pays on 4B (714.2 vs 693.5 t/s without) and 8B (556.3-559.8 vs 540.2). The direct split
// (AttnArgs::direct), whose next kernel is o_proj as the merge's is, never (S18-2, bound 128:
// with it 4B 709.9, 8B 557.3, 0.6B 1,821.2 t/s; without 731.8, 577.0, 1,915.4). The embedding
// on every model (S25-2..S25-4, tg128 against none for the embedding alone, six pairs over three
// device starts: 0.6B +0.3 to +2.1 %, 8B -0.05 to +0.2 %).
constexpr int pdl_early_auto(int64_t n_embd) {
  return kEarlyQkvPost | kEarlySplit | kEarlyEmbed | (large_decode_model(n_embd) ? kEarlyMerge : 0);
}
// The mask for knob LMFUSE_PDL_EARLY_TRIGGER: 1 = every short kernel, 0 = none, auto = pdl_early_auto.
constexpr int pdl_early_mask(Tri knob, int64_t n_embd) {
  return knob == Tri::On ? kEarlyAll : knob == Tri::Off ? 0 : pdl_early_auto(n_embd);
}

}  // namespace lmf::cuda

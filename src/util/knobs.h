// Tri-state knobs: every fusion and policy has one (unset = automatic, 1 = force on, 0 = off).
// They are parsed in one place (this file's table), read from the environment, and can be
// overridden from the CLI (`lmfuse bench --knob NAME=0|1`, `--ab NAME`).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/tri.h"

namespace lmf {

const char* tri_name(Tri t);

struct Knobs {
  Tri ln_fusion = Tri::Auto;        // LMFUSE_LN_FUSION: residual add + RMSNorm folded into the consuming projection
  Tri logits_norm_fusion = Tri::Auto;  // LMFUSE_LOGITS_NORM_FUSION: the output RMSNorm folded into the decode logits GEMV (auto = on)
  Tri qkv_fusion = Tri::Auto;       // LMFUSE_QKV_FUSION: Q/K/V as one launch (leader + followers)
  Tri gateup_fusion = Tri::Auto;    // LMFUSE_GATEUP_FUSION: gate/up as one launch with silu*mul epilogue
  Tri resid_fusion = Tri::Auto;     // LMFUSE_RESID_FUSION: residual add in o_proj / down epilogues
  Tri rope_fusion = Tri::Auto;      // LMFUSE_ROPE_FUSION: q/k norm + RoPE + KV append in the QKV epilogue
  Tri cuda_graph = Tri::Auto;       // LMFUSE_CUDA_GRAPH: decode step captured once and replayed
  Tri gemv_coresident = Tri::Auto;  // LMFUSE_GEMV_CORESIDENT: one GEMV block per SM, room for the next kernel's (auto = short shapes)
  Tri gemv_wide = Tri::Auto;        // LMFUSE_GEMV_WIDE: integer-dot decode GEMVs as one 16-warp block per SM (auto = hidden size >= 2560)
  Tri gemv_keep_x = Tri::Auto;      // LMFUSE_GEMV_KEEP_X: Norm GEMVs (wide <= 4096, narrow <= 2048) stage x from h and gamma kept in registers (auto = on: PERF.md S42-5, S43-1)
  Tri gemv_split3 = Tri::Auto;      // LMFUSE_GEMV_SPLIT3: 3 warps per row group in wide GEMVs where 2 leave a batch after the PDL wait (auto = on, PERF.md S43-2)
  Tri gemv_xq = Tri::Auto;          // LMFUSE_GEMV_XQ: down's x quantized once, by the gate/up GEMV (auto = off: the counting form slower, PERF.md S13-1, S43-6; the run-per-block form even, 8B 0.999, S44-1)
  Tri attn_xq = Tri::Auto;          // LMFUSE_ATTN_XQ: o_proj's x quantized once, by the attention (auto: merge from hidden size 2560, direct split from 4096)
  Tri gemv_split_k = Tri::Auto;     // LMFUSE_GEMV_SPLIT_K: several warps per row group in decode GEMVs (auto = the deep shapes: down_proj)
  Tri qkv_post_pdl = Tri::Auto;     // LMFUSE_QKV_POST_PDL: the QKV epilogue kernel launched with PDL (auto = on)
  Tri qkv_post_room = Tri::Auto;    // LMFUSE_QKV_POST_ROOM: the QKV GEMV leaves SMs free for the epilogue kernel's blocks (auto = wide GEMVs)
  Tri o_room = Tri::Auto;           // LMFUSE_O_ROOM: o_proj's grid leaves SMs free (auto = on, every step)
  Tri gateup_room = Tri::Auto;      // LMFUSE_GATEUP_ROOM: gate/up's grid leaves SMs free for down's blocks where its rounds allow (auto = on)
  Tri down_fit = Tri::Auto;         // LMFUSE_DOWN_FIT: down's grid one block per SM on (the fewest of) the SMs gate/up leaves free, where it fits one round (auto = on)
  Tri rope_table = Tri::Auto;       // LMFUSE_ROPE_TABLE: the QKV epilogue kernel reads RoPE's cos/sin from a per-context table (auto = on)
  Tri attn_staged = Tri::Auto;      // LMFUSE_ATTN_STAGED: decode attention pass 1 from shared-memory stages, a lane per position (auto = on)
  Tri attn_single_split = Tri::Auto;  // LMFUSE_ATTN_SINGLE_SPLIT: staged decode attention takes up to 64 positions in one split (auto = on)
  Tri attn_direct = Tri::Auto;      // LMFUSE_ATTN_DIRECT: short decode steps replay a graph whose attention split writes the output (no merge kernel)
  Tri attn_head_split = Tri::Auto;  // LMFUSE_ATTN_HEAD_SPLIT: the direct attention launch takes one query head per block
  Tri attn_o_fusion = Tri::Auto;    // LMFUSE_ATTN_O_FUSION: o_proj inside the direct decode attention (split-K by head, atomics)
  Tri pdl_early_trigger = Tri::Auto;  // LMFUSE_PDL_EARLY_TRIGGER: short decode kernels release the next before their wait (auto = per kernel: epilogue, split and embedding always, the merge from hidden size 2560)
  Tri decode_pipeline = Tri::Auto;  // LMFUSE_DECODE_PIPELINE: generation queues step i+1 (its token read on the device) before reading step i's token
  Tri sample_two_pass = Tri::Auto;  // LMFUSE_SAMPLE_TWO_PASS: GPU top-k sampling in two passes (auto = on: 110 -> 28 us per step, PERF.md S12-1)
  Tri prefill_inkernel_dequant = Tri::Auto;  // LMFUSE_PREFILL_INKERNEL_DEQUANT
  Tri prefill_route_tune = Tri::Auto;  // LMFUSE_PREFILL_ROUTE_TUNE: time the routes per shape (0 = fitted rule)
  Tri prefill_tc_attention = Tri::Auto;  // LMFUSE_PREFILL_TC_ATTENTION: tensor-core flash attention at prefill
  Tri cuda_prefill = Tri::Auto;     // LMFUSE_CUDA_PREFILL: batched prefill (0 = token by token)
  Tri cpu_act16 = Tri::Auto;        // LMFUSE_CPU_ACT16: CPU quantized matmuls take 16-bit activations (0 = 8-bit)
  Tri cpu_repack = Tri::Auto;       // LMFUSE_CPU_REPACK: CPU Q4_0 / Q4_K weights repacked at load in 16-row panels (decode GEMV lane = row)
  Tri cuda_act16 = Tri::Auto;       // LMFUSE_CUDA_ACT16: CUDA integer-dot GEMVs take 16-bit activation codes (0 = int8)
  Tri fusion = Tri::Auto;           // LMFUSE_FUSION: master switch; 0 = plain unfused graph

  // Reads LMFUSE_* from the environment; a malformed value is an error naming the variable.
  static Knobs from_env();
  // Sets one knob by env name (LMFUSE_QKV_FUSION) or short name (qkv_fusion); value "0"/"1"/"auto".
  void set(std::string_view name, std::string_view value);
  Tri get(std::string_view name) const;
  std::string describe() const;  // "ln_fusion=auto qkv_fusion=1 ..."
};

struct KnobInfo {
  const char* short_name;
  const char* env_name;
  Tri Knobs::*field;
  const char* help;
};
const std::vector<KnobInfo>& knob_table();

}  // namespace lmf

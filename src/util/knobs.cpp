#include "util/knobs.h"

#include <cstdlib>

#include "util/status.h"

namespace lmf {

const char* tri_name(Tri t) { return t == Tri::Auto ? "auto" : t == Tri::On ? "1" : "0"; }

const std::vector<KnobInfo>& knob_table() {
  static const std::vector<KnobInfo> t = {
      {"fusion", "LMFUSE_FUSION", &Knobs::fusion, "master switch: 0 runs the plain unfused graph"},
      {"ln_fusion", "LMFUSE_LN_FUSION", &Knobs::ln_fusion, "residual add + RMSNorm folded into the projection"},
      {"logits_norm_fusion", "LMFUSE_LOGITS_NORM_FUSION", &Knobs::logits_norm_fusion,
       "CUDA decode: the output RMSNorm (and the last residual add, when no residual epilogue took it) folded into the logits GEMV, as ln_fusion folds the layers' norms (auto = on with ln_fusion: measured 0.6B +1.2 %, 4B +0.0-0.3 %, 8B +0.4-0.5 %)"},
      {"qkv_fusion", "LMFUSE_QKV_FUSION", &Knobs::qkv_fusion, "Q/K/V as one launch"},
      {"gateup_fusion", "LMFUSE_GATEUP_FUSION", &Knobs::gateup_fusion, "gate/up as one launch + silu*mul"},
      {"resid_fusion", "LMFUSE_RESID_FUSION", &Knobs::resid_fusion, "residual add in o_proj/down epilogue"},
      {"rope_fusion", "LMFUSE_ROPE_FUSION", &Knobs::rope_fusion, "q/k norm + RoPE + KV append in QKV epilogue"},
      {"cuda_graph", "LMFUSE_CUDA_GRAPH", &Knobs::cuda_graph, "decode step as one replayed CUDA graph"},
      {"gemv_coresident", "LMFUSE_GEMV_CORESIDENT", &Knobs::gemv_coresident,
       "CUDA decode GEMV: one block per SM so the next kernel's blocks prefetch beside it (auto = the short shapes only)"},
      {"gemv_wide", "LMFUSE_GEMV_WIDE", &Knobs::gemv_wide,
       "CUDA decode GEMV (Q4_0/Q4_1/Q8_0): one block of 16 warps per SM, x staged once per SM (auto = hidden size >= 2560)"},
      {"gemv_keep_x", "LMFUSE_GEMV_KEEP_X", &Knobs::gemv_keep_x,
       "CUDA decode GEMV (Norm prologue; wide blocks up to hidden size 4096, narrow ones up to 2048): h and gamma loaded once and kept in registers for the staging of x, instead of reloaded after the norm's block reduction; same bits (auto = on: tg128 8B +2.0 %, 4B +3.5 %)"},
      {"gemv_split3", "LMFUSE_GEMV_SPLIT3", &Knobs::gemv_split3,
       "CUDA decode GEMV (wide, deep shapes such as 4B down_proj): 3 warps per row group where 2 would leave each a column batch to load after the previous kernel's end (auto = on: 4B tg128 +0.7-0.8 %)"},
      {"gemv_xq", "LMFUSE_GEMV_XQ", &Knobs::gemv_xq,
       "CUDA decode: the gate/up GEMV writes down's input already quantized to int8, so down copies it instead of quantizing it per block (auto = off: the cross-block form measured slower, PERF.md S43-6; the run-per-block form even, 8B 0.999, S44-1)"},
      {"attn_xq", "LMFUSE_ATTN_XQ", &Knobs::attn_xq,
       "CUDA decode: the attention merge kernel writes o_proj's input already quantized to int8, so o_proj copies it (auto = hidden size >= 2560 in the split + merge steps, and from hidden size 4096 the direct split too; 1 = the direct split on every size)"},
      {"gemv_split_k", "LMFUSE_GEMV_SPLIT_K", &Knobs::gemv_split_k,
       "CUDA decode GEMV: split the columns of a row group over several warps (auto = the deep shapes only: more than two column batches per row group, i.e. down_proj; 1 = every shape)"},
      {"qkv_post_pdl", "LMFUSE_QKV_POST_PDL", &Knobs::qkv_post_pdl,
       "CUDA decode: launch the QKV epilogue kernel with programmatic dependent launch (auto = on)"},
      {"qkv_post_room", "LMFUSE_QKV_POST_ROOM", &Knobs::qkv_post_room,
       "CUDA decode: the QKV GEMV's grid leaves a few SMs free so the QKV epilogue kernel's blocks become resident while it runs (auto = when the GEMV runs one 16-warp block per SM, whose registers leave no room beside it)"},
      {"o_room", "LMFUSE_O_ROOM", &Knobs::o_room,
       "CUDA decode: o_proj's GEMV grid leaves SMs free: as many as the attention has blocks for a wide (16-warp) GEMV, so all its blocks become resident during the attention; two thirds of them for a small narrow integer-dot o_proj, so gate/up's blocks find room beside it (auto = on, in the direct and the split + merge steps)"},
      {"gateup_room", "LMFUSE_GATEUP_ROOM", &Knobs::gateup_room,
       "CUDA decode: the gate/up GEMV's grid leaves SMs free, so down's blocks become resident (and load their weights) while it runs: at most a sixth of the SMs for a wide GEMV, half for a narrow one, and only as many as add no round through its row groups (integer-dot types; auto = on)"},
      {"down_fit", "LMFUSE_DOWN_FIT", &Knobs::down_fit,
       "CUDA decode: down's GEMV runs one block per SM on the SMs gate/up's grid leaves free (gateup_room), on as few of them as take its row groups in one round with a warp per block to spare, each warp's whole row group loaded before its PDL wait (a short down_proj: 0.6B, 37 of 66 SMs); same results (auto = on)"},
      {"rope_table", "LMFUSE_ROPE_TABLE", &Knobs::rope_table,
       "CUDA: the QKV epilogue kernel reads RoPE's cosine and sine from a table of every position filled at load with the same arithmetic, instead of computing them in every layer (auto = on)"},
      {"attn_staged", "LMFUSE_ATTN_STAGED", &Knobs::attn_staged,
       "CUDA decode: attention pass 1 copies K/V into shared-memory stages and gives each position a lane (0 = the register form)"},
      {"attn_single_split", "LMFUSE_ATTN_SINGLE_SPLIT", &Knobs::attn_single_split,
       "CUDA decode: the staged attention takes lengths up to one stage (64 positions) in a single split, so the merge is a copy (0 = slices of at least 16 positions)"},
      {"attn_direct", "LMFUSE_ATTN_DIRECT", &Knobs::attn_direct,
       "CUDA decode: short steps (to 384 positions from hidden size 2560, else 256; 128 without attn_head_split) replay a second graph whose attention writes the output itself, no merge kernel (auto = on)"},
      {"attn_head_split", "LMFUSE_ATTN_HEAD_SPLIT", &Knobs::attn_head_split,
       "CUDA decode: the direct attention launch (attn_direct) takes one query head per block instead of a KV head's whole group (staged form)"},
      {"attn_o_fusion", "LMFUSE_ATTN_O_FUSION", &Knobs::attn_o_fusion,
       "CUDA decode: in direct steps each attention block also multiplies its head's output by its slice of o_proj (Q4_0, head_dim 128) and adds the products into an accumulator that gate/up folds into the residual: no o_proj launch; the atomics' order makes the last bits vary run to run (auto = off)"},
      {"pdl_early_trigger", "LMFUSE_PDL_EARLY_TRIGGER", &Knobs::pdl_early_trigger,
       "CUDA decode: the QKV epilogue and attention kernels let the next kernel launch before their own wait, the embedding lookup as it starts (auto = the epilogue, the split and the embedding on every model, the merge from hidden size 2560)"},
      {"decode_pipeline", "LMFUSE_DECODE_PIPELINE", &Knobs::decode_pipeline,
       "generation (lmfuse run/chat/bench tg, the API): queue the next decode step, which reads the new token on the device, before the host reads it (auto = on where the backend can: CUDA, greedy or sampling without a repetition penalty)"},
      {"sample_two_pass", "LMFUSE_SAMPLE_TWO_PASS", &Knobs::sample_two_pass,
       "CUDA sampling with top-k <= 1024: many blocks pick each chunk's best, then one block (auto = on; 0 = one block)"},
      {"prefill_inkernel_dequant", "LMFUSE_PREFILL_INKERNEL_DEQUANT", &Knobs::prefill_inkernel_dequant,
       "prefill: in-kernel dequant GEMM (1) vs dequant-once + vendor GEMM (0)"},
      {"prefill_route_tune", "LMFUSE_PREFILL_ROUTE_TUNE", &Knobs::prefill_route_tune,
       "CUDA prefill: pick each product's route by timing it on this GPU (0 = the fitted rule)"},
      {"prefill_tc_attention", "LMFUSE_PREFILL_TC_ATTENTION", &Knobs::prefill_tc_attention,
       "CUDA prefill: flash attention on tensor cores (0 = the fp32 CUDA-core kernel)"},
      {"cuda_prefill", "LMFUSE_CUDA_PREFILL", &Knobs::cuda_prefill,
       "CUDA: batched prefill (0 = prompts token by token through the decode step)"},
      {"cpu_act16", "LMFUSE_CPU_ACT16", &Knobs::cpu_act16,
       "CPU: 16-bit activation blocks in quantized matmuls (0 = 8-bit, faster, less exact)"},
      {"cpu_repack", "LMFUSE_CPU_REPACK", &Knobs::cpu_repack,
       "CPU: Q4_0 / Q4_K weights repacked at load in panels of 16 rows for the AVX-512 decode GEMV (0 = row-major kernels on the file's layout)"},
      {"cuda_act16", "LMFUSE_CUDA_ACT16", &Knobs::cuda_act16,
       "CUDA: Q4_0/Q4_1/Q8_0 decode GEMVs quantize x to 16-bit codes, the CPU's cpu_act16 rule (two dp4a per weight word), instead of int8; prefill then takes no int8 activations either, and the 8-bit producer codes (gemv_xq, attn_xq, attn_o_fusion) are off"},
  };
  return t;
}

static Tri parse_tri(std::string_view name, std::string_view v) {
  if (v == "1" || v == "on" || v == "true") return Tri::On;
  if (v == "0" || v == "off" || v == "false") return Tri::Off;
  if (v.empty() || v == "auto") return Tri::Auto;
  LMF_FAIL("knob ", name, ": expected 0, 1 or auto, got '", v, "'");
}

static const KnobInfo& find_knob(std::string_view name) {
  for (const auto& k : knob_table())
    if (name == k.short_name || name == k.env_name) return k;
  std::string all;
  for (const auto& k : knob_table()) all += std::string(all.empty() ? "" : ", ") + k.short_name;
  LMF_FAIL("unknown knob '", name, "' (known: ", all, ")");
}

Knobs Knobs::from_env() {
  Knobs k;
  for (const auto& info : knob_table())
    if (const char* v = std::getenv(info.env_name)) k.*(info.field) = parse_tri(info.env_name, v);
  return k;
}

void Knobs::set(std::string_view name, std::string_view value) {
  const auto& info = find_knob(name);
  this->*(info.field) = parse_tri(info.env_name, value);
}

Tri Knobs::get(std::string_view name) const { return this->*(find_knob(name).field); }

std::string Knobs::describe() const {
  std::string s;
  for (const auto& k : knob_table()) {
    if (!s.empty()) s += ' ';
    s += cat(k.short_name, "=", tri_name(this->*(k.field)));
  }
  return s;
}

}  // namespace lmf

// The CUDA backend (batch-1 decode). Weights are uploaded once, repacked into the kernels'
// 16-byte tiled layout: Q|K|V concatenated (one weight; the unfused projections are row views
// of it), gate/up interleaved for the SiLU·mul epilogue (or separate when that fusion is off).
// prepare() accepts or rejects each fusion group; run() only launches what prepare chose, so
// the whole step is captured once as a CUDA graph and replayed per token (token id and position
// are read from device memory).
//
// Prefill (T > 1, issue 6): graphs of up to kPrefillChunk tokens (the Session splits longer
// prompts into chunks, so activation memory stays bounded) run op by op, without a CUDA graph,
// through the batched kernels of prepare_prefill / prefill.h: Q|K|V, gate|up and the residual
// epilogues as fusion groups (knobs as for decode), each matrix product through the route the
// measured rule picks (in-kernel int8 tensor-core GEMM, dequant-once + cuBLAS, or the GEMV per
// token), attention on tensor cores. A product over a single row (the last-token logits) keeps
// the decode GEMV.
//
// Batch steps (Graph::paged, StepInput::entries; issue 52): the runtime owns a paged KV cache
// whose pools this backend holds (alloc_kv); a step of T rows from several sequences, each row at
// its own position, runs like a prefill graph (prepare_prefill's groups and routes, op by op),
// with per-row positions and cache slots (paged.h) and the paged attention. The one-sequence
// path above keeps its own cache (own_kv), so a Session stays on the replayed graph.
#include "backend/cuda/cuda_backend.h"

#include <chrono>

#include "format/quant/half.h"
#include "format/quant/transcode.h"

namespace lmf {
namespace cuda_impl {
namespace {

// A view of rows [r0, r0 + n) of a repacked weight (rows are contiguous in both the data and
// the scale arrays, so a view is a pointer offset).
DeviceWeight row_view(const DeviceWeight& w, int64_t r0, int64_t n) {
  DeviceWeight v = w;
  const size_t qs = w.q_bytes / size_t(w.rows), ss = w.scale_bytes / size_t(w.rows);
  v.q = w.q + size_t(r0) * qs;
  v.scales = w.scales ? w.scales + size_t(r0) * ss : nullptr;
  v.rows = n;
  v.q_bytes = qs * size_t(n);
  v.scale_bytes = ss * size_t(n);
  return v;
}

// The GEMVs read F16/BF16/Q8_0/Q4_0/Q4_1 and the K-quants Q4_K/Q5_K/Q6_K. F32 matrices (rare:
// tiny test models) are stored as F16 on the GPU; that rounding (2^-11 relative) is far inside
// the float-weight tolerance. Q3_K, IQ4_NL and Q5_0 are re-encoded exactly into Q6_K / Q8_0
// (format/quant/transcode.h: the same values, more bytes) until they have kernels of their own.
struct GpuSource {
  DType type;
  const void* data;
  std::vector<uint8_t> converted;
};
GpuSource gpu_source(const Weight& w) {
  GpuSource s{w.type, w.data, {}};
  if (w.type == DType::F32) {
    const auto* f = reinterpret_cast<const float*>(w.data);
    s.converted.resize(size_t(w.rows * w.cols) * 2);
    auto* h = reinterpret_cast<uint16_t*>(s.converted.data());
    for (size_t i = 0; i < size_t(w.rows * w.cols); ++i) h[i] = f32_to_fp16(f[i]);
    s.type = DType::F16;
    s.data = s.converted.data();
  } else if (const DType t = quant_transcode_target(w.type); t != w.type) {
    const size_t in = row_bytes(w.type, w.cols), out = row_bytes(t, w.cols);
    s.converted.resize(out * size_t(w.rows));
    const auto* src = static_cast<const uint8_t*>(w.data);
    for (int64_t r = 0; r < w.rows; ++r)
      quant_transcode_row(w.type, src + size_t(r) * in, w.cols, s.converted.data() + size_t(r) * out);
    s.type = t;
    s.data = s.converted.data();
  }
  return s;
}
// Bytes of w on the GPU before repacking (its re-encoding's, where it has one).
uint64_t gpu_source_bytes(const Weight& w) {
  const DType t = quant_transcode_target(w.type);
  return t == w.type ? w.nbytes : uint64_t(row_bytes(t, w.cols)) * uint64_t(w.rows);
}

}  // namespace

void CudaBackend::load(const Model& m) {
  if (m.tp.size > 1) LMF_FAIL(kNoTpOnCuda, " (this model is rank ", m.tp.rank, " of ", m.tp.size, ")");
  m_ = &m;
  const auto& hp = m.hp;
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const Knobs& k = opts_.knobs;
  const bool rope_table = tri_resolve(k.rope_table, true);
  const uint64_t kv_bytes = hp.kv_cache_bytes(opts_.n_ctx);
  const uint64_t rope_bytes = rope_table ? cuda::rope_table_bytes(opts_.n_ctx, int(hp.head_dim)) : 0;
  // The file's weights, the re-encoded ones at their size on the GPU.
  uint64_t weights = m.weight_bytes();
  auto grow = [&](const Weight& w) { weights += gpu_source_bytes(w) - w.nbytes; };
  for (const auto& W : m.layers)
    for (const Weight* w : {&W.wq, &W.wk, &W.wv, &W.wo, &W.w_gate, &W.w_up, &W.w_down}) grow(*w);
  grow(m.tok_embd);
  if (!hp.tied_output) grow(m.output);
  const uint64_t need = weights + (hp.tied_output ? m.tok_embd.nbytes : 0) + kv_bytes + rope_bytes;
  constexpr uint64_t kWorkspace = 256ull << 20;  // activations, prefill scratch, cuBLAS workspace
  if (need + kWorkspace > free_b)
    LMF_FAIL("model needs about ", ((need + kWorkspace) >> 20), " MiB of GPU memory (weights + KV cache for ",
             opts_.n_ctx, " positions + ", (kWorkspace >> 20), " MiB of working space); ", (free_b >> 20),
             " MiB are free on ", dev_name_, " (a smaller -c lowers the KV cache)");
  const bool gateup_fused = k.fusion != Tri::Off && k.gateup_fusion != Tri::Off;

  const auto t_load = std::chrono::steady_clock::now();
  layers_.resize(size_t(hp.n_layer));
  // The repacking runs on a pool of the load's own (-t threads, default the machine's cores):
  // rows are independent, the bytes the same. The packed rows go straight into pinned staging
  // buffers whose copies overlap the next rows' packing (upload.h). 8B from the page cache: 2.3-2.6
  // s with a packed copy in pageable memory and synchronous uploads, 0.24-0.26 s this way
  // (docs/PERF.md S42-1).
  ThreadPool pool(opts_.n_threads > 0 ? opts_.n_threads : 0);
  cuda::WeightUploader uploader(stream_, &pool);
  auto put = [&](DType t, int64_t rows, int64_t cols, const cuda::RowSource& src) {
    DeviceWeight d = uploader.upload(t, rows, cols, src);
    decode_bytes_ += cuda::weight_bytes(d);
    return d;
  };
  // One weight's rows as they are (F32 stored as F16: gpu_source).
  auto put_weight = [&](const Weight& w) {
    GpuSource s = gpu_source(w);
    return put(s.type, w.rows, w.cols, cuda::concat_source(s.type, {{s.data, w.rows}}, w.cols));
  };
  auto upload = [&](LayerDev& L, DeviceWeight d) {
    L.own.push_back(d);
    return d;
  };
  // Progress (BackendOptions::load_progress): the source bytes of each layer's projections as
  // they are repacked and uploaded, then the output and embedding tables as the last part.
  const uint64_t load_total = m.weight_bytes();
  uint64_t load_done = 0;
  auto progress = [&](uint64_t bytes, int64_t parts_done) {
    load_done = std::min(load_total, load_done + bytes);
    if (opts_.load_progress) opts_.load_progress(load_done, load_total, parts_done, hp.n_layer + 1);
  };
  for (int l = 0; l < int(hp.n_layer); ++l) {
    const auto& W = m.layers[size_t(l)];
    auto& L = layers_[size_t(l)];
    for (const Weight* v : {&W.attn_norm, &W.ffn_norm, &W.q_norm, &W.k_norm})
      if (v->data) upload_f32(*v);
    if (W.wq.type == W.wk.type && W.wk.type == W.wv.type) {
      GpuSource q = gpu_source(W.wq), k = gpu_source(W.wk), v = gpu_source(W.wv);
      L.qkv = upload(L, put(q.type, W.wq.rows + W.wk.rows + W.wv.rows, hp.n_embd,
                            cuda::concat_source(q.type, {{q.data, W.wq.rows}, {k.data, W.wk.rows}, {v.data, W.wv.rows}},
                                                hp.n_embd)));
      mats_[&W.wq] = row_view(L.qkv, 0, W.wq.rows);
      mats_[&W.wk] = row_view(L.qkv, W.wq.rows, W.wk.rows);
      mats_[&W.wv] = row_view(L.qkv, W.wq.rows + W.wk.rows, W.wv.rows);
    } else {
      for (const Weight* w : {&W.wq, &W.wk, &W.wv}) mats_[w] = upload(L, put_weight(*w));
    }
    if (hp.qkv_bias) {
      const size_t nq = size_t(W.bq.cols), nk = size_t(W.bk.cols);
      CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&L.qkv_bias), (nq + 2 * nk) * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(L.qkv_bias, W.bq.data, nq * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(L.qkv_bias + nq, W.bk.data, nk * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(L.qkv_bias + nq + nk, W.bv.data, nk * 4, cudaMemcpyHostToDevice));
      vecs_[&W.bq] = L.qkv_bias;
      vecs_[&W.bk] = L.qkv_bias + nq;
      vecs_[&W.bv] = L.qkv_bias + nq + nk;
    }
    mats_[&W.wo] = upload(L, put_weight(W.wo));
    if (gateup_fused && W.w_gate.type == W.w_up.type) {
      GpuSource gs = gpu_source(W.w_gate), us = gpu_source(W.w_up);
      L.gate_up = upload(L, put(gs.type, 2 * W.w_gate.rows, W.w_gate.cols,
                                cuda::gate_up_source(gs.type, gs.data, us.data, W.w_gate.cols)));
      gate_up_layer_[&W.w_gate] = l;
      gate_up_layer_[&W.w_up] = l;
    } else {
      mats_[&W.w_gate] = upload(L, put_weight(W.w_gate));
      mats_[&W.w_up] = upload(L, put_weight(W.w_up));
    }
    mats_[&W.w_down] = upload(L, put_weight(W.w_down));
    const size_t cache = size_t(opts_.n_ctx) * size_t(hp.kv_dim()) * sizeof(uint16_t);
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&L.kc), cache));
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&L.vc), cache));
    CUDA_CHECK(cudaMemset(L.kc, 0, cache));
    CUDA_CHECK(cudaMemset(L.vc, 0, cache));
    L.counters = cuda::qkv_counters_alloc(int(hp.n_head), int(hp.n_head_kv));
    uint64_t layer_bytes = 0;
    for (const Weight* w : {&W.wq, &W.wk, &W.wv, &W.wo, &W.w_gate, &W.w_up, &W.w_down, &W.attn_norm, &W.ffn_norm,
                            &W.q_norm, &W.k_norm, &W.bq, &W.bk, &W.bv})
      layer_bytes += w->nbytes;
    progress(layer_bytes, l + 1);
  }
  for (const auto& [w, dw] : mats_) pf_w_elems_ = std::max(pf_w_elems_, size_t(dw.rows * dw.cols));
  for (const auto& L : layers_)
    if (L.gate_up.q) pf_w_elems_ = std::max(pf_w_elems_, size_t(L.gate_up.rows / 2 * L.gate_up.cols));
  upload_f32(m.output_norm);
  extra_.push_back(put_weight(m.output));
  mats_[&m.output] = extra_.back();
  {
    const GpuSource e = quant_transcode_target(m.tok_embd.type) != m.tok_embd.type
                            ? gpu_source(m.tok_embd)
                            : GpuSource{m.tok_embd.type, m.tok_embd.data, {}};
    embd_type_ = e.type;
    embd_raw_ = uploader.upload_bytes(e.data, e.converted.empty() ? m.tok_embd.nbytes : e.converted.size());
  }
  buffers_.push_back(embd_raw_);
  uploader.finish();
  progress(load_total, hp.n_layer + 1);  // the rest: output norm, output, embedding
  LMF_LOG(Info, "cuda load: ", (uploader.bytes() >> 20), " MiB in ",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(), " s (packing ",
          uploader.pack_seconds(), " s, waiting for copies ", uploader.wait_seconds(), " s; ", pool.size(),
          " threads); KV cache ", (kv_bytes >> 20), " MiB for ", opts_.n_ctx, " positions");
  decode_bytes_ += uint64_t(hp.n_layer) * 2 * uint64_t(hp.n_embd) * 4;  // norm vectors
  if (!hp.rope_freq_factors.empty()) {
    const size_t n = hp.rope_freq_factors.size() * sizeof(float);
    float* ff = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ff), n));
    CUDA_CHECK(cudaMemcpy(ff, hp.rope_freq_factors.data(), n, cudaMemcpyHostToDevice));
    buffers_.push_back(ff);
    rope_ff_ = ff;
  }
  // RoPE's cosine and sine of every position, for the QKV epilogue kernel: computed once here
  // instead of in every layer of every step (docs/PERF.md S33-3: 4B/8B's epilogue kernel waited
  // on its own powf + sincosf). Same values (rope_table_alloc uses the kernel's rope_cs).
  if (rope_table) {
    float2* t = cuda::rope_table_alloc(opts_.n_ctx, int(hp.head_dim), hp.rope_theta, rope_ff_, stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    buffers_.push_back(t);
    rope_table_ = t;
  }
}

void CudaBackend::prepare(Graph& g) {
  for (const Op& op : g.ops)
    if (op.kind == OpKind::AllReduce) LMF_FAIL(kNoTpOnCuda, " (op ", op.name, ")");
  if (g.n_tokens > 1 || g.paged) {
    prepare_prefill(g);
    return;
  }
  const Knobs& k = opts_.knobs;
  const bool fusion = k.fusion != Tri::Off;
  const auto& hp = m_->hp;
  // Decode policies that depend on the knobs and the shape only (not on the groups).
  qkv_epilogue_in_gemv_ = tri_resolve(k.rope_fusion, false);  // else its own kernel after the GEMV
  // Lost 2-3 % in session 4, when every GEMV filled the SMs; with the short GEMVs at one block
  // per SM it wins on every size (docs/PERF.md, session 7: 0.6B +5.0 %, 4B +1.3 %, 8B +1.9 %).
  // launch_pdl still honours set_programmatic_launch.
  qkv_post_pdl_ = tri_resolve(k.qkv_post_pdl, true);
  qkv_post_room_ = k.qkv_post_room;
  o_room_ = tri_resolve(k.o_room, true);
  gateup_room_ = tri_resolve(k.gateup_room, true);
  down_fit_ = tri_resolve(k.down_fit, true);
  // Not faster (docs/PERF.md): the first, counting form lost (S13-1: 0.94x 8B, 0.96x 0.6B; S43-6:
  // 0.93x), its cross-block tail ~4 µs per 8B layer; today's form, each block quantizing the runs
  // of y it made, is even (S44-1: 8B 0.999, 4B 0.996): down is 1.2 µs shorter per 8B layer, gate/up
  // 1.1 µs longer. Automatic = off.
  gemv_xq_ = k.fusion != Tri::Off && tri_resolve(k.gemv_xq, false) && !act16_;
  // A kernel form, not a fusion (so not under the master switch); automatic: kAttnStagedAuto.
  attn_staged_ = tri_resolve(k.attn_staged, cuda::kAttnStagedAuto);
  // A slicing policy of the staged form, not a fusion; automatic: kAttnSingleSplitAuto.
  attn_single_split_ = tri_resolve(k.attn_single_split, cuda::kAttnSingleSplitAuto);
  // Short lengths: the split writes the output, no merge kernel (a second graph; docs/PERF.md S18).
  // The direct launch with one query head per block (staged form; a kernel form, not a fusion;
  // docs/PERF.md S19-2: tg128 8B 1.047, 4B 1.040, 0.6B 1.012-1.020, two heads per block on 8B/4B
  // about half of that).
  attn_direct_hpb_ = attn_staged_ && tri_resolve(k.attn_head_split, cuda::kAttnHeadSplitAuto) ? 1 : 0;
  attn_direct_max_ = fusion && tri_resolve(k.attn_direct, cuda::kAttnDirectAuto)
                         ? cuda::attn_direct_max(attn_direct_hpb_ > 0, hp.n_embd)
                         : 0;
  // o_proj's x quantized by the attention's merge kernel. Measured
  // per model (docs/PERF.md, session 13, `--ab attn_xq`, two runs): 4B 1.012 / 1.012, 8B 1.013 /
  // 0.999, 0.6B 0.983 / 0.993: automatic = on from the wide GEMVs' hidden size.
  attn_xq_ = fusion && tri_resolve(k.attn_xq, cuda::large_decode_model(hp.n_embd)) && !act16_;
  // In the direct steps' graph the codes come from the direct split's tail, on its critical path:
  // slower where o_proj is small (docs/PERF.md S36-2/S36-3, `--ab attn_xq` with every tg128 step
  // direct: 0.6B 0.967, 4B 0.985, 0.993 and 0.991), faster on 8B's (1.005, 1.006 twice), whose
  // staging of x in o_proj's blocks costs more than the codes cost the split (S18-6/S18-7 had
  // measured 8B 0.993-0.998 before the grids of sessions 33-35). Automatic from hidden size 4096.
  attn_xq_direct_ = attn_xq_ && tri_resolve(k.attn_xq, cuda::attn_xq_direct_auto(hp.n_embd));
  // o_proj inside the direct attention: automatic off (docs/PERF.md S23-1: tg128 0.6B 1.011-1.032,
  // 4B 0.971-0.976, 8B 0.900-0.907; its atomics make the last bits vary run to run). Its residual
  // add then folds into gate/up in every step (the split + merge steps launch o_proj plainly), so
  // o_proj's residual-epilogue group is not taken.
  attn_o_ = fusion && tri_resolve(k.attn_o_fusion, false) && attn_o_possible() && !act16_;
  // Residual epilogues first: an add folded into o_proj/down is not available to a norm prologue.
  std::vector<int> adds_taken;
  // Whether a group's residual add is still free to fold into its norm prologue.
  auto add_free = [&](const FusionGroup& grp) {
    return grp.add >= 0 && std::find(adds_taken.begin(), adds_taken.end(), grp.add) == adds_taken.end();
  };
  for (auto& grp : g.groups) {
    if (grp.kind != GroupKind::OResid && grp.kind != GroupKind::DownResid) continue;
    const Op& lead = g.ops[size_t(grp.leader())];
    if (!fusion || !tri_resolve(k.resid_fusion, true)) {
      grp.reject_reason = "knob off";
      continue;
    }
    if (attn_o_ && grp.kind == GroupKind::OResid) {
      grp.reject_reason = "o_proj runs in the direct attention (attn_o_fusion), its add folds into gate/up";
      continue;
    }
    if (!mats_.count(lead.w) || !cuda::gemv_supported(lead.w->type, Prologue::None, Epilogue::Residual)) {
      grp.reject_reason = "no residual-epilogue kernel for this weight";
      continue;
    }
    grp.accepted = grp.fold_epilogue = true;
    adds_taken.push_back(grp.epilogue[0]);
  }
  for (auto& grp : g.groups) {
    if (grp.kind != GroupKind::QKV && grp.kind != GroupKind::GateUp) continue;
    const bool is_qkv = grp.kind == GroupKind::QKV;
    const LayerDev& L = layers_[size_t(grp.layer)];
    if (!fusion || !tri_resolve(is_qkv ? k.qkv_fusion : k.gateup_fusion, true)) {
      grp.reject_reason = "knob off";
      continue;
    }
    const DeviceWeight& w = is_qkv ? L.qkv : L.gate_up;
    if (!w.q) {
      grp.reject_reason = "weights not packed for this fusion (mixed types or knob off at load)";
      continue;
    }
    const bool ln = grp.norm >= 0 && tri_resolve(k.ln_fusion, true);
    const bool add = ln && add_free(grp);
    const Prologue pro = add ? Prologue::AddNorm : ln ? Prologue::Norm : Prologue::None;
    const Epilogue epi = is_qkv ? Epilogue::QKV : Epilogue::SiluMul;
    if (!cuda::gemv_supported(w.type, pro, epi)) {
      grp.reject_reason = "no kernel instance for this prologue/epilogue";
      continue;
    }
    if (is_qkv && ((hp.head_dim != 32 && hp.head_dim != 64 && hp.head_dim != 128) || grp.epilogue.empty())) {
      grp.reject_reason = "QKV epilogue needs head_dim 32, 64 or 128";
      continue;
    }
    grp.accepted = true;
    grp.fold_norm = ln;
    grp.fold_add = add;
    // The leader runs the whole epilogue either way: inside the GEMV (rope_fusion 1) or as one
    // small kernel after a plain GEMV (rope_fusion 0). Automatic: the separate kernel, measured
    // faster (docs/PERF.md, run 10: qwen3-8b Q4_0 tg128 446.4 vs 436.8 t/s, 0.6b 1541 vs 1387):
    // the in-GEMV epilogue's per-row-group fence and counters stall the weight stream.
    grp.fold_epilogue = true;
  }
  // The output norm folded into the logits GEMV (Norm prologue; AddNorm when the last residual
  // add was not taken by down's epilogue), as the layers' norms fold into qkv and gate/up: one
  // launch fewer per token, the same bits. Automatic on: tg128 0.6B 1.012, 4B 1.003 and 1.000,
  // 8B 1.005, 1.005 and 1.004 (docs/PERF.md S36-2/S36-3; S24-4 had measured 8B 0.997, before the
  // grids of sessions 33-35, and kept it off from hidden size 4096).
  for (auto& grp : g.groups) {
    if (grp.kind != GroupKind::Logits) continue;
    const Op& lead = g.ops[size_t(grp.leader())];
    if (!fusion || !tri_resolve(k.ln_fusion, true) || !tri_resolve(k.logits_norm_fusion, true)) {
      grp.reject_reason = "knob off";
      continue;
    }
    const bool add = add_free(grp);
    if (!mats_.count(lead.w) || !cuda::gemv_supported(lead.w->type, add ? Prologue::AddNorm : Prologue::Norm, Epilogue::Store)) {
      grp.reject_reason = "no kernel instance for this prologue/epilogue";
      continue;
    }
    if (g.ops[size_t(grp.norm)].row_begin != 0 || g.t(lead.out[0]).rows != 1) {
      grp.reject_reason = "the norm reads rows past the first";
      continue;
    }
    grp.accepted = grp.fold_norm = true;
    grp.fold_add = add;
  }
  // Every layer's gate/up must have taken the residual add whose block output is o_proj's (the
  // accumulator replaces it in direct steps); else o_proj launches in every step (still exact).
  if (attn_o_) {
    for (const auto& grp : g.groups) {
      if (grp.kind != GroupKind::GateUp) continue;
      const Op* o = nullptr;
      for (const Op& op : g.ops)
        if (op.layer == grp.layer && is_o_proj(op)) o = &op;
      if (!grp.accepted || !grp.fold_add || !o || g.ops[size_t(grp.add)].in[1] != o->out[0]) attn_o_ = false;
    }
  }
  if (attn_o_ && !o_acc_) {
    const size_t n = size_t(hp.n_layer) * size_t(hp.n_embd);
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&o_acc_), n * sizeof(float)));
    CUDA_CHECK(cudaMemset(o_acc_, 0, n * sizeof(float)));
    buffers_.push_back(o_acc_);
  }
}

// The shapes and forms the o_proj fusion has a kernel for (AttnArgs::wo), from the policies
// prepare has set: direct steps with one query head per block (staged) at head_dim 128, every
// layer's o_proj Q4_0, gate/up able to fold the add, and two
// layers or more (a layer zeroes the previous one's accumulator).
bool CudaBackend::attn_o_possible() const {
  const Knobs& k = opts_.knobs;
  const auto& hp = m_->hp;
  if (attn_direct_max_ == 0 || attn_direct_hpb_ != 1 || hp.head_dim != 128 ||
      hp.n_layer < 2 || k.gateup_fusion == Tri::Off || k.ln_fusion == Tri::Off)
    return false;
  for (const auto& W : m_->layers) {
    const auto it = mats_.find(&W.wo);
    if (it == mats_.end() || it->second.type != DType::Q4_0) return false;  // (no model here has an o bias)
  }
  return true;
}

void CudaBackend::finalize(Graph& g) {
  GraphState& st = states_[&g];
  free_state(st);
  const auto& hp = m_->hp;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st.arena), std::max<size_t>(g.total_bytes, 256)));
  st.arena_bytes = g.total_bytes;
  if (g.n_tokens > 1 || g.paged) {
    ensure_prefill_scratch();
    // gateup_tmp: a single-row product over an interleaved gate/up weight (decode fallback path).
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st.gateup_tmp), size_t(2 * hp.n_ff) * sizeof(float)));
    return;
  }
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st.qkv_raw), size_t(hp.q_dim() + 2 * hp.kv_dim()) * sizeof(float)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st.gateup_tmp), size_t(2 * hp.n_ff) * sizeof(float)));
  st.attn_splits = cuda::attn_plan_splits(int(hp.n_head_kv), opts_.n_ctx);
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st.attn_partial),
                        cuda::attn_scratch_floats(int(hp.n_head), int(hp.head_dim), st.attn_splits) * sizeof(float)));
  plan_xq(g, st);
}

// The producer -> GEMV pairs whose x is quantized once, by the producer (knobs attn_xq: the
// attention merge for o_proj; gemv_xq: the gate/up GEMV for down), decided once per graph. A
// pair: the producer's output is the GEMV's input, nothing else launches between them (so the
// shared scratch is not touched in between; the pairs of a step follow one another, each reader
// ending before the next writer passes its PDL wait), the GEMV (and a gate/up producer) has its
// integer-dot instance, and the vector is whole 32-blocks.
void CudaBackend::plan_xq(const Graph& g, GraphState& st) {
  st.xq_role.assign(g.ops.size(), XqRole::None);
  if (g.n_tokens != 1 || !(attn_xq_ || gemv_xq_)) return;
  auto back_to_back = [&](int from, int to, int own_group) {  // own_group: the writer's (or -1)
    for (int i = from + 1; i < to; ++i)
      if (g.ops[size_t(i)].launch && (own_group < 0 || g.ops[size_t(i)].group != own_group)) return false;
    return from < to;
  };
  auto supported = [&](const Weight* w, Prologue pro, Epilogue epi) {
    const auto it = mats_.find(w);
    return it != mats_.end() && cuda::gemv_supported(it->second.type, pro, epi);
  };
  for (const FusionGroup& r : g.groups) {
    const Op& reader = g.ops[size_t(r.leader())];
    const bool o = r.kind == GroupKind::OResid && attn_xq_, down = r.kind == GroupKind::DownResid && gemv_xq_;
    if (!r.accepted || !(o || down) || g.t(reader.in[0]).cols % 32 != 0 ||
        !supported(reader.w, Prologue::Int8, Epilogue::Residual))
      continue;
    int writer = -1;
    if (o) {
      for (int i = r.leader() - 1; i >= 0 && writer < 0; --i)
        if (g.ops[size_t(i)].kind == OpKind::Attention && g.ops[size_t(i)].out[0] == reader.in[0] &&
            back_to_back(i, r.leader(), -1))
          writer = i;
    } else {
      for (size_t w = 0; w < g.groups.size() && writer < 0; ++w) {
        const FusionGroup& gu = g.groups[w];
        if (gu.kind == GroupKind::GateUp && gu.accepted && gu.fold_epilogue && !gu.epilogue.empty() &&
            g.ops[size_t(gu.epilogue[0])].out[0] == reader.in[0] &&
            cuda::gemv_supported(layers_[size_t(gu.layer)].gate_up.type, Prologue::None, Epilogue::SiluMulQ) &&
            back_to_back(gu.leader(), r.leader(), int(w)))
          writer = gu.leader();
      }
    }
    if (writer < 0) continue;
    st.xq_role[size_t(writer)] = XqRole::Write;
    st.xq_role[size_t(r.leader())] = XqRole::Read;
  }
  const auto& hp = m_->hp;
  if (std::find(st.xq_role.begin(), st.xq_role.end(), XqRole::Read) != st.xq_role.end())
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st.xq), cuda::gemv_xq_bytes(std::max(hp.q_dim(), hp.n_ff))));
}

void CudaBackend::matmul(const Weight* w, const float* x, float* y, const float* bias) {
  cuda::GemvArgs a;
  auto it = mats_.find(w);
  LMF_CHECK(it != mats_.end(), "matrix not uploaded: ", w->name);
  a.w = &it->second;
  a.in = x;
  a.y = y;
  a.bias = bias;
  a.tl = tl_op_;
  cuda::gemv(Prologue::None, Epilogue::Store, a, stream_);
}

void CudaBackend::launch_op(Graph& g, GraphState& st, const Op& op) {
  const auto& hp = m_->hp;
  auto IN = [&](int i) { return ptr(st, g, op.in[size_t(i)]); };
  auto OUT = [&](int i) { return ptr(st, g, op.out[size_t(i)]); };
  const int* d_tok = d_io_;
  const int* d_pos = d_io_ + 1;
  switch (op.kind) {
    case OpKind::Embed:
      cuda::embed_lookup(embd_type_, embd_raw_, op.w->cols, d_tok, OUT(0), stream_);
      break;
    case OpKind::RmsNorm: {
      const GTensor& y = g.t(op.out[0]);
      cuda::rmsnorm_rows(IN(0) + op.row_begin * y.cols, dev_vec(*op.w), OUT(0), y.rows, int(y.cols), op.eps, stream_);
      break;
    }
    case OpKind::MatMul: {
      auto gu = gate_up_layer_.find(op.w);
      if (gu == gate_up_layer_.end()) {
        matmul(op.w, IN(0), OUT(0), op.b ? dev_vec(*op.b) : nullptr);
        break;
      }
      // Unfused fallback over an interleaved gate/up weight: one GEMV computes both (rows
      // alternate gate, up), the gate op launches it and de-interleaves; the up op follows.
      const LayerDev& L = layers_[size_t(gu->second)];
      const bool is_gate = op.w == &m_->layers[size_t(gu->second)].w_gate;
      if (is_gate) {
        cuda::GemvArgs a;
        a.w = &L.gate_up;
        a.in = IN(0);
        a.y = st.gateup_tmp;
        a.tl = tl_op_;
        cuda::gemv(Prologue::None, Epilogue::Store, a, stream_);
        CUDA_CHECK(cudaMemcpy2DAsync(OUT(0), sizeof(float), st.gateup_tmp, 2 * sizeof(float), sizeof(float),
                                     size_t(hp.n_ff), cudaMemcpyDeviceToDevice, stream_));
      } else {
        CUDA_CHECK(cudaMemcpy2DAsync(OUT(0), sizeof(float), st.gateup_tmp + 1, 2 * sizeof(float), sizeof(float),
                                     size_t(hp.n_ff), cudaMemcpyDeviceToDevice, stream_));
      }
      break;
    }
    case OpKind::HeadNorm: {
      const GTensor& x = g.t(op.in[0]);
      cuda::rmsnorm_rows(IN(0), dev_vec(*op.w), OUT(0), x.cols / op.head_dim, op.head_dim, op.eps, stream_);
      break;
    }
    case OpKind::Rope: {
      const GTensor& x = g.t(op.in[0]);
      CUDA_CHECK(cudaMemcpyAsync(OUT(0), IN(0), x.bytes(), cudaMemcpyDeviceToDevice, stream_));
      cuda::rope(OUT(0), int(x.cols / op.head_dim), op.head_dim,
                 op.rope_neox ? cuda::RopeStyle::NeoX : cuda::RopeStyle::Adjacent, op.rope_theta, rope_ff(op), d_pos,
                 stream_);
      break;
    }
    case OpKind::KvStore: {
      const LayerDev& L = layers_[size_t(op.layer)];
      cuda::kv_store(IN(0), IN(1), L.kc, L.vc, op.n_head_kv, op.head_dim, opts_.n_ctx, d_pos, stream_);
      break;
    }
    case OpKind::Attention: {
      const LayerDev& L = layers_[size_t(op.layer)];
      cuda::AttnArgs a;
      a.q = IN(0);
      a.k_cache = L.kc;
      a.v_cache = L.vc;
      a.n_head = op.n_head;
      a.n_kv_head = op.n_head_kv;
      a.head_dim = op.head_dim;
      a.n_ctx = opts_.n_ctx;
      a.pos = d_pos;
      a.out = OUT(0);
      a.n_splits = st.attn_splits;
      a.partial = st.attn_partial;
      a.tl = tl_op_;
      a.staged = attn_staged_;
      a.single_split = attn_single_split_;
      a.direct = direct_step_;
      if (direct_step_) a.heads_per_block = attn_direct_hpb_;
      if (xq_pair(st, int(&op - g.ops.data()), XqRole::Write, true)) a.xq = st.xq;
      if (attn_o_ && direct_step_) {  // o_proj in this launch (the op launches nothing)
        const int64_t n = m_->hp.n_embd, L = m_->hp.n_layer;
        a.wo = &mats_.at(&m_->layers[size_t(op.layer)].wo);
        a.o_acc = o_acc_ + op.layer * n;
        a.o_zero = o_acc_ + ((op.layer + L - 1) % L) * n;
        a.xq = nullptr;
      }
      cuda::attention_decode(a, stream_);
      break;
    }
    case OpKind::Add:
      cuda::add(IN(0), IN(1), OUT(0), g.t(op.out[0]).rows * g.t(op.out[0]).cols, stream_);
      break;
    case OpKind::SiluMul:
      cuda::silu_mul(IN(0), IN(1), OUT(0), g.t(op.out[0]).rows * g.t(op.out[0]).cols, stream_);
      break;
    case OpKind::AllReduce:  // prepare refused the graph
      LMF_FAIL(kNoTpOnCuda);
  }
}

// What the Q/K/V epilogue of a group needs (everything but raw and T): the layer's head norms,
// RoPE, the position in device memory, the q tensor the attention reads (the q rope's output)
// and the layer's caches. Shared by decode (the GEMV epilogue or qkv_post) and prefill.
cuda::QkvPostArgs CudaBackend::qkv_epilogue_args(Graph& g, GraphState& st, const FusionGroup& grp) {
  const auto& hp = m_->hp;
  const auto& W = m_->layers[size_t(grp.layer)];
  const LayerDev& L = layers_[size_t(grp.layer)];
  cuda::QkvPostArgs pa;
  pa.n_head = int(hp.n_head);
  pa.n_kv_head = int(hp.n_head_kv);
  pa.head_dim = int(hp.head_dim);
  pa.q_norm = W.q_norm.data ? dev_vec(W.q_norm) : nullptr;
  pa.k_norm = W.k_norm.data ? dev_vec(W.k_norm) : nullptr;
  pa.eps = hp.rms_eps;
  pa.rope = hp.rope_neox ? cuda::RopeStyle::NeoX : cuda::RopeStyle::Adjacent;
  pa.theta = hp.rope_theta;
  pa.rope_ff = rope_ff_;
  pa.pos = d_io_ + 1;
  pa.rope_cs = rope_table_;
  int q_rope = -1;
  for (int e : grp.epilogue)  // q's rope: the one the attention reads (k's goes to the cache)
    if (g.ops[size_t(e)].kind == OpKind::Rope)
      for (int c : consumers_of(g, g.ops[size_t(e)].out[0]))
        if (g.ops[size_t(c)].kind == OpKind::Attention) q_rope = g.ops[size_t(e)].out[0];
  LMF_CHECK(q_rope >= 0, "QKV group of layer ", grp.layer, " has no q rope in its epilogue");
  pa.q_out = ptr(st, g, q_rope);
  pa.k_cache = L.kc;
  pa.v_cache = L.vc;
  pa.n_ctx = opts_.n_ctx;
  if (batch_) {  // a batch step: per-row positions, the paged pools
    pa.row_pos = batch_->row_pos;
    pa.row_slot = batch_->row_slot;
    pa.k_cache = kpool_[size_t(grp.layer)];
    pa.v_cache = vpool_[size_t(grp.layer)];
    pa.n_ctx = n_slots_;
  }
  return pa;
}

void CudaBackend::launch_group(Graph& g, GraphState& st, const FusionGroup& grp) {
  if (g.n_tokens > 1 || g.paged) {
    launch_prefill_group(g, st, grp);
    return;
  }
  const Op& lead = g.ops[size_t(grp.leader())];
  cuda::GemvArgs a;
  a.tl = tl_op_;
  Prologue pro = Prologue::None;
  a.in = ptr(st, g, lead.in[0]);
  if (grp.fold_norm) {
    const Op& norm = g.ops[size_t(grp.norm)];
    a.gamma = dev_vec(*norm.w);
    a.eps = norm.eps;
    a.in = ptr(st, g, norm.in[0]);
    pro = Prologue::Norm;
    if (grp.fold_add) {
      const Op& add = g.ops[size_t(grp.add)];
      a.in = ptr(st, g, add.in[1]);        // the block output (o_proj / down)
      a.residual = ptr(st, g, add.in[0]);  // the residual stream
      a.residual_out = ptr(st, g, add.out[0]);
      pro = Prologue::AddNorm;
    }
  }
  const LayerDev* L = grp.layer >= 0 ? &layers_[size_t(grp.layer)] : nullptr;  // none for Logits
  switch (grp.kind) {
    case GroupKind::QKV: {
      a.w = &L->qkv;
      a.bias = L->qkv_bias;
      const cuda::QkvPostArgs e = qkv_epilogue_args(g, st, grp);
      a.qkv = cuda::gemv_qkv_params(e, st.qkv_raw, L->counters);
      if (qkv_epilogue_in_gemv_) {
        cuda::gemv(pro, Epilogue::QKV, a, stream_);
        break;
      }
      a.y = st.qkv_raw;  // plain GEMV into [q|k|v], then the epilogue kernel
      a.spare_sms = qkv_post_spare_sms(e, L->qkv.type);
      cuda::gemv(pro, Epilogue::Store, a, stream_);
      cuda::QkvPostArgs pa = e;
      pa.raw = st.qkv_raw;
      pa.pdl = qkv_post_pdl_;
      pa.tl = tl_op_ ? tl_op_ + cuda::kTimelineWords : nullptr;
      cuda::qkv_post(pa, stream_);
      break;
    }
    case GroupKind::GateUp: {
      a.w = &L->gate_up;
      if (attn_o_ && direct_step_ && grp.fold_add) a.in = o_acc_ + grp.layer * m_->hp.n_embd;  // o_proj's sum
      a.y = ptr(st, g, g.ops[size_t(grp.epilogue[0])].out[0]);
      const bool xq = st.xq_role[size_t(grp.leader())] == XqRole::Write;
      a.xq = xq ? st.xq : nullptr;
      a.spare_sms = gateup_spare_sms(a.w->type);
      a.spare_same_rounds = true;
      gateup_free_ = {grp.layer, cuda::gemv(pro, xq ? Epilogue::SiluMulQ : Epilogue::SiluMul, a, stream_)};
      break;
    }
    case GroupKind::OResid:
    case GroupKind::DownResid: {
      const Op& add = g.ops[size_t(grp.epilogue[0])];
      a.w = &mats_.at(lead.w);
      const int other = add.in[0] == lead.out[0] ? add.in[1] : add.in[0];
      a.y_residual = ptr(st, g, other);
      a.y = ptr(st, g, add.out[0]);
      const bool xq = xq_pair(st, grp.leader(), XqRole::Read, grp.kind == GroupKind::OResid);
      a.xq = xq ? st.xq : nullptr;
      if (grp.kind == GroupKind::OResid) a.spare_sms = o_spare_sms(*a.w);
      // Down on the SMs gate/up left free, one block per SM on as few of them as take its row
      // groups in one round with a warp per block to spare (gemv_grid.h gemv_fit_spare; 0.6B:
      // 37 of 66 SMs for 256 row groups): every block is resident and has its weights in flight
      // before gate/up ends (docs/PERF.md S35-1 to S35-3: `--ab down_fit` tg128 0.6B 1.008, 4B
      // 1.000 as its down does not fit; two blocks per SM there lost 0.3 %, 48 blocks 1.4 %).
      if (grp.kind == GroupKind::DownResid && down_fit_ && gateup_free_.first == grp.layer)
        a.fit_sms = gateup_free_.second;
      cuda::gemv(xq ? Prologue::Int8 : Prologue::None, Epilogue::Residual, a, stream_);
      break;
    }
    case GroupKind::Logits:  // the output projection, its norm (and add) folded in
      a.w = &mats_.at(lead.w);
      a.bias = lead.b ? dev_vec(*lead.b) : nullptr;
      a.y = ptr(st, g, lead.out[0]);
      cuda::gemv(pro, Epilogue::Store, a, stream_);
      break;
  }
}

void CudaBackend::launch_all(Graph& g, GraphState& st, bool profile, cuda::TimelineSlots* tl) {
  cuda::set_gemv_split_k(opts_.knobs.gemv_split_k);  // this backend's, before any capture
  cuda::set_gemv_coresident(opts_.knobs.gemv_coresident);
  const bool large = cuda::large_decode_model(m_->hp.n_embd);
  cuda::set_gemv_wide(tri_resolve(opts_.knobs.gemv_wide, large));
  cuda::set_gemv_keep_x(tri_resolve(opts_.knobs.gemv_keep_x, cuda::kGemvKeepXAuto));
  cuda::set_gemv_split3(tri_resolve(opts_.knobs.gemv_split3, cuda::kGemvSplit3Auto));
  cuda::set_gemv_act16(act16_);
  // Early trigger: per kernel by model size unless forced (docs/PERF.md S15-4..S15-6).
  cuda::set_pdl_early_trigger(cuda::pdl_early_mask(opts_.knobs.pdl_early_trigger, m_->hp.n_embd));
  size_t ev = 0;
  gateup_free_ = {-1, 0};
  for (const Op& op : g.ops) {
    if (!op.launch || skipped(g, op)) continue;
    if (profile) {
      if (ev == events_.size()) {
        events_.emplace_back();
        CUDA_CHECK(cudaEventCreate(&events_.back().first));
        CUDA_CHECK(cudaEventCreate(&events_.back().second));
      }
      CUDA_CHECK(cudaEventRecord(events_[ev].first, stream_));
    }
    tl_op_ = tl ? tl->slot(2 * int(ev)) : nullptr;
    if (op.group >= 0) launch_group(g, st, g.groups[size_t(op.group)]);
    else if (g.n_tokens > 1 || g.paged) launch_prefill_op(g, st, op);
    else launch_op(g, st, op);
    tl_op_ = nullptr;
    if (profile) CUDA_CHECK(cudaEventRecord(events_[ev].second, stream_));
    ++ev;
  }
  if (profile) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    profile_.clear();
    ev = 0;
    for (const Op& op : g.ops) {
      if (!op.launch || skipped(g, op)) continue;
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events_[ev].first, events_[ev].second));
      ++ev;
      profile_.push_back({op.name, launch_kind(g, op, 0), double(ms) * 1000.0});
    }
  }
}

// What a launch of `op` is, for the profile (sub 0) and the timeline's second slot (sub 1: the
// QKV group's epilogue kernel, the attention's merge).
std::string CudaBackend::launch_kind(const Graph& g, const Op& op, int sub) const {
  const bool rows = g.n_tokens > 1 && op.kind == OpKind::MatMul && g.t(op.in[0]).rows > 1;
  if (op.group >= 0) {
    const auto& grp = g.groups[size_t(op.group)];
    if (sub == 1 && grp.kind == GroupKind::QKV) return "qkv epilogue (norm, rope, kv append)";
    return cat(rows ? "prefill matmul " : "gemv ", dtype_name(op.w->type), " ", group_kind_name(grp.kind),
               grp.fold_add ? "+addnorm" : grp.fold_norm ? "+norm" : "");
  }
  if (op.kind == OpKind::Attention && g.n_tokens == 1)
    return sub == 1 ? "attention merge" : attn_o_ && direct_step_ ? "attention split + o_proj" : "attention split";
  if (op.kind == OpKind::MatMul) return cat(rows ? "prefill matmul " : "gemv ", dtype_name(op.w->type));
  return op_kind_name(op.kind);
}

// The decode step captured with timeline slots and replayed (timeline.h): per stamped kernel,
// in launch order, its end after the previous stamped kernel's end (what it adds to the step),
// its release and how early its blocks were resident. Unstamped launches (embedding, sampling)
// fall into the next stamped kernel's share.
void CudaBackend::record_timeline(Graph& g, GraphState& st) {
  int n = 0;
  for (const Op& op : g.ops) n += op.launch && !skipped(g, op) ? 1 : 0;
  cuda::TimelineSlots slots(2 * n);
  cudaGraphExec_t exec = capture_step(g, st, direct_step_, &slots);
  const std::vector<cuda::SlotTimes> t = slots.replay(exec, stream_);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  timeline_.clear();
  double prev_end = -1;
  int ev = 0;
  for (const Op& op : g.ops) {
    if (!op.launch || skipped(g, op)) continue;
    for (int j = 0; j < 2; ++j) {
      const cuda::SlotTimes& s = t[size_t(2 * ev + j)];
      if (!s.stamped) continue;
      ProfileEntry e{op.name, launch_kind(g, op, j), (s.end - (prev_end < 0 ? s.start : prev_end)) / 1e3};
      if (prev_end >= 0) {
        e.released_us = (s.wait - prev_end) / 1e3;
        e.early_us = (prev_end - s.start) / 1e3;
        e.last_start_us = (s.last_start - prev_end) / 1e3;
        e.phase_us = (s.phase_end - prev_end) / 1e3;
      }
      prev_end = s.end;
      timeline_.push_back(e);
    }
    ++ev;
  }
}

void CudaBackend::run(Graph& g, const StepInput& in) {
  GraphState& st = states_.at(&g);
  if (g.paged || in.entries) {
    run_batch(g, st, in);
    return;
  }
  // Chained decode's flags (checked before anything is launched): one picked id, no logits.
  if (in.chain_next || in.queue || in.token_on_device)
    LMF_CHECK((in.argmax != nullptr) != (in.sampled != nullptr) && !in.logits && !in.profile);
  LMF_CHECK(!in.token_on_device || in.n_tokens == 1);
  if (in.queue && q_queued_ - q_taken_ >= kMaxQueued) LMF_FAIL("more than ", kMaxQueued, " queued decode steps");
  if (g.n_tokens > 1) {
    LMF_CHECK(in.n_tokens == g.n_tokens && g.n_tokens <= kPrefillChunk && gemm_);
    std::memcpy(h_tokens_, in.tokens, size_t(in.n_tokens) * sizeof(int));
    h_io_[1] = int(in.pos0);
    CUDA_CHECK(cudaMemcpyAsync(d_tokens_, h_tokens_, size_t(in.n_tokens) * sizeof(int), cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaMemcpyAsync(d_io_ + 1, h_io_ + 1, sizeof(int), cudaMemcpyHostToDevice, stream_));
    pf_x16_ = cuda::X16Tag{};  // nothing in the activation scratch belongs to this run yet
    launch_all(g, st, in.profile);  // op by op: no CUDA graph for prefill (v1)
    ++st.runs;
    finish_run(g, st, in);
    return;
  }
  LMF_CHECK(in.n_tokens == 1 && g.n_tokens == 1);
  if (in.token_on_device) {
    // The previous step (chain_next) wrote this step's token and position into d_io_.
    if (chain_pos_ != in.pos0) LMF_FAIL("chained decode step at position ", in.pos0, ", but the device holds ", chain_pos_);
  } else {
    h_io_[0] = in.tokens[0];
    h_io_[1] = int(in.pos0);
    CUDA_CHECK(cudaMemcpyAsync(d_io_, h_io_, 2 * sizeof(int), cudaMemcpyHostToDevice, stream_));
  }
  const bool graph_on = tri_resolve(opts_.knobs.cuda_graph, true);
  const bool use_graph = graph_on && !in.profile;
  direct_step_ = attn_direct_max_ > 0 && in.pos0 + 1 <= attn_direct_max_;
  // The first run is eager (kernels pick grid sizes, lazy module loading happens); the second
  // captures the step once (both variants, so no capture falls inside a timed run); every later
  // step replays the one for its length.
  if (use_graph && st.runs >= 1) {
    if (!st.exec) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued steps finish before the capture
      st.exec = capture_step(g, st, false);
      if (attn_direct_max_ > 0) st.exec_direct = capture_step(g, st, true);
    }
    CUDA_CHECK(cudaGraphLaunch(direct_step_ ? st.exec_direct : st.exec, stream_));
  } else {
    launch_all(g, st, in.profile);
    // Profiled: also the step as the replayed graph runs it (same token and position, so the
    // replays rewrite the same KV entries and logits).
    if (in.profile && graph_on) record_timeline(g, st);
  }
  ++st.runs;
  finish_run(g, st, in);
}

// The decode step captured as a graph, with the direct attention or the split + merge one (and
// timeline slots when tl is set).
cudaGraphExec_t CudaBackend::capture_step(Graph& g, GraphState& st, bool direct, cuda::TimelineSlots* tl) {
  const bool keep = direct_step_;
  direct_step_ = direct;
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    launch_all(g, st, false, tl);
  } catch (...) {
    tl_op_ = nullptr;
    direct_step_ = keep;
    cudaStreamEndCapture(stream_, &graph);
    throw;
  }
  direct_step_ = keep;
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

void CudaBackend::finish_run(Graph& g, GraphState& st, const StepInput& in) {
  const GTensor& lt = g.t(g.logits);
  const float* l = ptr(st, g, g.logits);
  // Chained decode: the picked id also goes to the next step's input words and, when queued, to
  // the host's slot; nothing is copied back and the host does not wait (take_queued does).
  const int slot = int(q_queued_ % kMaxQueued);
  cuda::ChainOut chain;
  if (in.chain_next) chain.io = d_io_, chain.next_pos = int(in.pos0 + in.n_tokens);
  if (in.queue) chain.host = d_q_ + slot;
  chain_pos_ = in.chain_next ? in.pos0 + in.n_tokens : -1;
  if (in.argmax) {
    cuda::argmax(l + (lt.rows - 1) * lt.cols, lt.cols, d_io_ + 2, argmax_, stream_, chain);
    if (!in.queue) CUDA_CHECK(cudaMemcpyAsync(h_io_ + 2, d_io_ + 2, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  }
  if (in.sampled) {  // d_io_[3]: the sampled id (pinned h_io_[3] brings it back)
    if (sample_.n < lt.cols) {
      cuda::sample_scratch_free(sample_);
      sample_ = cuda::sample_scratch_alloc(lt.cols);
    }
    sample_.two_pass = tri_resolve(opts_.knobs.sample_two_pass, true);
    const int n_pen = cuda::upload_penalty_ids(in.penalty_ids, in.n_penalty_ids, sample_, stream_);
    cuda::sample(l + (lt.rows - 1) * lt.cols, lt.cols, *in.sample, sample_.pen_ids, n_pen, in.sample_u01, d_io_ + 3,
                 sample_, stream_);
    if (chain.any()) cuda::chain_id(d_io_ + 3, chain, stream_);
    if (!in.queue) CUDA_CHECK(cudaMemcpyAsync(h_io_ + 3, d_io_ + 3, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  }
  if (in.queue) {
    CUDA_CHECK(cudaEventRecord(q_ev_[slot], stream_));
    ++q_queued_;
    return;
  }
  if (in.logits) CUDA_CHECK(cudaMemcpyAsync(in.logits, l, lt.bytes(), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (in.argmax) *in.argmax = h_io_[2];
  if (in.sampled) *in.sampled = h_io_[3];
}

double CudaBackend::copy_bandwidth() {
  const size_t n = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&a), n));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&b), n));
  CUDA_CHECK(cudaMemsetAsync(a, 1, n, stream_));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, stream_));  // warm-up
  const int reps = 10;
  CUDA_CHECK(cudaEventRecord(e0, stream_));
  for (int i = 0; i < reps; ++i) CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(e1, stream_));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(n) * reps / (double(ms) / 1000.0);
}

}  // namespace cuda_impl


std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& o, std::string* why) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    if (why) *why = "no CUDA device found";
    return nullptr;
  }
  if (o.device < 0 || o.device >= n) {
    if (why) *why = cat("device ", o.device, " does not exist (", n, " present)");
    return nullptr;
  }
  return std::make_unique<cuda_impl::CudaBackend>(o);
}

}  // namespace lmf

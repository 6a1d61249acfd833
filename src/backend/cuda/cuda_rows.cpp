// The CUDA backend's T-row graphs: prefill (T > 1 tokens of one sequence at *pos0 + t) and
// batch steps (Graph::paged: rows of several sequences, each at its own position, over the
// runtime's paged KV pools; StepInput::entries), planned by prepare_prefill and launched op by op.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend.h"

namespace lmf::cuda_impl {

void CudaBackend::prepare_prefill(Graph& g) {
  if (g.n_tokens > kPrefillChunk)
    LMF_FAIL("cuda prefill: a run takes at most ", kPrefillChunk, " tokens, the graph has ", g.n_tokens);
  // Prefill fusions (issue 6): the leader runs one matrix product for the group, through the
  // route the rule picks, with the group's epilogue: Q|K|V in one product then the q/k norm +
  // RoPE + KV append kernel over T rows; gate|up in one product with silu(gate)*up in the
  // epilogue; o_proj/down with the residual add. The norm stays its own launch at prefill: a
  // T-row RMSNorm is a streaming pass that costs ~1 % of a layer there (bench --profile), while
  // folding it would make every output tile of the GEMM re-normalize its input rows.
  const Knobs& k = opts_.knobs;
  const bool fusion = k.fusion != Tri::Off;
  const auto& hp = m_->hp;
  for (auto& grp : g.groups) {
    if (grp.kind == GroupKind::Logits) {
      grp.reject_reason = "the output norm stays its own launch at prefill (see above)";
      continue;
    }
    const LayerDev& L = layers_[size_t(grp.layer)];
    const Op& lead = g.ops[size_t(grp.leader())];
    bool knob = false, can = false;
    switch (grp.kind) {
      case GroupKind::QKV:
        knob = tri_resolve(k.qkv_fusion, true);
        can = L.qkv.q && !grp.epilogue.empty() && (hp.head_dim == 32 || hp.head_dim == 64 || hp.head_dim == 128);
        break;
      case GroupKind::GateUp:
        knob = tri_resolve(k.gateup_fusion, true);
        can = L.gate_up.q && grp.epilogue.size() == 1;
        break;
      case GroupKind::OResid:
      case GroupKind::DownResid:
        knob = tri_resolve(k.resid_fusion, true);
        can = mats_.count(lead.w) > 0;
        break;
      case GroupKind::Logits:
        break;  // rejected above
    }
    if (!fusion || !knob) {
      grp.reject_reason = "knob off";
      continue;
    }
    if (!can) {
      grp.reject_reason = "weights not packed for this fusion (mixed types or knob off at load)";
      continue;
    }
    grp.accepted = grp.fold_epilogue = true;
  }
}

void CudaBackend::ensure_prefill_scratch() {
  if (gemm_) return;
  const auto& hp = m_->hp;
  const int64_t widest = std::max({hp.n_embd, hp.n_ff, hp.q_dim()});
  // x2: the split-fp16 operands of float weights (prefill.h) are twice as wide as the input.
  pf_.x_elems = size_t(2 * kPrefillChunk * widest);
  // At least 128 MiB of weight scratch so the output projection (vocab rows, chunked) takes few chunks.
  pf_.w_elems = 2 * std::max(pf_w_elems_, size_t(32) << 20);
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pf_.x), pf_.x_elems * sizeof(uint16_t)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pf_.w), pf_.w_elems * sizeof(uint16_t)));
  const int64_t nblk4 = cuda::mmq_nblk4(widest);
  pf_.xq_bytes = size_t(kPrefillChunk * nblk4 * 32);
  pf_.xd_elems = size_t(kPrefillChunk * nblk4);
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pf_.xq), pf_.xq_bytes));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pf_.xd), pf_.xd_elems * sizeof(float)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pf_.xs), pf_.xd_elems * sizeof(float)));
  pf_.pairs_elems = size_t(kPrefillChunk * 2 * hp.n_ff);
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pf_.pairs), pf_.pairs_elems * sizeof(float)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pf_qkv_raw_),
                        size_t(kPrefillChunk * (hp.q_dim() + 2 * hp.kv_dim())) * sizeof(float)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_tokens_), kPrefillChunk * sizeof(int)));
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&h_tokens_), kPrefillChunk * sizeof(int)));
  pf_.x16 = &pf_x16_;
  gemm_ = cuda::gemm_create(stream_);
}

// One op of a T-row (prefill) graph: positions pos0 + t come from d_io_[1], tokens from
// d_tokens_; or of a batch step (batch_ set): each row's position, cache slot and sequence from
// batch_'s arrays, the KV in the paged pools. Groups prepare_prefill accepted launch in
// launch_prefill_group.
void CudaBackend::launch_prefill_op(Graph& g, GraphState& st, const Op& op) {
  auto IN = [&](int i) { return ptr(st, g, op.in[size_t(i)]); };
  auto OUT = [&](int i) { return ptr(st, g, op.out[size_t(i)]); };
  const int* d_pos0 = d_io_ + 1;
  const int T = int(g.n_tokens);
  switch (op.kind) {
    case OpKind::Embed:
      cuda::embed_rows(embd_type_, embd_raw_, op.w->cols, d_tokens_, T, OUT(0), stream_);
      break;
    case OpKind::MatMul: {
      const GTensor& x = g.t(op.in[0]);
      if (x.rows == 1) {  // last-token logits: the decode GEMV
        launch_op(g, st, op);
        break;
      }
      cuda::PrefillMatmul mm;
      mm.x = IN(0);
      mm.T = x.rows;
      mm.y = OUT(0);
      mm.bias = op.b ? dev_vec(*op.b) : nullptr;
      auto gu = gate_up_layer_.find(op.w);
      if (gu != gate_up_layer_.end()) {  // rows of gate (even) or up (odd) of the interleaved weight
        mm.w = &layers_[size_t(gu->second)].gate_up;
        mm.r0 = op.w == &m_->layers[size_t(gu->second)].w_gate ? 0 : 1;
        mm.step = 2;
        mm.n = op.w->rows;
      } else {
        auto it = mats_.find(op.w);
        LMF_CHECK(it != mats_.end(), "matrix not uploaded: ", op.w->name);
        mm.w = &it->second;
      }
      cuda::matmul_prefill(gemm_, mm, pf_, prefill_route(mm), stream_);
      break;
    }
    case OpKind::HeadNorm: {
      const GTensor& x = g.t(op.in[0]);
      cuda::rmsnorm_rows(IN(0), dev_vec(*op.w), OUT(0), x.rows * (x.cols / op.head_dim), op.head_dim, op.eps,
                         stream_);
      break;
    }
    case OpKind::Rope: {
      const GTensor& x = g.t(op.in[0]);
      CUDA_CHECK(cudaMemcpyAsync(OUT(0), IN(0), x.bytes(), cudaMemcpyDeviceToDevice, stream_));
      cuda::rope_rows(OUT(0), int(x.rows), int(x.cols / op.head_dim), op.head_dim,
                      op.rope_neox ? cuda::RopeStyle::NeoX : cuda::RopeStyle::Adjacent, op.rope_theta, rope_ff(op),
                      d_pos0, stream_, batch_ ? batch_->row_pos : nullptr);
      break;
    }
    case OpKind::KvStore: {
      const LayerDev& L = layers_[size_t(op.layer)];
      if (batch_)
        cuda::kv_store_rows(IN(0), IN(1), kpool_[size_t(op.layer)], vpool_[size_t(op.layer)], int(g.t(op.in[0]).rows),
                            op.n_head_kv, op.head_dim, n_slots_, d_pos0, stream_, batch_->row_slot);
      else
        cuda::kv_store_rows(IN(0), IN(1), L.kc, L.vc, int(g.t(op.in[0]).rows), op.n_head_kv, op.head_dim, opts_.n_ctx,
                            d_pos0, stream_);
      break;
    }
    case OpKind::Attention: {
      if (batch_) {
        cuda::PagedAttnArgs a;
        a.q = IN(0);
        a.out = OUT(0);
        a.k_pool = kpool_[size_t(op.layer)];
        a.v_pool = vpool_[size_t(op.layer)];
        a.n_slots = n_slots_;
        a.T = T;
        a.n_head = op.n_head;
        a.n_kv_head = op.n_head_kv;
        a.head_dim = op.head_dim;
        a.row_pos = batch_->row_pos;
        a.row_seq = batch_->row_seq;
        a.tab_off = batch_->tab_off;
        a.tables = batch_->tables;
        a.block_shift = block_shift_;
        a.max_len = batch_->max_len;
        a.partial = d_paged_part_;
        cuda::attention_paged(a, stream_);
        break;
      }
      const LayerDev& L = layers_[size_t(op.layer)];
      cuda::PrefillAttnArgs a;
      a.q = IN(0);
      a.k_cache = L.kc;
      a.v_cache = L.vc;
      a.T = int(g.t(op.in[0]).rows);
      a.n_head = op.n_head;
      a.n_kv_head = op.n_head_kv;
      a.head_dim = op.head_dim;
      a.n_ctx = opts_.n_ctx;
      a.pos0 = d_pos0;
      a.out = OUT(0);
      if (tri_resolve(opts_.knobs.prefill_tc_attention, true))
        cuda::attention_prefill_tc(a, stream_);
      else
        cuda::attention_prefill(a, stream_);
      break;
    }
    case OpKind::RmsNorm:
      if (op.gather_rows) {  // a batch step's output rows (StepInput::out_rows), normalized in place
        LMF_CHECK(batch_, op.name, ": gathered rows outside a batch step");
        const GTensor& y = g.t(op.out[0]);
        cuda::gather_rows(IN(0), y.cols, batch_->out_rows, int(y.rows), OUT(0), stream_);
        cuda::rmsnorm_rows(OUT(0), dev_vec(*op.w), OUT(0), y.rows, int(y.cols), op.eps, stream_);
        break;
      }
      launch_op(g, st, op);  // rows and row_begin handled there already
      break;
    case OpKind::Add:
    case OpKind::SiluMul:
    case OpKind::AllReduce:  // refused by prepare (and by launch_op)
      launch_op(g, st, op);
      break;
  }
}

// An accepted group of a T-row graph (prepare_prefill): one matrix product + its epilogue.
void CudaBackend::launch_prefill_group(Graph& g, GraphState& st, const FusionGroup& grp) {
  const Op& lead = g.ops[size_t(grp.leader())];
  LMF_CHECK(grp.layer >= 0, "cuda prefill: no fused launch for group ", group_kind_name(grp.kind));
  const LayerDev& L = layers_[size_t(grp.layer)];
  cuda::PrefillMatmul mm;
  mm.x = ptr(st, g, lead.in[0]);
  mm.T = g.t(lead.in[0]).rows;
  switch (grp.kind) {
    case GroupKind::QKV: {
      mm.w = &L.qkv;
      mm.bias = L.qkv_bias;
      mm.y = pf_qkv_raw_;
      cuda::matmul_prefill(gemm_, mm, pf_, prefill_route(mm), stream_);
      cuda::QkvPostArgs pa = qkv_epilogue_args(g, st, grp);
      pa.raw = pf_qkv_raw_;
      pa.T = int(mm.T);
      cuda::qkv_post(pa, stream_);
      break;
    }
    case GroupKind::GateUp:
      mm.w = &L.gate_up;
      mm.silu_pairs = true;
      mm.y = ptr(st, g, g.ops[size_t(grp.epilogue[0])].out[0]);
      cuda::matmul_prefill(gemm_, mm, pf_, prefill_route(mm), stream_);
      break;
    case GroupKind::OResid:
    case GroupKind::DownResid: {
      const Op& add = g.ops[size_t(grp.epilogue[0])];
      mm.w = &mats_.at(lead.w);
      mm.bias = lead.b ? dev_vec(*lead.b) : nullptr;
      mm.residual = ptr(st, g, add.in[0] == lead.out[0] ? add.in[1] : add.in[0]);
      mm.y = ptr(st, g, add.out[0]);
      cuda::matmul_prefill(gemm_, mm, pf_, prefill_route(mm), stream_);
      break;
    }
    case GroupKind::Logits:
      break;  // never accepted at prefill (checked above)
  }
}

// Free device memory less a reserve for what is allocated after the cache (graph arenas, the
// prefill scratch and cuBLAS workspace, the paged attention's partials).
uint64_t CudaBackend::kv_memory_available() const {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const uint64_t reserve = uint64_t(1536) << 20;
  return free > reserve ? free - reserve : 0;
}

void CudaBackend::alloc_kv(int64_t n_blocks, int64_t block_size) {
  LMF_CHECK(m_ && n_blocks > 0 && block_size > 0 && (block_size & (block_size - 1)) == 0);
  const auto& hp = m_->hp;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  free_pools();
  const int64_t slots = n_blocks * block_size;
  const size_t bytes = size_t(slots) * size_t(hp.kv_dim()) * sizeof(uint16_t);
  if (const uint64_t avail = kv_memory_available(); 2 * bytes * size_t(hp.n_layer) > avail)
    LMF_FAIL("the KV cache for ", slots, " positions needs ", (2 * bytes * size_t(hp.n_layer)) >> 20, " MiB; ",
             avail >> 20, " MiB of GPU memory are free for it (lower -c or --kv-budget)");
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    uint16_t *k = nullptr, *v = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&k), bytes));
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&v), bytes));
    CUDA_CHECK(cudaMemsetAsync(k, 0, bytes, stream_));
    CUDA_CHECK(cudaMemsetAsync(v, 0, bytes, stream_));
    kpool_.push_back(k);
    vpool_.push_back(v);
  }
  n_slots_ = slots;
  block_shift_ = 0;
  while ((int64_t(1) << block_shift_) < block_size) ++block_shift_;
}

// Block src's positions -> block dst in every layer's pools: per pool one 2-D copy, a row per KV head.
void CudaBackend::copy_kv_block(int32_t src, int32_t dst) {
  const auto& hp = m_->hp;
  const size_t row = size_t(hp.head_dim) * sizeof(uint16_t), bs = size_t(1) << block_shift_;
  const size_t pitch = size_t(n_slots_) * row, width = bs * row;
  for (size_t l = 0; l < kpool_.size(); ++l)
    for (uint16_t* p : {kpool_[l], vpool_[l]}) {
      auto* base = reinterpret_cast<uint8_t*>(p);
      CUDA_CHECK(cudaMemcpy2DAsync(base + size_t(dst) * width, pitch, base + size_t(src) * width, pitch, width,
                                   size_t(hp.n_head_kv), cudaMemcpyDeviceToDevice, stream_));
    }
}

// A batch step: the rows' positions, slots and sequences and the block tables to the device in
// one copy, then the graph op by op (launch_all, batch_ set), then the gathered rows' logits.
void CudaBackend::run_batch(Graph& g, GraphState& st, const StepInput& in) {
  LMF_CHECK(g.paged && in.entries && in.n_entries > 0, "cuda: a batch step needs a graph built for it (Graph::paged) "
            "and its entries");
  LMF_CHECK(!kpool_.empty(), "cuda: no KV pools: alloc_kv first");
  LMF_CHECK(!in.chain_next && !in.queue && !in.token_on_device && !in.sample && !in.argmax,
            "cuda: a batch step returns logits and row argmax ids only");
  const int64_t T = in.n_tokens, n_out = g.n_gather > 0 ? g.n_gather : g.t(g.logits).rows;
  LMF_CHECK(T == g.n_tokens && T <= kPrefillChunk && gemm_);
  LMF_CHECK(g.n_gather == 0 || in.out_rows);
  int64_t n_tab = 0;
  for (int64_t e = 0; e < in.n_entries; ++e) n_tab += in.entries[e].n_blocks;
  const size_t need = size_t(3 * T + n_out + in.n_entries + n_tab);  // pos, slot, seq | out rows | tables
  if (need + size_t(n_out) > batch_cap_) {  // + the rows' argmax ids, after the inputs
    cudaFree(d_batch_);
    cudaFreeHost(h_batch_);
    batch_cap_ = std::max(need + size_t(n_out), batch_cap_ * 2);
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_batch_), batch_cap_ * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&h_batch_), batch_cap_ * sizeof(int)));
  }
  int *pos = h_batch_, *slot = pos + T, *seq = slot + T, *outr = seq + T, *toff = outr + n_out, *tab = toff + in.n_entries;
  const int64_t mask = (int64_t(1) << block_shift_) - 1;
  int max_len = 0, at = 0;
  int64_t covered = 0;
  for (int64_t e = 0; e < in.n_entries; ++e) {
    const BatchEntry& E = in.entries[e];
    LMF_CHECK(E.row0 == covered && E.n_rows > 0 && ((E.pos0 + E.n_rows + mask) >> block_shift_) <= E.n_blocks,
              "cuda: batch entry ", e, " does not cover its rows or positions");
    toff[e] = at;
    for (int64_t b = 0; b < E.n_blocks; ++b) {
      LMF_CHECK(E.blocks[b] >= 0 && (int64_t(E.blocks[b]) << block_shift_) < n_slots_);
      tab[at++] = E.blocks[b];
    }
    for (int64_t r = 0; r < E.n_rows; ++r) {
      const int64_t p = E.pos0 + r, i = E.row0 + r;
      pos[i] = int(p);
      slot[i] = int((int64_t(E.blocks[p >> block_shift_]) << block_shift_) | (p & mask));
      seq[i] = int(e);
    }
    max_len = std::max(max_len, int(E.pos0 + E.n_rows));
    covered += E.n_rows;
  }
  LMF_CHECK(covered == T, "cuda: the batch entries cover ", covered, " of ", T, " rows");
  for (int64_t i = 0; i < n_out; ++i) outr[i] = int(in.out_rows ? in.out_rows[i] : T - n_out + i);
  const size_t part = cuda::paged_attn_scratch_floats(int(T), int(m_->hp.n_head), int(m_->hp.head_dim), max_len);
  if (part > paged_part_cap_) {
    cudaFree(d_paged_part_);
    paged_part_cap_ = std::max(part, paged_part_cap_ * 2);
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_paged_part_), paged_part_cap_ * sizeof(float)));
  }
  std::memcpy(h_tokens_, in.tokens, size_t(T) * sizeof(int));
  CUDA_CHECK(cudaMemcpyAsync(d_tokens_, h_tokens_, size_t(T) * sizeof(int), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaMemcpyAsync(d_batch_, h_batch_, need * sizeof(int), cudaMemcpyHostToDevice, stream_));
  bd_.row_pos = d_batch_;
  bd_.row_slot = d_batch_ + T;
  bd_.row_seq = d_batch_ + 2 * T;
  bd_.out_rows = d_batch_ + 3 * T;
  bd_.tab_off = bd_.out_rows + n_out;
  bd_.tables = bd_.tab_off + in.n_entries;
  bd_.max_len = max_len;
  pf_x16_ = cuda::X16Tag{};
  direct_step_ = false;
  batch_ = &bd_;
  try {
    launch_all(g, st, in.profile);
  } catch (...) {
    batch_ = nullptr;
    throw;
  }
  batch_ = nullptr;
  ++st.runs;
  const GTensor& lt = g.t(g.logits);
  if (in.logits) CUDA_CHECK(cudaMemcpyAsync(in.logits, ptr(st, g, g.logits), lt.bytes(), cudaMemcpyDeviceToHost, stream_));
  if (in.row_argmax) {  // n_out ids instead of n_out x n_vocab floats
    cuda::argmax_rows(ptr(st, g, g.logits), lt.rows, lt.cols, d_batch_ + need, stream_);
    CUDA_CHECK(cudaMemcpyAsync(h_batch_ + need, d_batch_ + need, size_t(lt.rows) * sizeof(int), cudaMemcpyDeviceToHost,
                               stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (in.row_argmax) std::memcpy(in.row_argmax, h_batch_ + need, size_t(lt.rows) * sizeof(int32_t));
}

}  // namespace lmf::cuda_impl

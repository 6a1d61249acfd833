// The CUDA backend class (internal to src/backend/cuda): its state and the declarations of
// what cuda_backend.cpp (load, decode, the one-sequence step) and cuda_rows.cpp (T-row graphs:
// prefill and batch steps over the paged KV pools) define. See cuda_backend.cpp for the design.
#pragma once
#include <cuda_runtime_api.h>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>
#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/paged.h"
#include "backend/cuda/prefill.h"
#include "backend/cuda/prefill_tune.h"
#include "backend/cuda/qkv_post.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/timeline.h"
#include "backend/cuda/upload.h"
#include "format/quant/half.h"
#include "format/quant/transcode.h"
#include "util/log.h"
#include "util/status.h"
#include "util/threadpool.h"

namespace lmf::cuda_impl {


using cuda::DeviceWeight;
using cuda::Epilogue;
using cuda::Prologue;

// Most tokens one prefill run takes (longer prompts: the Session runs chunks). 2048 rather than
// 512: the outer route dequantizes each weight once per run, so a longer run amortizes it (8B
// gate|up: 4 x 239 µs at 512 rows vs 681 µs at 2048, sweep run P3); memory stays bounded: the
// largest supported model's T-row tensors are ~210 MB each (n_ff 25600) and the scratch ~0.5 GB.
constexpr int64_t kPrefillChunk = 2048;

struct LayerDev {
  DeviceWeight qkv;               // Q|K|V rows (when q, k, v share a type) else empty
  DeviceWeight gate_up;           // interleaved gate/up (fused path) or empty
  std::vector<DeviceWeight> own;  // every allocation of this layer (for freeing)
  float* qkv_bias = nullptr;      // [q_dim + 2 kv_dim] or null
  uint16_t* kc = nullptr;         // [n_kv][n_ctx][head_dim] fp16
  uint16_t* vc = nullptr;
  unsigned* counters = nullptr;   // QKV epilogue counters
};

enum class XqRole : uint8_t { None, Write, Read };

struct GraphState {
  float* arena = nullptr;
  size_t arena_bytes = 0;
  float* qkv_raw = nullptr;     // QKV epilogue scratch [q_dim + 2 kv_dim]
  float* gateup_tmp = nullptr;  // unfused fallback over an interleaved weight [2 n_ff]
  float* attn_partial = nullptr;
  // x quantized once, by its producer (knobs attn_xq, gemv_xq; plan_xq): per op, whether it
  // writes xq (the attention op, the gate/up leader) or reads it (the o_proj, down leader); the
  // one scratch every pair shares.
  std::vector<XqRole> xq_role;
  uint8_t* xq = nullptr;
  int attn_splits = 1;
  cudaGraphExec_t exec = nullptr;
  // The same step with a direct attention (AttnArgs::direct, no merge kernels), replayed while
  // the length is at most attn_direct_max_ (knob attn_direct).
  cudaGraphExec_t exec_direct = nullptr;
  int runs = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& o)
      : opts_(o), act16_(tri_resolve(o.knobs.cuda_act16, cuda::kCudaAct16Auto)) {
    const auto t0 = std::chrono::steady_clock::now();
    CUDA_CHECK(cudaSetDevice(o.device));
    CUDA_CHECK(cudaFree(nullptr));  // the context starts here (timed below), not in the first call that needs it
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&h_io_), 4 * sizeof(int)));
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_io_), 4 * sizeof(int)));
    // Queued steps' ids: mapped pinned memory the argmax / chain kernel writes, one slot per
    // outstanding step, each with the event that says it is there.
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&h_q_), kMaxQueued * sizeof(int), cudaHostAllocMapped));
    CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_q_), h_q_, 0));
    for (cudaEvent_t& e : q_ev_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    argmax_ = cuda::argmax_scratch_alloc();
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, o.device));
    dev_name_ = p.name;
    LMF_LOG(Info, "cuda: ", dev_name_, " ready in ",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s");
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    for (auto& [g, st] : states_) free_state(st);
    for (auto& L : layers_) {
      for (auto& w : L.own) cuda::free_weight(w);
      cudaFree(L.qkv_bias);
      cudaFree(L.kc);
      cudaFree(L.vc);
      cudaFree(L.counters);
    }
    for (auto& w : extra_) cuda::free_weight(w);
    for (void* p : buffers_) cudaFree(p);
    cuda::argmax_scratch_free(argmax_);
    cuda::sample_scratch_free(sample_);
    cuda::gemm_destroy(gemm_);
    cudaFree(pf_.w);
    cudaFree(pf_.x);
    cudaFree(pf_.xq);
    cudaFree(pf_.xd);
    cudaFree(pf_.xs);
    cudaFree(pf_.pairs);
    cudaFree(pf_qkv_raw_);
    cudaFree(d_tokens_);
    cudaFreeHost(h_tokens_);
    free_pools();
    cudaFree(d_batch_);
    cudaFreeHost(h_batch_);
    cudaFree(d_paged_part_);
    cudaFree(d_io_);
    cudaFreeHost(h_io_);
    cudaFreeHost(h_q_);
    for (cudaEvent_t e : q_ev_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  // The activation codes of the quantized GEMVs, as the CPU backend names its own (cuda_act16);
  // a model without quantized projections takes float activations whatever the knob says.
  std::string description() const override {
    const bool codes = m_ && m_->quantized_matmuls();
    return "CUDA " + dev_name_ + (!codes ? ", float activations" : act16_ ? ", 16-bit activations" : ", 8-bit activations");
  }
  const BackendOptions& options() const override { return opts_; }
  // LMFUSE_CUDA_PREFILL=0 runs prompts token by token through the decode step (slow, but the
  // same arithmetic as decode: prefill-then-decode equals one prefill exactly).
  int64_t max_tokens_per_run() const override {
    return tri_resolve(opts_.knobs.cuda_prefill, true) ? kPrefillChunk : 1;
  }
  uint64_t decode_weight_bytes() const override { return decode_bytes_; }

  // The runtime's paged KV cache lives in pools here (batch steps); the one-sequence cache of
  // load() stays for a Session of its own.
  bool paged_kv() const override { return true; }
  bool own_kv() const override { return true; }
  int64_t max_batch_rows() const override { return kPrefillChunk; }
  uint64_t kv_memory_available() const override;
  void alloc_kv(int64_t n_blocks, int64_t block_size) override;
  void copy_kv_block(int32_t src, int32_t dst) override;

  void load(const Model& m) override;
  void prepare(Graph& g) override;
  void finalize(Graph& g) override;
  void run(Graph& g, const StepInput& in) override;
  double copy_bandwidth() override;
  bool can_sample(const SamplingParams& p, int64_t n_vocab) const override { return cuda::sample_supported(p, n_vocab); }
  bool can_chain(const SamplingParams& p, int64_t n_vocab) const override {
    if (has_penalty(p)) return false;
    return p.temperature <= 0 || can_sample(p, n_vocab);
  }
  int32_t take_queued() override {
    LMF_CHECK(q_taken_ < q_queued_);
    const int slot = int(q_taken_ % kMaxQueued);
    CUDA_CHECK(cudaEventSynchronize(q_ev_[slot]));
    ++q_taken_;
    return *reinterpret_cast<volatile int*>(h_q_ + slot);
  }
  double gemm_peak_flops() override {
    ensure_prefill_scratch();  // creates the cuBLAS handle
    return cuda::gemm_bf16_peak_flops(gemm_, stream_);
  }
  std::vector<ProfileEntry> profile() const override { return profile_; }
  std::vector<ProfileEntry> timeline() const override { return timeline_; }

 private:
  // The device copy of a Rope op's frequency divisors (the model's, uploaded by load), or null.
  const float* rope_ff(const Op& op) const {
    LMF_CHECK(!op.rope_factors || rope_ff_, op.name, ": RoPE frequency factors not uploaded");
    return op.rope_factors ? rope_ff_ : nullptr;
  }
  const float* dev_vec(const Weight& w) {
    auto it = vecs_.find(&w);
    LMF_CHECK(it != vecs_.end(), "vector not uploaded: ", w.name);
    return it->second;
  }
  float* upload_f32(const Weight& w) {
    float* d = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), w.nbytes));
    CUDA_CHECK(cudaMemcpy(d, w.data, w.nbytes, cudaMemcpyHostToDevice));
    buffers_.push_back(d);
    vecs_[&w] = d;
    return d;
  }
  void free_state(GraphState& st) {
    if (st.exec) cudaGraphExecDestroy(st.exec);
    if (st.exec_direct) cudaGraphExecDestroy(st.exec_direct);
    cudaFree(st.arena);
    cudaFree(st.qkv_raw);
    cudaFree(st.gateup_tmp);
    cudaFree(st.attn_partial);
    cudaFree(st.xq);
    st = GraphState{};
  }
  float* ptr(const GraphState& st, const Graph& g, int t) const {
    return st.arena + g.t(t).offset / sizeof(float);
  }
  // tl: timeline slots, two per launched op (a GEMV or the attention's split in the first, the
  // QKV epilogue kernel or the merge in the second), or null.
  void launch_all(Graph& g, GraphState& st, bool profile, cuda::TimelineSlots* tl = nullptr);
  void record_timeline(Graph& g, GraphState& st);
  cudaGraphExec_t capture_step(Graph& g, GraphState& st, bool direct, cuda::TimelineSlots* tl = nullptr);
  std::string launch_kind(const Graph& g, const Op& op, int sub) const;
  void plan_xq(const Graph& g, GraphState& st);
  // Whether op `op` plays `role` in a planned xq pair in the step being launched: the attention ->
  // o_proj pairs (attn) only in the split + merge graph unless attn_xq is forced (attn_xq_direct_).
  bool xq_pair(const GraphState& st, int op, XqRole role, bool attn) const {
    return st.xq_role[size_t(op)] == role && !(attn && direct_step_ && !attn_xq_direct_);
  }
  void launch_op(Graph& g, GraphState& st, const Op& op);
  void launch_prefill_op(Graph& g, GraphState& st, const Op& op);
  void prepare_prefill(Graph& g);
  // Knob LMFUSE_PREFILL_INKERNEL_DEQUANT forces a route; unset, the routes are timed per shape
  // on this GPU (PrefillTuner) or, with LMFUSE_PREFILL_ROUTE_TUNE=0, taken from the fitted rule.
  // Float weights have no in-kernel kernel and always take the outer route; so do the K-quants,
  // but where the knob forces the in-kernel route (the decode arithmetic, for the tight
  // consistency gates of scripts/check_models.py): theirs is the GEMV route, the decode GEMV per
  // token (itself falling back to outer for a subset of rows).
  cuda::PrefillRoute prefill_route(const cuda::PrefillMatmul& mm) {
    const DeviceWeight& w = *mm.w;
    if (!cuda::mmq_supported(w.type))
      return cuda::int8_dot(w.type) && opts_.knobs.prefill_inkernel_dequant == Tri::On ? cuda::PrefillRoute::Gemv
                                                                                      : cuda::PrefillRoute::Outer;
    switch (opts_.knobs.prefill_inkernel_dequant) {
      case Tri::On: return cuda::PrefillRoute::InKernel;
      case Tri::Off: return cuda::PrefillRoute::Outer;
      default: break;
    }
    if (tri_resolve(opts_.knobs.prefill_route_tune, true))
      return tuner_.route(gemm_, mm, same_shape(w), pf_, stream_);
    return cuda::prefill_route_auto(w.type, mm.n > 0 ? mm.n : w.rows, w.cols, mm.T);
  }
  // Every uploaded weight of w's type and shape (one per layer): the tuner rotates through them.
  const std::vector<const DeviceWeight*>& same_shape(const DeviceWeight& w) {
    const auto key = std::make_tuple(int(w.type), w.rows, w.cols);
    auto it = same_shape_.find(key);
    if (it != same_shape_.end()) return it->second;
    std::vector<const DeviceWeight*> v;
    auto take = [&](const DeviceWeight& d) {
      if (d.q && d.type == w.type && d.rows == w.rows && d.cols == w.cols &&
          std::find_if(v.begin(), v.end(), [&](const DeviceWeight* e) { return e->q == d.q; }) == v.end())
        v.push_back(&d);
    };
    for (const auto& L : layers_) {
      take(L.qkv);
      take(L.gate_up);
    }
    for (const auto& [hw, d] : mats_) take(d);
    return same_shape_.emplace(key, std::move(v)).first->second;
  }
  void ensure_prefill_scratch();
  void finish_run(Graph& g, GraphState& st, const StepInput& in);
  void launch_group(Graph& g, GraphState& st, const FusionGroup& grp);
  void launch_prefill_group(Graph& g, GraphState& st, const FusionGroup& grp);
  cuda::QkvPostArgs qkv_epilogue_args(Graph& g, GraphState& st, const FusionGroup& grp);
  // SMs the QKV GEMV leaves free for the epilogue kernel (knob qkv_post_room): room for all of its
  // blocks at once (n_head + 2 n_kv blocks of head_dim threads), 512 threads per SM (12 SMs on
  // 4B/8B): spread thinner than the SM's 2048 threads, so the blocks' work after the wait does not
  // queue on a few SMs, but not so thin that the GEMV loses streaming SMs (S33-6). Automatic:
  // only where the GEMV runs one 16-warp block per SM (integer-dot types, gemv_wide), whose 128
  // registers per thread fill the register file, so the epilogue's blocks could start only in the
  // GEMV's last ~0.3 us and their pre-wait work ended after it (docs/PERF.md S33-5); 8-warp blocks
  // free room as they finish.
  int qkv_post_spare_sms(const cuda::QkvPostArgs& e, DType w) const {
    const bool on = qkv_post_room_ == Tri::Auto ? cuda::gemv_runs_wide(w) : qkv_post_room_ == Tri::On;
    if (!on) return 0;
    constexpr int kThreadsPerSpareSm = 512;  // S33-6, 4B tg128 against 2048: 1024 1.012, 512 1.016, 256 1.007
    const int spare = ((e.n_head + 2 * e.n_kv_head) * e.head_dim + kThreadsPerSpareSm - 1) / kThreadsPerSpareSm;
    return std::min(spare, cuda::device_sm_count() / 8);  // a small GPU keeps its SMs for the GEMV
  }
  // SMs o_proj's GEMV leaves free, in the direct and the split + merge steps (docs/PERF.md S33-7,
  // S34-1, S34-6; split steps S35-1: 8B -d 4096 tg128 1.052, the merge's blocks in place of the
  // attention's):
  // - Wide (integer-dot, one 16-warp block per SM filling its register file): one per attention
  //   block (n_head / heads per block; split steps: the merge kernel's n_head blocks), at most a
  //   quarter of the SMs. o_proj blocks placed where an attention block still runs start only
  //   when it ends and load their weights from there; with the smaller grid every block is
  //   resident during the attention (tg128 4B 1.027, 8B 1.008).
  // - Narrow integer-dot (8-warp blocks, one per SM for this short shape): two thirds of the SMs,
  //   so o's 256 row groups (0.6B) fill ~6 of each block's 8 warps instead of ~2 and the
  //   attention and gate/up run beside fewer o blocks loading (0.6B tg128 against none: 33 / 66 /
  //   100 spare SMs 1.012 / 1.017 / 1.009 with gate/up's room off; with it on, against 66: 80
  //   1.005, 84-96 1.008-1.012, 100 one round of 1.011, one of 1.000; docs/PERF.md S34-1, S34-6).
  //   Only while o's weights stay small per remaining SM (<= 32 KB; 0.6B Q4_0: 27 KB), as each SM
  //   loads its share during the attention; a larger o_proj keeps every SM streaming.
  int o_spare_sms(const cuda::DeviceWeight& w) const {
    if (!o_room_) return 0;
    const int sms = cuda::device_sm_count();
    if (cuda::gemv_runs_wide(w.type)) {
      // Heads per attention block: the direct launch's (its whole KV group without the head
      // split); the merge kernel takes one.
      int hpb = 1;
      if (direct_step_) hpb = attn_direct_hpb_ > 0 ? attn_direct_hpb_ : int(m_->hp.n_head / m_->hp.n_head_kv);
      const int blocks = int(m_->hp.n_head) / std::max(1, hpb);
      return std::min(blocks, sms / 4);
    }
    constexpr size_t kMaxBytesPerSm = 32 << 10;
    const int spare = sms * 2 / 3;
    return cuda::int8_dot(w.type) && cuda::weight_bytes(w) <= size_t(sms - spare) * kMaxBytesPerSm ? spare : 0;
  }
  // SMs gate/up's GEMV may leave free (knob gateup_room; docs/PERF.md S34-2 to S34-4), so down's
  // blocks become resident on them and load their first weights before gate/up ends (4B, 12
  // spare: down's first blocks resident 8.6 us before gate/up's end instead of 1.1; down -0.14 us
  // per layer, the next QKV GEMV -0.21).
  // A ceiling: the launch lowers it until the grid's warps take no more rounds through the row
  // groups than on every SM (GemvArgs::spare_same_rounds; 8B's 6,144 row groups fill 128 SMs'
  // warps three times, so 8B gets 4, where 8 / 20 spare SMs cost 4 % / 2 %). Wide: a sixth of
  // the SMs (4B tg128, spare 12 / 20 / 26 / 30: 1.014 / 1.016 / 1.011 / 1.009; each remaining SM
  // streams the more); narrow: half (0.6B: its compact-stage instance runs three blocks per SM,
  // so all 66 stay within its one round; against 36 spare, 66 is +2.3 % with down_fit, S35-3).
  // Integer-dot types only (measured there).
  int gateup_spare_sms(DType w) const {
    if (!gateup_room_ || !cuda::int8_dot(w)) return 0;
    const int sms = cuda::device_sm_count();
    return cuda::gemv_runs_wide(w) ? sms / 6 : sms / 2;
  }
  void matmul(const Weight* w, const float* x, float* y, const float* bias);

  BackendOptions opts_;
  std::string dev_name_;
  cudaStream_t stream_ = nullptr;
  int* h_io_ = nullptr;  // pinned: [0] token, [1] position, [2] argmax, [3] sampled
  int* d_io_ = nullptr;  // the decode step reads its token from [0] and its position from [1]
  // Chained decode (StepInput::chain_next / queue): the position the last step with chain_next
  // left in d_io_[1] (-1: none), the queued steps' id slots (h_q_ mapped, d_q_ its device view)
  // and events, and how many steps were queued / taken.
  int64_t chain_pos_ = -1;
  int* h_q_ = nullptr;
  int* d_q_ = nullptr;
  cudaEvent_t q_ev_[kMaxQueued] = {};
  int64_t q_queued_ = 0, q_taken_ = 0;
  cuda::ArgmaxScratch argmax_;
  cuda::SampleScratch sample_;  // allocated at the first sampled step
  const Model* m_ = nullptr;
  std::vector<LayerDev> layers_;
  std::unordered_map<const Weight*, DeviceWeight> mats_;  // MatMul weight -> device view
  std::unordered_map<const Weight*, const float*> vecs_;  // norm/bias vectors
  std::unordered_map<const Weight*, int> gate_up_layer_;  // gate weight -> layer (interleaved)
  std::vector<DeviceWeight> extra_;                       // output / embedding copies
  std::vector<void*> buffers_;
  void* embd_raw_ = nullptr;  // token_embd in GGUF layout, for the lookup
  DType embd_type_ = DType::F32;  // its type there (the file's, or its re-encoding's: gpu_source)
  const float2* rope_table_ = nullptr;  // RoPE (cos, sin) per position and pair (knob rope_table), or null
  const float* rope_ff_ = nullptr;      // RoPE frequency divisors [head_dim / 2] (Llama 3.1+), or null
  uint64_t decode_bytes_ = 0;
  std::map<const Graph*, GraphState> states_;
  std::vector<ProfileEntry> profile_;
  std::vector<ProfileEntry> timeline_;
  unsigned long long* tl_op_ = nullptr;  // timeline slots of the op being launched (launch_all)
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
  bool qkv_epilogue_in_gemv_ = true;
  bool qkv_post_pdl_ = false;                // decode: the epilogue kernel launched with PDL
  Tri qkv_post_room_ = Tri::Auto;            // decode: SMs left free for it by the QKV GEMV (qkv_post_spare_sms)
  bool o_room_ = false;                      // decode: o_proj's grid leaves SMs free (o_spare_sms)
  bool gateup_room_ = false;                 // decode: gate/up's grid leaves SMs free for down (gateup_spare_sms)
  bool down_fit_ = false;                    // decode: down runs on the SMs gate/up left free (GemvArgs::fit_sms)
  std::pair<int, int> gateup_free_{-1, 0};   // (layer, SMs) gate/up's launch left free, for that layer's down
  // Integer-dot GEMVs with 16-bit activation codes (knob cuda_act16, cuda::set_gemv_act16): no
  // 8-bit producer codes (gemv_xq, attn_xq, attn_o_fusion) and no int8 prefill activations then.
  bool act16_ = false;
  bool gemv_xq_ = false;                     // decode: down's x quantized by gate/up (plan_xq)
  bool attn_xq_ = false;                     // decode: o_proj's x quantized by the merge (plan_xq)
  bool attn_xq_direct_ = false;              // ... and by the direct split in direct steps (attn_xq_direct_auto)
  bool attn_staged_ = false;                 // decode: attention pass 1 from shared-memory stages
  bool attn_single_split_ = false;           // decode: staged attention up to 64 positions in one split
  // Decode steps at lengths up to this run a direct attention (one split per KV head writing the
  // output, no merge kernel) from their own graph; 0 = never (knob attn_direct).
  int attn_direct_max_ = 0;
  int attn_direct_hpb_ = 0;   // query heads per block of the direct launch (0 = a KV head's group; knob attn_head_split)
  bool direct_step_ = false;  // the step being launched or captured uses the direct attention
  // Decode: o_proj inside the direct attention (knob attn_o_fusion): in direct steps the o_proj
  // op launches nothing, the attention adds its products into o_acc_ + layer * n_embd (zeroed by
  // the next layer's attention, cyclically), and gate/up folds that accumulator into the residual.
  bool attn_o_ = false;
  float* o_acc_ = nullptr;  // [n_layer][n_embd], buffers_
  // The o_proj op of a direct step whose attention runs it (launches nothing).
  bool skipped(const Graph& g, const Op& op) const {
    return attn_o_ && direct_step_ && g.n_tokens == 1 && !g.paged && is_o_proj(op);
  }
  bool is_o_proj(const Op& op) const {
    return op.kind == OpKind::MatMul && op.layer >= 0 && op.w == &m_->layers[size_t(op.layer)].wo;
  }
  bool attn_o_possible() const;
  // Prefill (T > 1)
  cuda::GemmHandle* gemm_ = nullptr;
  cuda::PrefillTuner tuner_;     // measured routes (prefill_tune.h)
  std::map<std::tuple<int, int64_t, int64_t>, std::vector<const DeviceWeight*>> same_shape_;
  cuda::X16Tag pf_x16_;          // SiLU -> down activation handoff (prefill.h X16Tag)
  cuda::PrefillScratch pf_;      // fp16 weight rows + fp16 activations, shared by every graph
  size_t pf_w_elems_ = 0;        // largest layer weight (rows x cols), set at load
  float* pf_qkv_raw_ = nullptr;  // [kPrefillChunk][q + 2 kv] fused QKV product before its epilogue
  int* d_tokens_ = nullptr;      // [kPrefillChunk] token ids of a prefill run
  int* h_tokens_ = nullptr;      // pinned staging for them
  // Batch steps over the paged pools (alloc_kv): per layer K and V pools [n_kv][n_slots][head_dim].
  std::vector<uint16_t*> kpool_, vpool_;
  int64_t n_slots_ = 0;
  int block_shift_ = 0;
  void free_pools() {
    for (auto* p : kpool_) cudaFree(p);
    for (auto* p : vpool_) cudaFree(p);
    kpool_.clear();
    vpool_.clear();
  }
  // The step's rows, uploaded in one copy (run_batch): tokens go to d_tokens_; here row_pos [T],
  // row_slot [T], row_seq [T], out_rows [n_out], tab_off [n_entries], then the block tables.
  struct BatchDev {
    const int *row_pos = nullptr, *row_slot = nullptr, *row_seq = nullptr, *out_rows = nullptr;
    const int *tab_off = nullptr, *tables = nullptr;
    int max_len = 0;
  };
  const BatchDev* batch_ = nullptr;  // set while a batch step launches
  BatchDev bd_;
  int* d_batch_ = nullptr;
  int* h_batch_ = nullptr;
  size_t batch_cap_ = 0;             // ints of both
  float* d_paged_part_ = nullptr;    // the paged attention's partials
  size_t paged_part_cap_ = 0;        // floats
  void run_batch(Graph& g, GraphState& st, const StepInput& in);
};

// Tensor parallelism on CUDA needs an NCCL communicator per rank and the all-reduce on the
// stream (docs/SCALING.md); until then a rank model or a graph with an all-reduce is refused.
inline constexpr const char* kNoTpOnCuda =
    "cuda: tensor parallelism (all-reduce across ranks) is not implemented on CUDA yet; the CPU "
    "simulation runs it: lmfuse logits --tp-sim N";

}  // namespace lmf::cuda_impl

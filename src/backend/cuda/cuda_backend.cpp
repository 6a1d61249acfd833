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

namespace lmf {
namespace {

using cuda::DeviceWeight;
using cuda::Epilogue;
using cuda::Prologue;

// Most tokens one prefill run takes (longer prompts: the Session runs chunks). 2048 rather than
// 512: the outer route dequantizes each weight once per run, so a longer run amortizes it (8B
// gate|up: 4 x 239 µs at 512 rows vs 681 µs at 2048, sweep run P3); memory stays bounded: the
// largest supported model's T-row tensors are ~210 MB each (n_ff 25600) and the scratch ~0.5 GB.
constexpr int64_t kPrefillChunk = 2048;

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
  unsigned* attn_counters = nullptr;  // merge fusion: n_kv_head counters, zero between launches
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
    cudaFree(st.attn_counters);
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
  bool qkv_epilogue_in_attention_ = false;  // decode: the attention kernel runs it (POST)
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
  bool attn_merge_fusion_ = false;           // decode: the last split block merges (no merge kernel)
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
constexpr const char* kNoTpOnCuda =
    "cuda: tensor parallelism (all-reduce across ranks) is not implemented on CUDA yet; the CPU "
    "simulation runs it: lmfuse logits --tp-sim N";

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
  qkv_epilogue_in_gemv_ = tri_resolve(k.rope_fusion, false);
  // Else: the layer's attention kernel runs the epilogue (one launch fewer per layer) or its own
  // kernel between the GEMV and the attention (knob attn_rope_fusion, automatic = own kernel
  // until measured otherwise: docs/PERF.md, session 5).
  qkv_epilogue_in_attention_ = !qkv_epilogue_in_gemv_ && tri_resolve(k.attn_rope_fusion, false);
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
  // Same arithmetic as the merge kernel (bitwise: cuda_op_tests CudaAttention), one launch fewer,
  // but slower (docs/PERF.md, session 8: 0.93-0.96x; the last block's fence, count and merge are
  // a longer serial chain than the merge kernel's launch): automatic = off.
  attn_merge_fusion_ = fusion && tri_resolve(k.attn_merge_fusion, false);
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
  // o_proj's x quantized by the attention's merge kernel (so not with merge fusion). Measured
  // per model (docs/PERF.md, session 13, `--ab attn_xq`, two runs): 4B 1.012 / 1.012, 8B 1.013 /
  // 0.999, 0.6B 0.983 / 0.993: automatic = on from the wide GEMVs' hidden size.
  attn_xq_ = fusion && tri_resolve(k.attn_xq, cuda::large_decode_model(hp.n_embd)) && !attn_merge_fusion_ && !act16_;
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
// prepare has set: direct steps with one query head per block (staged) at head_dim 128, no QKV
// epilogue in the attention, every layer's o_proj Q4_0, gate/up able to fold the add, and two
// layers or more (a layer zeroes the previous one's accumulator).
bool CudaBackend::attn_o_possible() const {
  const Knobs& k = opts_.knobs;
  const auto& hp = m_->hp;
  if (attn_direct_max_ == 0 || attn_direct_hpb_ != 1 || qkv_epilogue_in_attention_ || hp.head_dim != 128 ||
      hp.n_layer < 2 || k.gateup_fusion == Tri::Off || k.ln_fusion == Tri::Off)
    return false;
  for (const auto& W : m_->layers) {
    const auto it = mats_.find(&W.wo);
    if (it == mats_.end() || it->second.type != DType::Q4_0) return false;  // (no model here has an o bias)
  }
  return true;
}

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
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st.attn_counters), size_t(hp.n_head_kv) * sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(st.attn_counters, 0, size_t(hp.n_head_kv) * sizeof(unsigned)));
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
      if (attn_merge_fusion_) a.counters = st.attn_counters;
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
      if (qkv_epilogue_in_attention_)
        for (const auto& grp : g.groups)
          if (grp.kind == GroupKind::QKV && grp.layer == op.layer && grp.accepted) {
            const cuda::QkvPostArgs e = qkv_epilogue_args(g, st, grp);
            a.qkv_raw = st.qkv_raw;  // the group's GEMV left q|k|v there; q (IN(0)) is unwritten
            a.q_norm = e.q_norm;
            a.k_norm = e.k_norm;
            a.norm_eps = e.eps;
            a.rope = e.rope;
            a.theta = e.theta;
            a.rope_ff = e.rope_ff;
            a.rope_cs = e.rope_cs;  // the RoPE table when rope_table is on (the same values)
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
      if (!qkv_epilogue_in_attention_) a.spare_sms = qkv_post_spare_sms(e, L->qkv.type);
      cuda::gemv(pro, Epilogue::Store, a, stream_);
      if (qkv_epilogue_in_attention_) break;  // the layer's Attention op runs it
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
  const size_t need = size_t(4 * T + n_out + in.n_entries + n_tab);
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

}  // namespace

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
  return std::make_unique<CudaBackend>(o);
}

}  // namespace lmf

// The CPU backend: the reference for every other backend. It runs the planned graph op by op;
// accepted Q/K/V and gate/up groups run as one pass over their shared input (activations are
// quantized once and the rows of all members are split across threads together).
#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <numeric>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "util/log.h"
#include "util/status.h"

namespace lmf {
namespace {

// cpu_act16 unset: 16-bit activation blocks, the exact reference (real-model rel-L2 1.3e-3 vs
// 9e-2 with 8 bits) at ~0.69x the 8-bit prefill speed, still >= 1.3x llama.cpp on the 2-core
// box (docs/PERF.md, "CPU 16-bit activations").
constexpr bool kAct16Auto = true;

// Memory the kernel says a new allocation can get without swapping (MemAvailable), 0 if unknown.
uint64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (f >> key >> kib) {
    if (key == "MemAvailable:") return kib << 10;
    f.ignore(64, '\n');
  }
  return 0;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& o)
      : opts_(o),
        pool_(o.n_threads),
        act_(tri_resolve(o.knobs.cpu_act16, kAct16Auto) ? cpu::ActBits::Int16 : cpu::ActBits::Int8) {}

  std::string name() const override { return "cpu"; }
  std::string description() const override {
    if (m_ && !m_->quantized_matmuls())  // F16/BF16/F32 projections: float activations
      return cat("CPU ", cpu::isa_name(cpu::active_isa()), ", ", pool_.size(), " threads, float activations");
    return cat("CPU ", cpu::isa_name(cpu::active_isa()), ", ", pool_.size(), " threads, ", int(act_), "-bit activations");
  }
  const BackendOptions& options() const override { return opts_; }
  std::vector<ProfileEntry> profile() const override { return profile_; }

  // Q4_0 / Q4_K projections repacked in 16-row panels for the AVX-512 decode GEMV (knob cpu_repack;
  // backend/cpu/repack.h). The embedding lookup keeps reading the file's rows.
  void load(const Model& m) override {
    m_ = &m;
    x16_.clear();
    if (!tri_resolve(opts_.knobs.cpu_repack, cpu::active_isa() == cpu::Isa::Avx512)) return;
    std::vector<const Weight*> ws;
    for (const auto& L : m.layers)
      for (const Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) ws.push_back(w);
    ws.push_back(&m.output);
    std::vector<const Weight*> todo;
    for (const Weight* w : ws)
      if (cpu::x16_supported(*w) && !x16_.count(w)) todo.push_back(w), x16_[w];
    pool_.parallel_for(int64_t(todo.size()), [&](int, int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) x16_.at(todo[size_t(i)]) = cpu::repack_x16(*todo[size_t(i)]);
    });
  }
  const cpu::X16Weight* x16(const Weight* w) const {
    const auto it = x16_.find(w);
    return it == x16_.end() ? nullptr : &it->second;
  }

  // Read bandwidth of this pool's threads over a 1 GiB buffer (each thread sums its own first-
  // touched slice; best of 3 passes), measured once per backend: what a decode step's weight
  // stream can reach at most.
  double copy_bandwidth() override {
    if (read_bw_ > 0) return read_bw_;
    constexpr size_t kBytes = size_t(1) << 30, kWords = kBytes / sizeof(uint64_t);
    std::unique_ptr<uint64_t[]> buf(new uint64_t[kWords]);
    const int nt = pool_.size();
    std::vector<uint64_t> sums(size_t(nt), 0);
    pool_.parallel_for(nt, [&](int, int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (size_t i = kWords * size_t(t) / size_t(nt); i < kWords * size_t(t + 1) / size_t(nt); ++i) buf[i] = i;
    });
    double best = 0;
    for (int pass = 0; pass < 3; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      pool_.parallel_for(nt, [&](int, int64_t a, int64_t b) {
        for (int64_t t = a; t < b; ++t) {
          // 16-byte loads (SSE2, every x86-64), 4 independent sums: one 64-byte line per step.
          __m128i s[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
          const size_t lo = kWords * size_t(t) / size_t(nt) / 8 * 8, hi = kWords * size_t(t + 1) / size_t(nt) / 8 * 8;
          for (size_t i = lo; i < hi; i += 8)
            for (int k = 0; k < 4; ++k)
              s[k] = _mm_add_epi64(s[k], _mm_load_si128(reinterpret_cast<const __m128i*>(buf.get() + i + 2 * size_t(k))));
          alignas(16) uint64_t o[2];
          _mm_store_si128(reinterpret_cast<__m128i*>(o), _mm_add_epi64(_mm_add_epi64(s[0], s[1]), _mm_add_epi64(s[2], s[3])));
          sums[size_t(t)] += o[0] + o[1];
        }
      });
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, double(kBytes) / dt);
    }
    if (std::accumulate(sums.begin(), sums.end(), uint64_t(0)) == 1) LMF_LOG(Debug, "read bandwidth sum");  // keep the reads
    read_bw_ = best;
    return read_bw_;
  }
  const char* bandwidth_kind() const override { return "read"; }
  // One decode step reads every projection and the output matrix once (the embedding: one row).
  uint64_t decode_weight_bytes() const override {
    if (!m_) return 0;
    uint64_t n = m_->output.nbytes;
    for (const auto& L : m_->layers)
      for (const Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) n += w->nbytes;
    return n;
  }

  // The KV cache is the runtime's (runtime/kv_cache.h); this backend holds its pools.
  bool paged_kv() const override { return true; }
  uint64_t kv_memory_available() const override { return available_memory_bytes(); }

  void alloc_kv(int64_t n_blocks, int64_t block_size) override {
    LMF_CHECK(m_ && n_blocks > 0 && block_size > 0 && (block_size & (block_size - 1)) == 0);
    const auto& hp = m_->hp;
    // The pools are zero-filled now: past the memory there is, that is an OOM kill, not an
    // error, so a cache that cannot fit is refused first.
    const int64_t rows = n_blocks * block_size;
    const uint64_t kv_bytes = hp.kv_cache_bytes(rows);
    if (const uint64_t avail = available_memory_bytes(); avail > 0 && kv_bytes > avail)
      LMF_FAIL("the KV cache for ", rows, " positions needs ", (kv_bytes >> 20), " MiB; ", (avail >> 20),
               " MiB of memory are available (lower -c or --kv-budget)");
    block_shift_ = 0;
    while ((int64_t(1) << block_shift_) < block_size) ++block_shift_;
    kc_.assign(size_t(hp.n_layer), std::vector<uint16_t>(size_t(rows * hp.kv_dim())));
    vc_.assign(size_t(hp.n_layer), std::vector<uint16_t>(size_t(rows * hp.kv_dim())));
  }

  void copy_kv_block(int32_t src, int32_t dst) override {
    const int64_t n = (int64_t(1) << block_shift_) * m_->hp.kv_dim();
    for (size_t l = 0; l < kc_.size(); ++l) {
      std::memcpy(kc_[l].data() + dst * n, kc_[l].data() + src * n, size_t(n) * 2);
      std::memcpy(vc_[l].data() + dst * n, vc_[l].data() + src * n, size_t(n) * 2);
    }
  }

  void prepare(Graph& g) override {
    for (const Op& op : g.ops)
      if (op.kind == OpKind::AllReduce) {
        if (!opts_.comm)
          LMF_FAIL("cpu: the graph sums partial results across tensor-parallel ranks (", op.name,
                   "), but this backend has no communicator (BackendOptions::comm)");
        if (opts_.comm->size() != m_->tp.size || opts_.comm->rank() != m_->tp.rank)
          LMF_FAIL("cpu: the model is tensor-parallel rank ", m_->tp.rank, " of ", m_->tp.size,
                   ", the communicator rank ", opts_.comm->rank(), " of ", opts_.comm->size());
        break;
      }
    const Knobs& k = opts_.knobs;
    const bool fusion = k.fusion != Tri::Off;
    for (auto& grp : g.groups) {
      switch (grp.kind) {
        case GroupKind::QKV:
        case GroupKind::GateUp: {
          const Tri knob = grp.kind == GroupKind::QKV ? k.qkv_fusion : k.gateup_fusion;
          // One pass over the shared input: activations quantized once, one parallel region.
          // Measured within noise of separate passes on the 2-core box (docs/PERF.md, CPU
          // fusion A/B: 0.94-1.10); kept on automatically since it never measured worse.
          grp.accepted = fusion && tri_resolve(knob, true);
          if (!grp.accepted) {
            grp.reject_reason = fusion ? "knob off" : "fusion disabled";
            break;
          }
          // Folding the norm saves nothing on the CPU (the leader would run the same loop):
          // automatic = off, forcing it on runs it inside the leader's launch.
          grp.fold_norm = grp.norm >= 0 && tri_resolve(k.ln_fusion, false);
          grp.fold_add = grp.fold_norm && grp.add >= 0;
          grp.fold_epilogue = false;
          break;
        }
        case GroupKind::OResid:
        case GroupKind::DownResid:
          grp.reject_reason = "residual epilogue not fused on the CPU";
          break;
        case GroupKind::Logits:
          grp.reject_reason = "the output norm is not folded on the CPU (it would save no pass)";
          break;
      }
    }
  }

  void finalize(Graph& g) override {
    if (arena_.size() < g.total_bytes / sizeof(float) + 1) arena_.resize(g.total_bytes / sizeof(float) + 1);
  }

  void run(Graph& g, const StepInput& in_) override {
    LMF_CHECK(g.n_tokens == in_.n_tokens);
    StepInput in = in_;
    BatchEntry one;
    if (!in.entries) {
      // One sequence at pos0 without a runtime cache (the protocol of backends that keep their own,
      // which tests drive through a wrapper): pools of opts.n_ctx positions, block i = position
      // block i.
      constexpr int64_t kBs = 32;
      const int64_t n_blocks = (opts_.n_ctx + kBs - 1) / kBs;
      if (identity_blocks_.size() != size_t(n_blocks)) {
        alloc_kv(n_blocks, kBs);
        identity_blocks_.resize(size_t(n_blocks));
        for (int64_t b = 0; b < n_blocks; ++b) identity_blocks_[size_t(b)] = int32_t(b);
      }
      LMF_CHECK(in.pos0 + in.n_tokens <= n_blocks * kBs);
      one = {0, in.n_tokens, in.pos0, identity_blocks_.data(), n_blocks};
      in.entries = &one;
      in.n_entries = 1;
    }
    LMF_CHECK(!kc_.empty(), "no KV pools: alloc_kv first");
    LMF_CHECK(g.n_gather == 0 || in.out_rows);
    finalize(g);
    if (in.profile) profile_.clear();
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const Op& op = g.ops[i];
      if (!op.launch) continue;
      const auto t0 = std::chrono::steady_clock::now();
      if (op.group >= 0) run_group(g, g.groups[size_t(op.group)], in);
      else run_op(g, op, in);
      if (in.profile) {
        std::string kind = op_kind_name(op.kind);
        if (op.group >= 0) kind = cat("matmul ", dtype_name(op.w->type), " ", group_kind_name(g.groups[size_t(op.group)].kind));
        else if (op.kind == OpKind::MatMul) kind = cat("matmul ", dtype_name(op.w->type));
        profile_.push_back({op.name, kind, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count()});
      }
    }
    const GTensor& lt = g.t(g.logits);
    const float* l = ptr(g, g.logits);
    if (in.logits) std::memcpy(in.logits, l, lt.bytes());
    if (in.row_argmax)
      for (int64_t r = 0; r < lt.rows; ++r) {
        const float* row = l + r * lt.cols;
        in.row_argmax[r] = int32_t(std::max_element(row, row + lt.cols) - row);  // as lmf::argmax
      }
    if (in.argmax) {
      const float* last = l + (lt.rows - 1) * lt.cols;
      *in.argmax = int32_t(std::max_element(last, last + lt.cols) - last);
    }
  }

 private:
  float* ptr(const Graph& g, int t) { return arena_.data() + g.t(t).offset / sizeof(float); }

  void run_group(Graph& g, const FusionGroup& grp, const StepInput& in) {
    if (grp.fold_add) run_op(g, g.ops[size_t(grp.add)], in);
    if (grp.fold_norm) run_op(g, g.ops[size_t(grp.norm)], in);
    std::vector<cpu::MatmulTask> tasks;
    const Op& lead = g.ops[size_t(grp.leader())];
    for (int mi : grp.members) {
      const Op& m = g.ops[size_t(mi)];
      tasks.push_back({m.w, ptr(g, m.out[0]), m.w->rows, m.b ? cpu::as_f32(*m.b) : nullptr, x16(m.w)});
    }
    const GTensor& x = g.t(lead.in[0]);
    cpu::matmul(tasks, ptr(g, lead.in[0]), x.rows, x.cols, pool_, scratch_, cpu::active_isa(), act_);
    if (grp.fold_epilogue)
      for (int e : grp.epilogue) run_op(g, g.ops[size_t(e)], in);
  }

  // Row-parallel element-wise work for prompts (each row's result does not depend on the split);
  // a decode step (one row) stays on the calling thread.
  template <class F>
  void rows(int64_t n, const F& f) {
    if (n < 8) return f(0, n);
    pool_.parallel_for(n, [&](int, int64_t b, int64_t e) { f(b, e); });
  }

  void run_op(Graph& g, const Op& op, const StepInput& in) {
    const auto& hp = m_->hp;
    auto IN = [&](int i) { return ptr(g, op.in[size_t(i)]); };
    auto OUT = [&](int i) { return ptr(g, op.out[size_t(i)]); };
    const int64_t T = g.n_tokens;
    switch (op.kind) {
      case OpKind::Embed:
        for (int64_t t = 0; t < T; ++t) {
          const int64_t id = in.tokens[t] - op.vocab_begin;
          if (op.embed_slice && (id < 0 || id >= op.w->rows))  // another rank's token: its row is summed in
            std::memset(OUT(0) + t * hp.n_embd, 0, size_t(hp.n_embd) * sizeof(float));
          else
            cpu::embed_row(*op.w, int32_t(id), OUT(0) + t * hp.n_embd);
        }
        break;
      case OpKind::RmsNorm: {
        const GTensor& y = g.t(op.out[0]);
        float* out = OUT(0);
        if (op.gather_rows) {  // a batch step's output rows, one per sequence
          for (int64_t r = 0; r < y.rows; ++r)
            cpu::rms_norm(IN(0) + in.out_rows[r] * y.cols, cpu::as_f32(*op.w), out + r * y.cols, 1, y.cols, op.eps);
          break;
        }
        const float* x = IN(0) + op.row_begin * y.cols;
        rows(y.rows, [&](int64_t r0, int64_t r1) {
          cpu::rms_norm(x + r0 * y.cols, cpu::as_f32(*op.w), out + r0 * y.cols, r1 - r0, y.cols, op.eps);
        });
        break;
      }
      case OpKind::MatMul: {
        const GTensor& x = g.t(op.in[0]);
        cpu::MatmulTask task{op.w, OUT(0), op.w->rows, op.b ? cpu::as_f32(*op.b) : nullptr, x16(op.w)};
        cpu::matmul({&task, 1}, IN(0), x.rows, x.cols, pool_, scratch_, cpu::active_isa(), act_);
        break;
      }
      case OpKind::HeadNorm: {
        const GTensor& x = g.t(op.in[0]);
        const float* xi = IN(0);
        float* out = OUT(0);
        rows(x.rows, [&](int64_t r0, int64_t r1) {
          cpu::head_norm(xi + r0 * x.cols, cpu::as_f32(*op.w), out + r0 * x.cols, r1 - r0, int(x.cols / op.head_dim),
                         op.head_dim, op.eps);
        });
        break;
      }
      case OpKind::Rope: {
        const GTensor& x = g.t(op.in[0]);
        const float* xi = IN(0);
        float* out = OUT(0);
        for (int64_t e = 0; e < in.n_entries; ++e) {  // each sequence's rows at its own positions
          const BatchEntry& E = in.entries[e];
          const int64_t o = E.row0 * x.cols;
          rows(E.n_rows, [&](int64_t r0, int64_t r1) {
            cpu::rope(xi + o + r0 * x.cols, out + o + r0 * x.cols, r1 - r0, int(x.cols / op.head_dim), op.head_dim,
                      E.pos0 + r0, op.rope_theta, op.rope_factors, op.rope_neox);
          });
        }
        break;
      }
      case OpKind::KvStore: {
        const float *k = IN(0), *v = IN(1);
        uint16_t *kc = kc_[size_t(op.layer)].data(), *vc = vc_[size_t(op.layer)].data();
        const int64_t kvd = hp.kv_dim();
        for (int64_t e = 0; e < in.n_entries; ++e) {
          const BatchEntry& E = in.entries[e];
          rows(E.n_rows, [&](int64_t r0, int64_t r1) {
            cpu::kv_store_paged(k + (E.row0 + r0) * kvd, v + (E.row0 + r0) * kvd, kc, vc, r1 - r0, kvd, E.pos0 + r0,
                                E.blocks, block_shift_);
          });
        }
        break;
      }
      case OpKind::Attention: {
        const int64_t qd = int64_t(op.n_head) * op.head_dim;
        seqs_.resize(size_t(in.n_entries));
        for (int64_t e = 0; e < in.n_entries; ++e) {
          const BatchEntry& E = in.entries[e];
          seqs_[size_t(e)] = {IN(0) + E.row0 * qd, OUT(0) + E.row0 * qd, E.n_rows, E.pos0, E.blocks};
        }
        cpu::attention_paged(seqs_.data(), in.n_entries, kc_[size_t(op.layer)].data(), vc_[size_t(op.layer)].data(),
                             block_shift_, op.n_head, op.n_head_kv, op.head_dim, pool_);
        break;
      }
      case OpKind::Add:
        cpu::add(IN(0), IN(1), OUT(0), g.t(op.out[0]).rows * g.t(op.out[0]).cols);
        break;
      case OpKind::SiluMul:
        cpu::silu_mul(IN(0), IN(1), OUT(0), g.t(op.out[0]).rows * g.t(op.out[0]).cols, pool_);
        break;
      case OpKind::AllReduce: {  // in place: prepare checked the communicator
        const GTensor& x = g.t(op.in[0]);
        LMF_CHECK(op.out.size() == 1 && op.out[0] == op.in[0]);
        opts_.comm->all_reduce_sum(IN(0), x.rows * x.cols);
        break;
      }
    }
  }

  BackendOptions opts_;
  ThreadPool pool_;
  cpu::ActBits act_;  // activation blocks of the quantized matmuls (knob cpu_act16)
  double read_bw_ = 0;  // copy_bandwidth(), once measured
  const Model* m_ = nullptr;
  std::unordered_map<const Weight*, cpu::X16Weight> x16_;  // repacked Q4_0 projections (load)
  std::vector<float> arena_;
  std::vector<std::vector<uint16_t>> kc_, vc_;  // per layer: [n_blocks * block_size, kv_dim] fp16 pools
  int block_shift_ = 0;                          // block_size = 1 << block_shift_
  std::vector<cpu::PagedSeq> seqs_;
  std::vector<int32_t> identity_blocks_;  // the one-sequence protocol's block table (run without entries)
  cpu::MatmulScratch scratch_;
  std::vector<ProfileEntry> profile_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& o) { return std::make_unique<CpuBackend>(o); }

}  // namespace lmf

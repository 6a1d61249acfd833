// The Backend interface. A backend sees a planned graph: prepare() is called when shapes change
// (after the memory plan exists) to choose kernels, accept or reject fusion groups and size
// scratch; run() only launches what prepare chose, so a whole step can be captured and replayed.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/communicator.h"
#include "graph/graph.h"
#include "model/model.h"
#include "util/knobs.h"
#include "util/status.h"

namespace lmf {

struct SamplingParams;  // sampling/sampler.h

struct BackendOptions {
  int n_threads = 0;   // CPU threads (0 = default)
  int64_t n_ctx = 0;   // KV cache length
  Knobs knobs;
  int device = 0;      // CUDA device ordinal
  // A tensor-parallel rank's collectives (graphs with OpKind::AllReduce); not owned, outlives the
  // backend. Null for a whole model.
  Communicator* comm = nullptr;
  // Called by backends whose load() copies the weights (CUDA: repack + upload, layer by layer)
  // after each part: bytes of the model's weights handled so far and in all, parts done and in
  // all. Backends that map the file in place (CPU) never call it. Null = no calls.
  std::function<void(uint64_t bytes_done, uint64_t bytes_total, int64_t parts_done, int64_t parts_total)>
      load_progress;
};

// One sequence's rows in a step of a paged-KV backend (runtime/kv_cache.h): rows
// [row0, row0 + n_rows) of the step's tokens are its positions [pos0, pos0 + n_rows); its block
// table covers positions [0, pos0 + n_rows), so attention reads its own pages and the new K/V
// rows go to theirs.
struct BatchEntry {
  int64_t row0 = 0, n_rows = 0, pos0 = 0;
  const int32_t* blocks = nullptr;
  int64_t n_blocks = 0;
};

struct StepInput {
  const int32_t* tokens = nullptr;
  int64_t n_tokens = 0;
  int64_t pos0 = 0;        // position of tokens[0]; the cache holds 0..pos0-1 already
  // Paged-KV backends (Backend::paged_kv): the sequences of this step, in row order, covering
  // every row (pos0 is then unused). out_rows: the rows whose logits the step computes, for a
  // graph built with gathered outputs (build_graph's n_gather), in output order.
  const BatchEntry* entries = nullptr;
  int64_t n_entries = 0;
  const int64_t* out_rows = nullptr;
  float* logits = nullptr;  // host, [n_out, n_vocab]; may be null when argmax or row_argmax is set
  // Paged-KV backends: if set, host [n_out]: the argmax of each output row (smallest index of the
  // maximum; NaN never wins), so a greedy batch step need not bring its logits to the host.
  int32_t* row_argmax = nullptr;
  int32_t* argmax = nullptr; // if set: argmax of the last row's logits (on the device where possible)
  bool profile = false;      // time each launch (no graph replay); read with Backend::profile()
  // Device sampling (only when Backend::can_sample said yes; logits may then be null):
  // *sampled = sample_with_uniform(*sample, last row, penalty_ids, sample_u01) (sampling/sampler.h).
  const SamplingParams* sample = nullptr;
  const int32_t* penalty_ids = nullptr;  // distinct ids in [0, n_vocab)
  int64_t n_penalty_ids = 0;
  double sample_u01 = 0;
  int32_t* sampled = nullptr;
  // Chained decode (only where Backend::can_chain said yes for these parameters):
  // token_on_device: the input token is the id of the previous step, which that step (run with
  //   chain_next) left on the device; `tokens` is not read.
  // chain_next: this step's argmax / sampled id also becomes the next step's input on the device,
  //   at position pos0 + n_tokens.
  // queue: return once the step is queued; argmax / sampled are not written, the id comes from
  //   Backend::take_queued() (oldest first; at most kMaxQueued steps outstanding).
  bool token_on_device = false;
  bool chain_next = false;
  bool queue = false;
};

struct ProfileEntry {
  std::string name;  // op or group leader name
  std::string kind;  // "gemv q4_0 qkv+addnorm", "attention", ...
  double us = 0;     // profile(): the launch timed alone; timeline(): end - previous kernel's end
  // timeline() only: PDL wait return - previous end, and previous end - first block start (how
  // long its blocks were resident before the previous kernel finished); the last block's start
  // and the latest end of a block's first phase (GEMV: x staged; others: the wait's return),
  // each after the previous end.
  double released_us = 0, early_us = 0, last_start_us = 0, phase_us = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;         // "cpu", "cuda"
  virtual std::string description() const = 0;  // "CPU AVX2, 2 threads"
  // Uploads/repacks weights and, unless paged_kv(), allocates its own KV cache for opts.n_ctx
  // positions.
  virtual void load(const Model& m) = 0;
  // Paged KV (the runtime owns the cache, runtime/kv_cache.h): steps come as BatchEntry lists
  // over blocks of the pools that alloc_kv made. A backend without it keeps one sequence's cache
  // and takes StepInput::pos0.
  virtual bool paged_kv() const { return false; }
  // Whether it also keeps a one-sequence cache of its own, for a Session of its own (run without
  // entries): CUDA, whose single-sequence step is a replayed graph with chained decode.
  virtual bool own_kv() const { return !paged_kv(); }
  // Most rows (tokens of all sequences together) one batch step may hold.
  virtual int64_t max_batch_rows() const { return INT64_MAX; }
  // Allocates the K and V pools of every layer: n_blocks blocks of block_size positions (fp16,
  // [n_blocks * block_size, kv_dim] per layer and K/V); a clear error when they cannot fit.
  virtual void alloc_kv(int64_t n_blocks, int64_t block_size) { LMF_FAIL(name(), ": no paged KV cache"); }
  // Copies block src's rows of every layer into block dst (the cache's copy-on-write).
  virtual void copy_kv_block(int32_t src, int32_t dst) { LMF_FAIL(name(), ": no paged KV cache"); }
  // Bytes of device (or host) memory a new KV pool may take, 0 when unknown.
  virtual uint64_t kv_memory_available() const { return 0; }
  // Decides fusions and kernels for this graph (flags were reset by the caller), then the
  // caller runs fix_overlaps + apply_groups. Must not depend on token values or positions.
  virtual void prepare(Graph& g) = 0;
  // Called after prepare, fix_overlaps and apply_groups: size scratch for the final plan.
  virtual void finalize(Graph& g) {}
  virtual void run(Graph& g, const StepInput& in) = 0;
  virtual const BackendOptions& options() const = 0;
  // Most tokens one run() may take (a backend without batched kernels runs prompts token by
  // token through its decode step; the Session splits accordingly).
  virtual int64_t max_tokens_per_run() const { return INT64_MAX; }
  // Measured device copy bandwidth in bytes/s (read + write counted), 0 when not measured. The
  // CPU backend measures a read bandwidth instead (what a decode step does); bandwidth_kind()
  // names which, for the bench's "% of ..." figure.
  virtual double copy_bandwidth() { return 0; }
  virtual const char* bandwidth_kind() const { return "copy"; }
  // Measured dense-GEMM peak in FLOP/s (CUDA: cuBLAS bf16 8192^3), 0 when not measured.
  virtual double gemm_peak_flops() { return 0; }
  // Weight bytes one decode step reads (for achieved-bandwidth figures).
  virtual uint64_t decode_weight_bytes() const { return 0; }
  // Whether run() can honor StepInput::sampled for these parameters (where the logits are);
  // otherwise the Session samples the host logits with the same function.
  virtual bool can_sample(const SamplingParams& p, int64_t n_vocab) const { return false; }
  // Whether run() honors StepInput::token_on_device / chain_next / queue for a step that picks
  // its token with these parameters (greedy: argmax; else device sampling without a repetition
  // penalty, whose ids would include the token still on the device).
  virtual bool can_chain(const SamplingParams& p, int64_t n_vocab) const { return false; }
  static constexpr int kMaxQueued = 2;
  // Waits for the oldest queued step and returns its id.
  virtual int32_t take_queued();
  // Per-launch times of the last run with StepInput::profile set.
  virtual std::vector<ProfileEntry> profile() const { return {}; }
  // The same step replayed as the decode graph runs it (CUDA: launch timeline of the replayed
  // graph, kernels overlapping under PDL), in launch order; empty where not recorded.
  virtual std::vector<ProfileEntry> timeline() const { return {}; }
};

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& o);
// Returns nullptr with *why set when CUDA was not built or no device is present.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& o, std::string* why);
// Whether the CUDA backend computes with weights of type t (false without CUDA). The K-quants,
// IQ4 and Q5 types run on the CPU only for now: `auto` then picks the CPU (runtime/load.cpp).
bool cuda_weight_supported(DType t);
// "cpu", "cuda", or "auto" (CUDA when built and a GPU is present, else CPU).
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& o);

}  // namespace lmf

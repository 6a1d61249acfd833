// The decoder as a small op graph for one forward pass over T tokens, with named intermediates
// ("blk.3.q_rope"), fusion groups formed once from its structure, and the memory plan that
// places every activation in one arena. See DESIGN.md ("The data model behind fusion").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/tensor.h"

namespace lmf {

enum class OpKind {
  Embed,      // in: tokens; w: token_embd            -> out [T, n_embd]
              //   (embed_slice: w holds token ids [vocab_begin, vocab_begin + w->rows) only;
              //   the rows of other tokens are zero, for the all-reduce that follows)
  RmsNorm,    // in: x (rows [row_begin, row_begin+T_out), or gathered); w: gamma -> out
  MatMul,     // in: x [T, cols]; w [rows, cols]; b: optional bias [rows] -> out [T, rows]
  HeadNorm,   // per-head RMSNorm (Qwen3 q/k norm): in [T, n*hd]; w: gamma [hd] -> out
  Rope,       // in [T, n*hd] -> out, positions pos0 + t; params rope_neox, rope_theta
  KvStore,    // in: k, v [T, n_kv*hd] -> writes the layer's KV cache at pos0..pos0+T-1
  Attention,  // in: q [T, n_head*hd]; reads the layer's KV cache 0..pos0+t -> out [T, n_head*hd]
  Add,        // in: a, b -> out = a + b
  SiluMul,    // in: gate, up -> out = silu(gate) * up
  // A tensor-parallel rank (Model::tp.size > 1): in place (in == out, [T, n_embd]), the sum of
  // this tensor over all ranks (Communicator::all_reduce_sum); after o_proj and down, whose
  // products are partial sums over the rank's heads / FFN rows.
  AllReduce,
};
const char* op_kind_name(OpKind k);

enum class TensorKind { Activation, Output };

struct GTensor {
  std::string name;
  int64_t rows = 0, cols = 0;  // f32, row-major
  TensorKind kind = TensorKind::Activation;
  // Memory plan (filled by plan_memory):
  int first_write = -1, last_read = -1;  // op indices
  size_t offset = 0;        // byte offset in the arena
  bool rehomed = false;     // moved out of the reuse pool into its own range (after the arena)
  size_t bytes() const { return size_t(rows * cols) * sizeof(float); }
};

struct Op {
  OpKind kind;
  std::string name;  // "blk.3.attn_norm"
  int layer = -1;
  std::vector<int> in, out;  // tensor ids
  const Weight* w = nullptr;
  const Weight* b = nullptr;
  int64_t row_begin = 0;  // RmsNorm: first input row read (logits of the last token only)
  // Embed of a vocab-parallel tensor-parallel rank: w is the slice of the table from token id
  // vocab_begin on (see OpKind::Embed).
  bool embed_slice = false;
  int64_t vocab_begin = 0;
  // RmsNorm: its output rows are the input rows StepInput::out_rows names (a batch step's
  // last row of each sequence), not a contiguous range; row_begin is then unused.
  bool gather_rows = false;
  // Attention / rope / head-norm parameters
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  float eps = 1e-6f;
  float rope_theta = 10000.f;
  const float* rope_factors = nullptr;  // [head_dim / 2] frequency divisors (HParams::rope_freq_factors) or null
  bool rope_neox = true;
  // Set by Backend::prepare; cleared at the start of every prepare.
  bool launch = true;  // false: folded into another op's launch (follower / absorbed)
  int group = -1;      // accepted fusion group this op belongs to
};

enum class GroupKind {
  QKV,        // members: q, k, v matmuls; norm: attn_norm; add: previous residual add;
              // epilogue: q/k head norms, ropes, kv store
  GateUp,     // members: gate, up; norm: ffn_norm; add: attention residual add; epilogue: silu_mul
  OResid,     // members: o_proj; epilogue: the residual add that consumes it
  DownResid,  // members: down; epilogue: the residual add that consumes it
              // (neither is formed where an AllReduce completes the product first: form_groups)
  Logits,     // members: the output projection (layer -1); norm: output_norm; add: the last
              // residual add (when no residual epilogue took it)
};
const char* group_kind_name(GroupKind k);

struct FusionGroup {
  GroupKind kind;
  int layer = -1;
  std::vector<int> members;   // matmul ops in model order; members[0] is the leader
  int norm = -1;              // RmsNorm op that produces the members' input (foldable)
  int add = -1;               // Add op producing the norm's input (foldable with the norm)
  std::vector<int> epilogue;  // ops absorbed into the leader's epilogue
  // Decided by prepare:
  bool accepted = false;
  bool fold_norm = false;     // norm (and add, if fold_add) computed inside the leader
  bool fold_add = false;
  bool fold_epilogue = false;
  std::string reject_reason;
  int leader() const { return members.front(); }
};

struct Graph {
  int64_t n_tokens = 0;    // T
  bool all_logits = false;
  int64_t n_gather = 0;    // > 0: the logits are of the n_gather rows StepInput::out_rows names
  // Run as batch steps over the runtime's paged KV cache (StepInput::entries; runtime/engine.h sets
  // it before prepare), so a backend that also keeps a cache of its own plans it for the pages.
  bool paged = false;
  std::vector<GTensor> tensors;
  std::vector<Op> ops;
  std::vector<FusionGroup> groups;
  int logits = -1;          // tensor id of the output logits
  size_t arena_bytes = 0;   // reuse pool size
  size_t total_bytes = 0;   // arena + re-homed tensors

  int add_tensor(std::string name, int64_t rows, int64_t cols, TensorKind kind = TensorKind::Activation);
  int add_op(Op op);
  const GTensor& t(int id) const { return tensors[size_t(id)]; }
  // Clears every decision of a previous prepare (launch flags, group membership, acceptance).
  void reset_fusion();
  std::string describe() const;  // ops, groups and plan, for --verbose / debugging
};

// The op that writes `tensor` (-1: none, a graph input), and the ops that read it, in order.
int producer_of(const Graph& g, int tensor);
std::vector<int> consumers_of(const Graph& g, int tensor);

// Forms fusion groups from the graph's structure (linears sharing an input, their producing
// norm and add, and the ops their output flows into). Called once after building the graph.
void form_groups(Graph& g);

// Assigns arena offsets from tensor lifetimes (reuse when lifetimes do not overlap).
void plan_memory(Graph& g, size_t align = 256);

// After prepare accepted groups: checks each accepted group's written ranges against the ranges
// it still reads. An overlapping output is re-homed to its own range (if max_extra_bytes allows);
// otherwise the group is rejected (and its ops launch again). Returns the number re-homed.
struct OverlapReport { int rehomed = 0; int rejected = 0; };
OverlapReport fix_overlaps(Graph& g, size_t max_extra_bytes = SIZE_MAX, size_t align = 256);

// Tensors an accepted group's single launch reads (produced outside it) and writes (read after
// it, or graph outputs). Intermediates inside the group are not materialized by a fused kernel.
void group_io(const Graph& g, const FusionGroup& grp, std::vector<int>& reads, std::vector<int>& writes);

// Marks followers/absorbed ops of accepted groups as launch=false per the group's fold flags.
void apply_groups(Graph& g);

}  // namespace lmf

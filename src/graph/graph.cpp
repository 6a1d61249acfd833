#include "graph/graph.h"

#include <algorithm>
#include <map>
#include <utility>

#include "util/status.h"

namespace lmf {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Embed: return "embed";
    case OpKind::RmsNorm: return "rms_norm";
    case OpKind::MatMul: return "matmul";
    case OpKind::HeadNorm: return "head_norm";
    case OpKind::Rope: return "rope";
    case OpKind::KvStore: return "kv_store";
    case OpKind::Attention: return "attention";
    case OpKind::Add: return "add";
    case OpKind::SiluMul: return "silu_mul";
    case OpKind::AllReduce: return "all_reduce";
  }
  return "?";
}

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::QKV: return "qkv";
    case GroupKind::GateUp: return "gate_up";
    case GroupKind::OResid: return "o_resid";
    case GroupKind::DownResid: return "down_resid";
    case GroupKind::Logits: return "logits";
  }
  return "?";
}

int Graph::add_tensor(std::string name, int64_t rows, int64_t cols, TensorKind kind) {
  GTensor t;
  t.name = std::move(name);
  t.rows = rows;
  t.cols = cols;
  t.kind = kind;
  tensors.push_back(std::move(t));
  return int(tensors.size() - 1);
}

int Graph::add_op(Op op) {
  ops.push_back(std::move(op));
  return int(ops.size() - 1);
}

void Graph::reset_fusion() {
  for (auto& op : ops) {
    op.launch = true;
    op.group = -1;
  }
  for (auto& g : groups) {
    g.accepted = g.fold_norm = g.fold_add = g.fold_epilogue = false;
    g.reject_reason.clear();
  }
  // Re-homing is a decision of the previous prepare too: return every tensor to the pool plan.
  bool any = false;
  for (auto& t : tensors) any |= std::exchange(t.rehomed, false);
  if (any) plan_memory(*this);
}

std::string Graph::describe() const {
  std::string s = cat("graph: T=", n_tokens, " ops=", ops.size(), " tensors=", tensors.size(),
                      " arena=", arena_bytes, " total=", total_bytes, "\n");
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    s += cat("  group ", i, " ", group_kind_name(g.kind), " L", g.layer, " leader=", ops[size_t(g.leader())].name,
             g.accepted ? " accepted" : " rejected", g.fold_norm ? " +norm" : "", g.fold_add ? " +add" : "",
             g.fold_epilogue ? " +epilogue" : "", g.reject_reason.empty() ? "" : " (" + g.reject_reason + ")", "\n");
  }
  return s;
}

// ---- fusion groups ------------------------------------------------------------------------

int producer_of(const Graph& g, int tensor) {
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (int o : g.ops[i].out)
      if (o == tensor) return int(i);
  return -1;
}

std::vector<int> consumers_of(const Graph& g, int tensor) {
  std::vector<int> r;
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (int in : g.ops[i].in)
      if (in == tensor) {
        r.push_back(int(i));
        break;
      }
  return r;
}

void form_groups(Graph& g) {
  g.groups.clear();
  // Linears that consume the same tensor, in model order.
  std::map<int, std::vector<int>> by_input;
  std::vector<int> order;
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].kind == OpKind::MatMul) {
      int x = g.ops[i].in[0];
      if (!by_input.count(x)) order.push_back(x);
      by_input[x].push_back(int(i));
    }
  for (int x : order) {
    const auto& members = by_input[x];
    const Op& lead = g.ops[size_t(members[0])];
    FusionGroup grp;
    grp.layer = lead.layer;
    grp.members = members;
    int p = producer_of(g, x);
    if (p >= 0 && g.ops[size_t(p)].kind == OpKind::RmsNorm) {
      grp.norm = p;
      int q = producer_of(g, g.ops[size_t(p)].in[0]);
      if (q >= 0 && g.ops[size_t(q)].kind == OpKind::Add) grp.add = q;
    }
    if (lead.layer < 0) {  // the output projection: only its norm (and add) can fold into it
      if (members.size() != 1 || grp.norm < 0) continue;
      grp.kind = GroupKind::Logits;
    } else if (members.size() == 3) {
      grp.kind = GroupKind::QKV;
      // Epilogue: everything between the projections and attention (head norms, RoPE, KV store).
      std::vector<int> frontier;
      for (int m : members) frontier.push_back(g.ops[size_t(m)].out[0]);
      while (!frontier.empty()) {
        int t = frontier.back();
        frontier.pop_back();
        for (int c : consumers_of(g, t)) {
          OpKind k = g.ops[size_t(c)].kind;
          if (k != OpKind::HeadNorm && k != OpKind::Rope && k != OpKind::KvStore) continue;
          if (std::find(grp.epilogue.begin(), grp.epilogue.end(), c) != grp.epilogue.end()) continue;
          grp.epilogue.push_back(c);
          for (int o : g.ops[size_t(c)].out) frontier.push_back(o);
        }
      }
      std::sort(grp.epilogue.begin(), grp.epilogue.end());
    } else if (members.size() == 2) {
      grp.kind = GroupKind::GateUp;
      auto c = consumers_of(g, g.ops[size_t(members[0])].out[0]);
      if (c.size() == 1 && g.ops[size_t(c[0])].kind == OpKind::SiluMul) grp.epilogue.push_back(c[0]);
    } else if (members.size() == 1) {
      auto c = consumers_of(g, lead.out[0]);
      // A tensor-parallel rank's o_proj / down product is a partial sum that an AllReduce
      // completes in place before the add reads it. A residual epilogue in the matmul would add
      // the residual to the partial sum, before the all-reduce ran (and so N times over), which
      // no overlap check would see: no group. Fusing the all-reduce with the add (and the next
      // norm) is a collective's epilogue, for a backend with one (docs/SCALING.md).
      if (std::any_of(c.begin(), c.end(), [&](int op) { return g.ops[size_t(op)].kind == OpKind::AllReduce; }))
        continue;
      if (c.size() != 1 || g.ops[size_t(c[0])].kind != OpKind::Add) continue;
      // From the structure: down projects the SiLU·mul product, o_proj the attention output.
      const int src = producer_of(g, lead.in[0]);
      if (src < 0) continue;
      const OpKind sk = g.ops[size_t(src)].kind;
      if (sk != OpKind::SiluMul && sk != OpKind::Attention) continue;
      grp.kind = sk == OpKind::SiluMul ? GroupKind::DownResid : GroupKind::OResid;
      grp.norm = grp.add = -1;
      grp.epilogue.push_back(c[0]);
    } else {
      continue;
    }
    g.groups.push_back(std::move(grp));
  }
}

// ---- memory plan ---------------------------------------------------------------------------

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

void plan_memory(Graph& g, size_t align) {
  for (auto& t : g.tensors) t.first_write = t.last_read = -1;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    for (int o : g.ops[i].out)
      if (g.tensors[size_t(o)].first_write < 0) g.tensors[size_t(o)].first_write = int(i);
    for (int in : g.ops[i].in) g.tensors[size_t(in)].last_read = int(i);
  }
  // Greedy first-fit over a free list, walking ops in order: outputs are placed before the
  // op's dead inputs are released, so an op never writes over what it reads.
  struct Block { size_t off, size; };
  std::vector<Block> free_list;
  size_t top = 0;
  auto alloc = [&](size_t n) {
    for (size_t i = 0; i < free_list.size(); ++i)
      if (free_list[i].size >= n) {
        size_t off = free_list[i].off;
        free_list[i].off += n;
        free_list[i].size -= n;
        if (free_list[i].size == 0) free_list.erase(free_list.begin() + long(i));
        return off;
      }
    size_t off = top;
    top += n;
    return off;
  };
  auto release = [&](size_t off, size_t n) {
    free_list.push_back({off, n});
    std::sort(free_list.begin(), free_list.end(), [](auto& a, auto& b) { return a.off < b.off; });
    std::vector<Block> merged;
    for (auto& b : free_list) {
      if (!merged.empty() && merged.back().off + merged.back().size == b.off) merged.back().size += b.size;
      else merged.push_back(b);
    }
    free_list = std::move(merged);
  };
  std::vector<char> placed(g.tensors.size(), 0);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    for (int o : g.ops[i].out) {
      auto& t = g.tensors[size_t(o)];
      if (placed[size_t(o)] || t.rehomed) continue;
      t.offset = alloc(align_up(t.bytes(), align));
      placed[size_t(o)] = 1;
    }
    std::vector<int> dead;
    for (int in : g.ops[i].in)
      if (g.tensors[size_t(in)].last_read == int(i) && g.tensors[size_t(in)].kind != TensorKind::Output) dead.push_back(in);
    for (int o : g.ops[i].out)  // written but never read (and not an output): dies at once
      if (g.tensors[size_t(o)].last_read < 0 && g.tensors[size_t(o)].kind != TensorKind::Output) dead.push_back(o);
    std::sort(dead.begin(), dead.end());
    dead.erase(std::unique(dead.begin(), dead.end()), dead.end());
    for (int d : dead)
      if (placed[size_t(d)] && !g.tensors[size_t(d)].rehomed)
        release(g.tensors[size_t(d)].offset, align_up(g.tensors[size_t(d)].bytes(), align));
  }
  g.arena_bytes = top;
  size_t extra = 0;
  for (auto& t : g.tensors)
    if (t.rehomed) {
      t.offset = top + extra;
      extra += align_up(t.bytes(), align);
    }
  g.total_bytes = top + extra;
}

// ---- overlap checks under fusion ---------------------------------------------------------------

static std::vector<int> group_ops(const FusionGroup& grp) {
  std::vector<int> ops = grp.members;
  if (grp.fold_norm && grp.norm >= 0) ops.push_back(grp.norm);
  if (grp.fold_add && grp.add >= 0) ops.push_back(grp.add);
  if (grp.fold_epilogue) ops.insert(ops.end(), grp.epilogue.begin(), grp.epilogue.end());
  return ops;
}

// Tensors a fused launch reads (produced outside it) and writes (read outside it, or outputs).
void group_io(const Graph& g, const FusionGroup& grp, std::vector<int>& reads, std::vector<int>& writes) {
  auto ops = group_ops(grp);
  auto inside = [&](int op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); };
  std::vector<int> produced;
  for (int o : ops)
    for (int t : g.ops[size_t(o)].out) produced.push_back(t);
  auto is_produced = [&](int t) { return std::find(produced.begin(), produced.end(), t) != produced.end(); };
  for (int o : ops)
    for (int t : g.ops[size_t(o)].in)
      if (!is_produced(t) && std::find(reads.begin(), reads.end(), t) == reads.end()) reads.push_back(t);
  for (int t : produced) {
    bool external = g.tensors[size_t(t)].kind == TensorKind::Output;
    for (size_t c = 0; c < g.ops.size() && !external; ++c)
      if (!inside(int(c)))
        for (int in : g.ops[c].in) external |= in == t;
    if (external && std::find(writes.begin(), writes.end(), t) == writes.end()) writes.push_back(t);
  }
}

static bool ranges_overlap(const GTensor& a, const GTensor& b) {
  return a.offset < b.offset + b.bytes() && b.offset < a.offset + a.bytes();
}

OverlapReport fix_overlaps(Graph& g, size_t max_extra_bytes, size_t align) {
  OverlapReport rep;
  size_t extra = g.total_bytes - g.arena_bytes;
  for (auto& grp : g.groups) {
    if (!grp.accepted) continue;
    std::vector<int> reads, writes;
    group_io(g, grp, reads, writes);
    std::vector<int> victims;
    for (int w : writes)
      for (int r : reads)
        if (w != r && ranges_overlap(g.tensors[size_t(w)], g.tensors[size_t(r)])) {
          victims.push_back(w);
          break;
        }
    // Two outputs of one launch must not overlap each other either.
    for (size_t i = 0; i < writes.size(); ++i)
      for (size_t j = i + 1; j < writes.size(); ++j)
        if (ranges_overlap(g.tensors[size_t(writes[i])], g.tensors[size_t(writes[j])]) &&
            std::find(victims.begin(), victims.end(), writes[j]) == victims.end())
          victims.push_back(writes[j]);
    size_t need = 0;
    for (int v : victims)
      if (!g.tensors[size_t(v)].rehomed) need += align_up(g.tensors[size_t(v)].bytes(), align);
    if (victims.empty()) continue;
    if (extra + need > max_extra_bytes) {
      grp.accepted = grp.fold_norm = grp.fold_add = grp.fold_epilogue = false;
      grp.reject_reason = cat("output overlaps an input it reads; re-homing needs ", need,
                              " bytes over the limit");
      ++rep.rejected;
      continue;
    }
    for (int v : victims) {
      auto& t = g.tensors[size_t(v)];
      if (t.rehomed) continue;
      t.rehomed = true;
      t.offset = g.arena_bytes + extra;
      extra += align_up(t.bytes(), align);
      ++rep.rehomed;
    }
  }
  g.total_bytes = g.arena_bytes + extra;
  return rep;
}

void apply_groups(Graph& g) {
  for (auto& op : g.ops) {
    op.launch = true;
    op.group = -1;
  }
  for (size_t gi = 0; gi < g.groups.size(); ++gi) {
    auto& grp = g.groups[gi];
    if (!grp.accepted) continue;
    for (int o : group_ops(grp)) {
      g.ops[size_t(o)].group = int(gi);
      g.ops[size_t(o)].launch = false;
    }
    g.ops[size_t(grp.leader())].launch = true;  // the leader launches for the whole group
  }
}

}  // namespace lmf

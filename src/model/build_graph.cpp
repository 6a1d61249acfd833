#include "model/build_graph.h"

#include "util/status.h"

namespace lmf {

namespace {

struct Builder {
  const Model& m;
  const HParams& hp;
  Graph& g;
  int64_t T;

  std::string nm(int l, const char* what) { return l < 0 ? std::string(what) : cat("blk.", l, ".", what); }

  int op(OpKind k, const std::string& name, int layer, std::vector<int> in, std::vector<int> out,
         const Weight* w = nullptr, const Weight* b = nullptr) {
    Op o{k, name};
    o.layer = layer;
    o.in = std::move(in);
    o.out = std::move(out);
    o.w = w && w->data ? w : nullptr;
    o.b = b && b->data ? b : nullptr;
    o.n_head = int(hp.n_head);
    o.n_head_kv = int(hp.n_head_kv);
    o.head_dim = int(hp.head_dim);
    o.eps = hp.rms_eps;
    o.rope_theta = hp.rope_theta;
    o.rope_factors = hp.rope_freq_factors.empty() ? nullptr : hp.rope_freq_factors.data();
    o.rope_neox = hp.rope_neox;
    return g.add_op(std::move(o));
  }

  int norm(int l, const char* what, int x, const Weight& gamma, int64_t row_begin = 0, int64_t rows = -1) {
    int y = g.add_tensor(nm(l, what), rows < 0 ? T : rows, hp.n_embd);
    int o = op(OpKind::RmsNorm, nm(l, what), l, {x}, {y}, &gamma);
    g.ops[size_t(o)].row_begin = row_begin;
    return y;
  }

  int linear(int l, const char* what, int x, const Weight& w, const Weight* b = nullptr,
             TensorKind kind = TensorKind::Activation) {
    int y = g.add_tensor(nm(l, what), g.t(x).rows, w.rows, kind);
    op(OpKind::MatMul, nm(l, what), l, {x}, {y}, &w, b);
    return y;
  }

  int unary(OpKind k, int l, const char* what, int x, const Weight* w = nullptr) {
    int y = g.add_tensor(nm(l, what), g.t(x).rows, g.t(x).cols);
    op(k, nm(l, what), l, {x}, {y}, w);
    return y;
  }

  int binary(OpKind k, int l, const char* what, int a, int b) {
    int y = g.add_tensor(nm(l, what), g.t(a).rows, g.t(a).cols);
    op(k, nm(l, what), l, {a, b}, {y});
    return y;
  }

  // A tensor-parallel rank's partial sum x, summed over the ranks in place (nothing otherwise).
  int all_reduce(int l, const char* what, int x) {
    if (m.tp.size > 1) op(OpKind::AllReduce, nm(l, what), l, {x}, {x});
    return x;
  }

  // x -> attention block -> new residual stream
  int attention(int l, int x) {
    const auto& L = m.layers[size_t(l)];
    int h = norm(l, "attn_norm", x, L.attn_norm);
    int q = linear(l, "q", h, L.wq, &L.bq);
    int k = linear(l, "k", h, L.wk, &L.bk);
    int v = linear(l, "v", h, L.wv, &L.bv);
    if (hp.qk_norm) {
      q = unary(OpKind::HeadNorm, l, "q_norm", q, &L.q_norm);
      k = unary(OpKind::HeadNorm, l, "k_norm", k, &L.k_norm);
    }
    q = unary(OpKind::Rope, l, "q_rope", q);
    k = unary(OpKind::Rope, l, "k_rope", k);
    op(OpKind::KvStore, nm(l, "kv_store"), l, {k, v}, {});
    int a = g.add_tensor(nm(l, "attn"), T, hp.q_dim());
    op(OpKind::Attention, nm(l, "attn"), l, {q}, {a});
    int o = all_reduce(l, "attn_out_sum", linear(l, "attn_out", a, L.wo));
    return binary(OpKind::Add, l, "attn_resid", x, o);
  }

  int ffn(int l, int x) {
    const auto& L = m.layers[size_t(l)];
    int h = norm(l, "ffn_norm", x, L.ffn_norm);
    int gt = linear(l, "ffn_gate", h, L.w_gate);
    int up = linear(l, "ffn_up", h, L.w_up);
    int act = binary(OpKind::SiluMul, l, "ffn_act", gt, up);
    int d = all_reduce(l, "ffn_down_sum", linear(l, "ffn_down", act, L.w_down));
    return binary(OpKind::Add, l, "l_out", x, d);
  }
};

}  // namespace

Graph build_graph(const Model& m, int64_t T, bool all_logits, int64_t n_gather) {
  LMF_CHECK(T > 0 && n_gather >= 0 && n_gather <= T && !(all_logits && n_gather > 0));
  Graph g;
  g.n_tokens = T;
  g.all_logits = all_logits;
  g.n_gather = n_gather;
  Builder b{m, m.hp, g, T};
  // A tensor-parallel rank (model/tp_split.h) builds the same graph over its heads and FFN rows,
  // with an all-reduce after o_proj and down; its logits are its vocabulary slice.
  int x = g.add_tensor("inp_embd", T, m.hp.n_embd);
  b.op(OpKind::Embed, "inp_embd", -1, {}, {x}, &m.tok_embd);
  if (m.tp.vocab_parallel_embedding) {  // each rank looks up its own token ids; the sum has every row
    g.ops.back().embed_slice = true;
    g.ops.back().vocab_begin = m.tp.vocab_begin;
    b.all_reduce(-1, "inp_embd_sum", x);
  }
  for (int l = 0; l < int(m.hp.n_layer); ++l) {
    x = b.attention(l, x);
    x = b.ffn(l, x);
  }
  const int64_t n_out = n_gather > 0 ? n_gather : all_logits ? T : 1;
  int h = b.norm(-1, "result_norm", x, m.output_norm, all_logits || n_gather > 0 ? 0 : T - 1, n_out);
  g.ops.back().gather_rows = n_gather > 0;
  g.logits = b.linear(-1, "result_output", h, m.output, nullptr, TensorKind::Output);
  form_groups(g);
  plan_memory(g);
  return g;
}

}  // namespace lmf

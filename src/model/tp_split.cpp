#include "model/tp_split.h"

#include <cstring>

#include "util/status.h"

namespace lmf {

namespace {

// Rows [r0, r0 + n) of w: a view into the same memory.
Weight row_slice(const Weight& w, int64_t r0, int64_t n) {
  Weight s = w;
  s.rows = n;
  s.data = w.data + size_t(r0) * w.row_stride();
  s.nbytes = size_t(n) * w.row_stride();
  return s;
}

// Elements [c0, c0 + n) of a (float) vector, or a missing optional one as it is.
Weight vec_slice(const Weight& w, int64_t c0, int64_t n) {
  if (!w.data) return w;
  Weight s = w;
  s.cols = n;
  s.data = w.data + row_bytes(w.type, c0);
  s.nbytes = row_bytes(w.type, n);
  return s;
}

// Columns [c0, c0 + n) of every row, copied into `owner` (block-aligned: checked by tp_refusal);
// all of them (one rank): a view.
Weight col_slice(const Weight& w, int64_t c0, int64_t n, Model& owner) {
  if (c0 == 0 && n == w.cols) return w;
  const size_t off = row_bytes(w.type, c0), len = row_bytes(w.type, n);
  const size_t bytes = size_t(w.rows) * len;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  LMF_CHECK(p, "out of memory copying ", bytes, " bytes of ", w.name);
  owner.owned.emplace_back(p);
  for (int64_t r = 0; r < w.rows; ++r) std::memcpy(p + size_t(r) * len, w.data + size_t(r) * w.row_stride() + off, len);
  Weight s = w;
  s.cols = n;
  s.data = p;
  s.nbytes = bytes;
  return s;
}

// "" when columns [k*cols/n, (k+1)*cols/n) of w start and end on block boundaries for every k.
std::string col_cut_refusal(const Weight& w, int n) {
  const TypeInfo& ti = type_info(w.type);
  const int64_t part = w.cols / n;
  if (part % ti.block == 0) return "";
  return cat("tensor '", w.name, "' (", ti.name, ") would be cut every ", part, " of its ", w.cols,
             " columns, inside its blocks of ", ti.block, " (a rank needs whole blocks)");
}

}  // namespace

std::string tp_refusal(const Model& m, int n) {
  const HParams& hp = m.hp;
  const std::string pre = cat("tensor parallel ", n, ": ");
  if (n < 1) return pre + "the number of ranks must be at least 1";
  if (hp.n_head % n) return cat(pre, "the model's ", hp.n_head, " attention heads do not divide by ", n);
  if (hp.n_head_kv % n) return cat(pre, "the model's ", hp.n_head_kv, " KV heads do not divide by ", n);
  if (hp.n_ff % n) return cat(pre, "the model's ", hp.n_ff, " FFN rows do not divide by ", n);
  if (hp.n_vocab < n) return cat(pre, "the vocabulary of ", hp.n_vocab, " rows is smaller than ", n);
  for (const auto& L : m.layers)
    for (const Weight* w : {&L.wo, &L.w_down})
      if (std::string why = col_cut_refusal(*w, n); !why.empty()) return pre + why;
  return "";
}

std::unique_ptr<Model> tp_split(const Model& m, int rank, int n, const TpOptions& o) {
  if (std::string why = tp_refusal(m, n); !why.empty()) throw Error(why);
  LMF_CHECK(rank >= 0 && rank < n);
  auto r = std::make_unique<Model>();
  HParams& hp = r->hp;
  hp = m.hp;
  hp.n_head = m.hp.n_head / n;
  hp.n_head_kv = m.hp.n_head_kv / n;
  hp.n_ff = m.hp.n_ff / n;
  const int64_t hd = m.hp.head_dim;
  const int64_t q0 = rank * hp.n_head * hd, qn = hp.n_head * hd;      // this rank's Q rows
  const int64_t k0 = rank * hp.n_head_kv * hd, kn = hp.n_head_kv * hd;  // its K / V rows
  const int64_t f0 = rank * hp.n_ff, fn = hp.n_ff;                     // its FFN rows
  r->output_norm = m.output_norm;
  const int64_t V = m.hp.n_vocab;
  r->tp = {rank, n, V * rank / n, V * (rank + 1) / n, o.vocab_parallel_embedding && n > 1};
  const int64_t v0 = r->tp.vocab_begin, vn = r->tp.vocab_end - v0;
  r->output = row_slice(m.output, v0, vn);
  r->tok_embd = r->tp.vocab_parallel_embedding ? row_slice(m.tok_embd, v0, vn) : m.tok_embd;
  r->layers.reserve(m.layers.size());
  for (const auto& L : m.layers) {
    LayerWeights R;
    R.attn_norm = L.attn_norm;
    R.q_norm = L.q_norm;
    R.k_norm = L.k_norm;
    R.ffn_norm = L.ffn_norm;
    R.wq = row_slice(L.wq, q0, qn);
    R.wk = row_slice(L.wk, k0, kn);
    R.wv = row_slice(L.wv, k0, kn);
    R.bq = vec_slice(L.bq, q0, qn);
    R.bk = vec_slice(L.bk, k0, kn);
    R.bv = vec_slice(L.bv, k0, kn);
    R.wo = col_slice(L.wo, q0, qn, *r);
    R.w_gate = row_slice(L.w_gate, f0, fn);
    R.w_up = row_slice(L.w_up, f0, fn);
    R.w_down = col_slice(L.w_down, f0, fn, *r);
    r->layers.push_back(std::move(R));
  }
  return r;
}

}  // namespace lmf

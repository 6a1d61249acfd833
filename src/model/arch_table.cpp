#include "model/arch_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "util/status.h"

namespace lmf {

std::string fmt_key(const char* pattern, std::string_view arch) {
  std::string s(pattern);
  auto p = s.find("%s");
  if (p != std::string::npos) s.replace(p, 2, arch);
  return s;
}

std::string fmt_tensor(const char* pattern, int layer) {
  std::string s(pattern);
  auto p = s.find("%d");
  if (p != std::string::npos) s.replace(p, 2, std::to_string(layer));
  return s;
}

Weight TensorBinder::bind(const std::string& name, int64_t rows, int64_t cols, bool vector) {
  const gguf::TensorInfo* t = f_.find_tensor(name);
  if (!t) LMF_FAIL(f_.path(), ": missing tensor '", name, "'");
  used_.push_back(name);
  const bool shape_ok = vector ? (t->ne.size() == 1 && t->ne[0] == cols)
                               : (t->ne.size() == 2 && t->ne[0] == cols && t->ne[1] == rows);
  if (!shape_ok) {
    std::string got = "[";
    for (size_t i = t->ne.size(); i-- > 0;) got += cat(t->ne[i], i ? ", " : "");
    got += "]";
    if (vector) LMF_FAIL(f_.path(), ": tensor '", name, "': expected [", cols, "], got ", got);
    LMF_FAIL(f_.path(), ": tensor '", name, "': expected [", rows, ", ", cols, "], got ", got);
  }
  if (vector && t->type != DType::F32)
    LMF_FAIL(f_.path(), ": tensor '", name, "': expected type f32 for a norm/bias vector, got ",
             dtype_name(t->type));
  Weight w;
  w.name = name;
  w.type = t->type;
  w.rows = vector ? 1 : rows;
  w.cols = cols;
  w.data = t->data;
  w.nbytes = t->nbytes;
  return w;
}

void TensorBinder::check_all_used() const {
  for (const auto& t : f_.tensors())
    if (std::find(used_.begin(), used_.end(), t.name) == used_.end())
      LMF_FAIL(f_.path(), ": tensor '", t.name, "' is not part of architecture '",
               f_.get_str(key::kArch), "'");
}

const std::vector<ArchDef>& arch_table() {
  static const std::vector<ArchDef> t = {arch_qwen3(), arch_qwen2(), arch_llama()};
  return t;
}

namespace {

// Llama 3.1+ RoPE scaling as llama.cpp stores it: a tensor of head_dim / 2 F32 divisors, one per
// frequency (convert_hf_to_gguf.py computes them from config.json's "llama3" rope_scaling).
void read_rope_freqs(const gguf::File& f, HParams& hp) {
  const auto* t = f.find_tensor(tname::kRopeFreqs);
  if (!t) return;
  const std::string what = f.path() + ": tensor '" + tname::kRopeFreqs + "'";
  const int64_t half = hp.head_dim / 2;
  if (t->type != DType::F32) LMF_FAIL(what, ": expected type f32, got ", dtype_name(t->type));
  if (t->ne.size() != 1 || t->ne[0] != half)
    LMF_FAIL(what, ": expected [", half, "] (head dimension / 2), got ", t->nelements(), " elements in ",
             t->ne.size(), " dimensions");
  hp.rope_freq_factors.resize(size_t(half));
  std::memcpy(hp.rope_freq_factors.data(), t->data, size_t(half) * sizeof(float));
  for (int64_t i = 0; i < half; ++i) {
    const float v = hp.rope_freq_factors[size_t(i)];
    if (!(std::isfinite(v) && v > 0)) LMF_FAIL(what, ": factor ", i, " is ", v, ", expected a positive number");
  }
}

}  // namespace

void read_common_hparams(const gguf::File& f, HParams& hp) {
  const std::string& a = hp.arch_name;
  auto geti = [&](const char* k) { return f.get_int(fmt_key(k, a)); };
  hp.n_embd = geti(key::kEmbd);
  hp.n_layer = geti(key::kBlocks);
  hp.n_ff = geti(key::kFF);
  hp.n_head = geti(key::kHeads);
  hp.n_head_kv = f.get_int_opt(fmt_key(key::kHeadsKV, a)).value_or(hp.n_head);
  hp.n_ctx_train = geti(key::kContext);
  hp.rms_eps = float(f.get_float(fmt_key(key::kRmsEps, a)));
  hp.rope_theta = float(f.get_float_opt(fmt_key(key::kRopeBase, a)).value_or(10000.0));
  auto check_pos = [&](const char* what, int64_t v, int64_t lim) {
    if (v <= 0 || v > lim) LMF_FAIL(f.path(), ": ", fmt_key(what, a), ": expected 1..", lim, ", got ", v);
  };
  check_pos(key::kEmbd, hp.n_embd, 1 << 20);
  check_pos(key::kBlocks, hp.n_layer, 4096);
  check_pos(key::kFF, hp.n_ff, 1 << 22);
  check_pos(key::kHeads, hp.n_head, 4096);
  check_pos(key::kHeadsKV, hp.n_head_kv, hp.n_head);
  check_pos(key::kContext, hp.n_ctx_train, int64_t(1) << 31);
  if (hp.n_head % hp.n_head_kv)
    LMF_FAIL(f.path(), ": head_count ", hp.n_head, " is not a multiple of head_count_kv ", hp.n_head_kv);
  hp.head_dim = f.get_int_opt(fmt_key(key::kKeyLen, a)).value_or(hp.n_embd / hp.n_head);
  if (hp.head_dim <= 0 || hp.head_dim % 2 || hp.head_dim > 1024)
    LMF_FAIL(f.path(), ": head dimension: expected an even number in 2..1024, got ", hp.head_dim);
  if (auto vl = f.get_int_opt(fmt_key(key::kValLen, a)); vl && *vl != hp.head_dim)
    LMF_FAIL(f.path(), ": value_length ", *vl, " != key_length ", hp.head_dim, " is not supported");
  // Numbers that would make every logit NaN or wrong without a word.
  if (!(std::isfinite(hp.rms_eps) && hp.rms_eps > 0 && hp.rms_eps < 1))
    LMF_FAIL(f.path(), ": ", fmt_key(key::kRmsEps, a), ": expected a small positive number, got ", hp.rms_eps);
  if (!(std::isfinite(hp.rope_theta) && hp.rope_theta > 0))
    LMF_FAIL(f.path(), ": ", fmt_key(key::kRopeBase, a), ": expected a positive number, got ", hp.rope_theta);
  // RoPE variants other than plain RoPE and per-frequency divisors: refused, never run as plain
  // RoPE (their logits differ at every position).
  const char* runs = " (lmfuse runs plain RoPE, with Llama 3.1+ frequency factors)";
  if (auto t = f.get_str_opt(fmt_key(key::kRopeScalingType, a)); t && *t != "none")
    LMF_FAIL(f.path(), ": rope scaling type '", *t, "' is not supported", runs);
  if (auto s = f.get_float_opt(fmt_key(key::kRopeFreqScale, a)); s && *s != 1.0)
    LMF_FAIL(f.path(), ": ", fmt_key(key::kRopeFreqScale, a), " ", *s, " (linear rope scaling) is not supported", runs);
  read_rope_freqs(f, hp);
  if (auto rd = f.get_int_opt(fmt_key(key::kRopeDims, a)); rd && *rd != hp.head_dim)
    LMF_FAIL(f.path(), ": ", fmt_key(key::kRopeDims, a), " ", *rd, " != head dimension ", hp.head_dim,
             ": partial rotary embeddings are not supported");
  const auto* emb = f.find_tensor(tname::kTokEmbd);
  if (!emb) LMF_FAIL(f.path(), ": missing tensor '", tname::kTokEmbd, "'");
  if (emb->ne.size() != 2) LMF_FAIL(f.path(), ": tensor '", tname::kTokEmbd, "': expected 2 dimensions");
  hp.n_vocab = emb->ne[1];
  hp.tied_output = f.find_tensor(tname::kOutput) == nullptr;
}

void bind_common(TensorBinder& b, const HParams& hp, Model& m) {
  m.tok_embd = b.bind(tname::kTokEmbd, hp.n_vocab, hp.n_embd);
  m.output_norm = b.bind(tname::kOutNorm, 1, hp.n_embd, true);
  m.output = hp.tied_output ? m.tok_embd : b.bind(tname::kOutput, hp.n_vocab, hp.n_embd);
  if (!hp.rope_freq_factors.empty()) b.bind(tname::kRopeFreqs, 1, hp.head_dim / 2, true);  // read by read_rope_freqs
  m.layers.resize(size_t(hp.n_layer));
  for (int l = 0; l < int(hp.n_layer); ++l) {
    auto& L = m.layers[size_t(l)];
    auto n = [&](const char* p) { return fmt_tensor(p, l); };
    L.attn_norm = b.bind(n(tname::kAttnNorm), 1, hp.n_embd, true);
    L.wq = b.bind(n(tname::kQ), hp.q_dim(), hp.n_embd);
    L.wk = b.bind(n(tname::kK), hp.kv_dim(), hp.n_embd);
    L.wv = b.bind(n(tname::kV), hp.kv_dim(), hp.n_embd);
    if (hp.qkv_bias) {
      L.bq = b.bind(n(tname::kQBias), 1, hp.q_dim(), true);
      L.bk = b.bind(n(tname::kKBias), 1, hp.kv_dim(), true);
      L.bv = b.bind(n(tname::kVBias), 1, hp.kv_dim(), true);
    }
    if (hp.qk_norm) {
      L.q_norm = b.bind(n(tname::kQNorm), 1, hp.head_dim, true);
      L.k_norm = b.bind(n(tname::kKNorm), 1, hp.head_dim, true);
    }
    L.wo = b.bind(n(tname::kO), hp.n_embd, hp.q_dim());
    L.ffn_norm = b.bind(n(tname::kFFNNorm), 1, hp.n_embd, true);
    L.w_gate = b.bind(n(tname::kGate), hp.n_ff, hp.n_embd);
    L.w_up = b.bind(n(tname::kUp), hp.n_ff, hp.n_embd);
    L.w_down = b.bind(n(tname::kDown), hp.n_embd, hp.n_ff);
  }
}

}  // namespace lmf

// HF tensor names -> GGUF names, expected shapes from config.json, and the output type of each
// tensor. Every checkpoint tensor must be claimed here; anything else is an error, because a
// tensor the architecture does not know usually means a model variant lmfuse would run wrongly.
#include <algorithm>
#include <set>

#include "model/arch_table.h"
#include "model/convert.h"
#include "util/status.h"

namespace lmf {

namespace {

struct Expect {
  std::string hf, gguf;
  std::vector<int64_t> shape;  // HF order ([out, in] for linears, [n] for vectors)
  const char* why;             // which config.json sizes the shape comes from
  int64_t permute_heads = 0;
  bool optional = false;       // lm_head when the embeddings may be tied
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += cat(i ? ", " : "", s[i]);
  return o + "]";
}

safetensors::SType stype_of(const std::string& torch_dtype) {
  if (torch_dtype == "float16") return safetensors::SType::F16;
  if (torch_dtype == "bfloat16") return safetensors::SType::BF16;
  return safetensors::SType::F32;
}

std::vector<Expect> expected_tensors(const HfConfig& c) {
  const HParams& hp = c.hp;
  const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff, Q = hp.q_dim(), KV = hp.kv_dim();
  const bool llama = hp.arch == Arch::Llama;
  std::vector<Expect> x;
  x.push_back({"model.embed_tokens.weight", tname::kTokEmbd, {V, E}, "[vocab_size, hidden_size]"});
  for (int l = 0; l < int(hp.n_layer); ++l) {
    const std::string p = cat("model.layers.", l, ".");
    auto g = [&](const char* pat) { return fmt_tensor(pat, l); };
    x.push_back({p + "input_layernorm.weight", g(tname::kAttnNorm), {E}, "[hidden_size]"});
    x.push_back({p + "self_attn.q_proj.weight", g(tname::kQ), {Q, E}, "[num_attention_heads * head_dim, hidden_size]",
                 llama ? hp.n_head : 0});
    x.push_back({p + "self_attn.k_proj.weight", g(tname::kK), {KV, E},
                 "[num_key_value_heads * head_dim, hidden_size]", llama ? hp.n_head_kv : 0});
    x.push_back({p + "self_attn.v_proj.weight", g(tname::kV), {KV, E}, "[num_key_value_heads * head_dim, hidden_size]"});
    if (hp.qkv_bias) {
      x.push_back({p + "self_attn.q_proj.bias", g(tname::kQBias), {Q}, "[num_attention_heads * head_dim]"});
      x.push_back({p + "self_attn.k_proj.bias", g(tname::kKBias), {KV}, "[num_key_value_heads * head_dim]"});
      x.push_back({p + "self_attn.v_proj.bias", g(tname::kVBias), {KV}, "[num_key_value_heads * head_dim]"});
    }
    if (hp.qk_norm) {
      x.push_back({p + "self_attn.q_norm.weight", g(tname::kQNorm), {hp.head_dim}, "[head_dim]"});
      x.push_back({p + "self_attn.k_norm.weight", g(tname::kKNorm), {hp.head_dim}, "[head_dim]"});
    }
    x.push_back({p + "self_attn.o_proj.weight", g(tname::kO), {E, Q}, "[hidden_size, num_attention_heads * head_dim]"});
    x.push_back({p + "post_attention_layernorm.weight", g(tname::kFFNNorm), {E}, "[hidden_size]"});
    x.push_back({p + "mlp.gate_proj.weight", g(tname::kGate), {F, E}, "[intermediate_size, hidden_size]"});
    x.push_back({p + "mlp.up_proj.weight", g(tname::kUp), {F, E}, "[intermediate_size, hidden_size]"});
    x.push_back({p + "mlp.down_proj.weight", g(tname::kDown), {E, F}, "[hidden_size, intermediate_size]"});
  }
  x.push_back({"model.norm.weight", tname::kOutNorm, {E}, "[hidden_size]"});
  x.push_back({"lm_head.weight", tname::kOutput, {V, E}, "[vocab_size, hidden_size]", 0, true});
  return x;
}

// Tensors some checkpoints carry that no GGUF needs (llama.cpp's converter skips them too).
bool ignorable(const std::string& name) {
  return name.size() > 21 && name.compare(name.size() - 21, 21, ".rotary_emb.inv_freq") == 0;
}

}  // namespace

int64_t llama_permuted_src_row(int64_t r, int64_t rows, int64_t n_head) {
  const int64_t hd = rows / n_head, h = r / hd, j = r % hd;
  // GGUF row (h, i, s) = h*hd + 2i + s holds HF row (h, s, i) = h*hd + s*hd/2 + i.
  return h * hd + (j % 2) * (hd / 2) + j / 2;
}

std::vector<TensorPlan> plan_tensors(const HfConfig& c, const safetensors::Checkpoint& ck, const TypeChoice& tc,
                                     std::vector<std::string>* notes) {
  std::vector<TensorPlan> plan;
  std::set<std::string> claimed;
  for (const Expect& e : expected_tensors(c)) {
    const safetensors::Tensor* t = ck.find(e.hf);
    const bool is_output = e.gguf == tname::kOutput;
    if (is_output) {
      claimed.insert(e.hf);
      if (c.tie_word_embeddings.value_or(false)) continue;  // tied: HF ignores lm_head too
      if (!t && !c.tie_word_embeddings.has_value()) continue;  // absent and not said: tied
      if (!t)
        LMF_FAIL(c.path, ": tie_word_embeddings is false but the checkpoint has no tensor 'lm_head.weight'");
    }
    if (!t) LMF_FAIL("checkpoint: missing tensor '", e.hf, "' (", c.hf_arch, " with this config.json needs it for ", e.gguf, ")");
    claimed.insert(e.hf);
    if (t->shape != e.shape)
      LMF_FAIL(t->file, ": tensor '", e.hf, "': shape ", shape_str(t->shape), " does not match config.json: expected ",
               shape_str(e.shape), " = ", e.why);
    if (c.torch_dtype && t->dtype != stype_of(*c.torch_dtype))
      LMF_FAIL(t->file, ": tensor '", e.hf, "': dtype ", safetensors::stype_name(t->dtype),
               " does not match config.json's ", *c.torch_dtype);
    TensorPlan p;
    p.hf_name = e.hf;
    p.gguf_name = e.gguf;
    p.src = t;
    p.ne.assign(e.shape.rbegin(), e.shape.rend());
    p.permute_heads = e.permute_heads;
    if (e.shape.size() == 1) {
      p.type = DType::F32;  // norms and biases: llama.cpp keeps 1-D tensors in F32
    } else if (tc.mix) {
      p.type = DType::F32;  // chosen below, once it is known whether output.weight is there
    } else {
      p.type = e.gguf == tname::kTokEmbd ? tc.embed_type.value_or(tc.type)
               : is_output              ? tc.output_type.value_or(tc.type)
                                        : tc.type;
      const TypeInfo& ti = type_info(p.type);
      if (p.ne[0] % ti.block != 0) {
        // As llama.cpp does: a row that does not split into blocks falls back to F16.
        if (notes)
          notes->push_back(cat(e.gguf, ": row length ", p.ne[0], " is not a multiple of ", ti.block, ", written as f16 instead of ",
                               ti.name));
        p.type = DType::F16;
      }
    }
    plan.push_back(std::move(p));
  }
  if (tc.mix) {
    bool has_output = false;
    for (const TensorPlan& p : plan) has_output |= p.gguf_name == tname::kOutput;
    const int n_gqa = c.hp.n_head_kv > 0 ? int(c.hp.n_head / c.hp.n_head_kv) : 1;
    for (TensorPlan& p : plan) {
      if (p.ne.size() < 2) continue;
      bool fell_back = false;
      p.type = mix_type(*tc.mix, {p.gguf_name, p.ne[0], int(c.hp.n_layer), n_gqa, has_output}, &fell_back);
      if (p.gguf_name == tname::kTokEmbd && tc.embed_type) p.type = *tc.embed_type;
      if (p.gguf_name == tname::kOutput && tc.output_type) p.type = *tc.output_type;
      if (p.ne[0] % type_info(p.type).block != 0)
        LMF_FAIL(p.gguf_name, ": row length ", p.ne[0], " is not a multiple of ", type_info(p.type).block, " (",
                 dtype_name(p.type), ")");
      if (fell_back && notes)
        notes->push_back(cat(p.gguf_name, ": row length ", p.ne[0], " does not split into blocks of 256, written as ",
                             dtype_name(p.type), " (as llama-quantize does)"));
    }
  }
  for (const safetensors::Tensor* t : ck.tensors()) {
    if (claimed.count(t->name) || ignorable(t->name)) continue;
    LMF_FAIL(t->file, ": unknown tensor '", t->name, "' (", c.hf_arch, " with this config.json has no such tensor)");
  }
  return plan;
}

}  // namespace lmf

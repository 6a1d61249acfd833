// config.json -> hyper-parameters, and the GGUF keys llama.cpp's converter writes for them.
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/arch_table.h"
#include "model/convert.h"
#include "model/rope_scaling.h"
#include "util/status.h"

namespace lmf {

namespace {

using json = nlohmann::json;

struct HfArch {
  const char* hf_name;     // config.json "architectures"[0]
  const char* model_type;  // config.json "model_type"
  Arch arch;
  const char* gguf_name;
};
constexpr HfArch kArchs[] = {
    {"Qwen3ForCausalLM", "qwen3", Arch::Qwen3, "qwen3"},
    {"Qwen2ForCausalLM", "qwen2", Arch::Qwen2, "qwen2"},
    {"LlamaForCausalLM", "llama", Arch::Llama, "llama"},
};

int64_t get_int(const json& j, const std::string& path, const char* k, std::optional<int64_t> dflt = {}) {
  if (!j.contains(k) || j[k].is_null()) {
    if (dflt) return *dflt;
    LMF_FAIL(path, ": missing required key '", k, "'");
  }
  if (!j[k].is_number_integer()) LMF_FAIL(path, ": '", k, "' must be an integer, got ", j[k].dump());
  const int64_t v = j[k].get<int64_t>();
  if (v <= 0) LMF_FAIL(path, ": '", k, "' must be positive, got ", v);
  return v;
}

double get_num(const json& j, const std::string& path, const char* k, std::optional<double> dflt = {}) {
  if (!j.contains(k) || j[k].is_null()) {
    if (dflt) return *dflt;
    LMF_FAIL(path, ": missing required key '", k, "'");
  }
  if (!j[k].is_number()) LMF_FAIL(path, ": '", k, "' must be a number, got ", j[k].dump());
  const double v = j[k].get<double>();
  if (!(v > 0) || !std::isfinite(v)) LMF_FAIL(path, ": '", k, "' must be a positive number, got ", v);
  return v;
}

// config.json's "llama3" rope scaling object as divisors (model/rope_scaling.h).
std::vector<float> llama3_factors(const json& r, const std::string& where, double theta, int64_t head_dim) {
  Llama3Rope p;
  p.factor = get_num(r, where, "factor");
  p.low_freq_factor = get_num(r, where, "low_freq_factor");
  p.high_freq_factor = get_num(r, where, "high_freq_factor");
  p.original_ctx = double(get_int(r, where, "original_max_position_embeddings"));
  if (!(p.high_freq_factor > p.low_freq_factor))
    LMF_FAIL(where, ": high_freq_factor ", p.high_freq_factor, " must be greater than low_freq_factor ",
             p.low_freq_factor);
  return llama3_rope_factors(p, theta, head_dim);
}

std::vector<int32_t> id_list(const json& j, const std::string& path, const char* k) {
  std::vector<int32_t> out;
  if (!j.contains(k) || j[k].is_null()) return out;
  auto one = [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) LMF_FAIL(path, ": '", k, "' must hold token ids, got ", j[k].dump());
    out.push_back(v.get<int32_t>());
  };
  if (j[k].is_array()) {
    for (const auto& v : j[k]) one(v);
  } else {
    one(j[k]);
  }
  return out;
}

bool get_bool(const json& j, const char* k, bool dflt) {
  return j.contains(k) && j[k].is_boolean() ? j[k].get<bool>() : dflt;
}

}  // namespace

HfConfig parse_hf_config(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    LMF_FAIL(path, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) LMF_FAIL(path, ": expected a JSON object");
  HfConfig c;
  c.path = path;

  std::string hf, mt;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    hf = j["architectures"][0].get<std::string>();
  if (j.contains("model_type") && j["model_type"].is_string()) mt = j["model_type"].get<std::string>();
  const HfArch* a = nullptr;
  for (const auto& x : kArchs)
    if ((!hf.empty() && hf == x.hf_name) || (hf.empty() && mt == x.model_type)) a = &x;
  if (!a) {
    std::string list;
    for (const auto& x : kArchs) list += cat(list.empty() ? "" : ", ", x.hf_name);
    LMF_FAIL(path, ": architecture '", hf.empty() ? mt : hf, "' is not supported (supported: ", list, ")");
  }
  c.hf_arch = a->hf_name;
  HParams& hp = c.hp;
  hp.arch = a->arch;
  hp.arch_name = a->gguf_name;
  hp.rope_neox = a->arch != Arch::Llama;
  hp.qk_norm = a->arch == Arch::Qwen3;
  hp.qkv_bias = a->arch == Arch::Qwen2;

  hp.n_vocab = get_int(j, path, "vocab_size");
  hp.n_embd = get_int(j, path, "hidden_size");
  hp.n_layer = get_int(j, path, "num_hidden_layers");
  hp.n_ff = get_int(j, path, "intermediate_size");
  hp.n_head = get_int(j, path, "num_attention_heads");
  hp.n_head_kv = get_int(j, path, "num_key_value_heads", hp.n_head);
  c.has_head_dim = j.contains("head_dim") && !j["head_dim"].is_null();
  if (!c.has_head_dim && hp.n_embd % hp.n_head != 0)
    LMF_FAIL(path, ": hidden_size ", hp.n_embd, " is not a multiple of num_attention_heads ", hp.n_head,
             " and no head_dim is given");
  hp.head_dim = get_int(j, path, "head_dim", hp.n_embd / hp.n_head);
  if (hp.n_head % hp.n_head_kv != 0)
    LMF_FAIL(path, ": num_attention_heads ", hp.n_head, " is not a multiple of num_key_value_heads ", hp.n_head_kv);
  if (hp.head_dim % 2 != 0) LMF_FAIL(path, ": head_dim ", hp.head_dim, " must be even for RoPE");
  hp.n_ctx_train = get_int(j, path, "max_position_embeddings", 4096);
  hp.rms_eps = float(get_num(j, path, "rms_norm_eps", 1e-6));

  // rope: transformers < 5 writes rope_theta / rope_scaling; 5.x nests them in rope_parameters.
  double theta = get_num(j, path, "rope_theta", 10000.0);
  std::string rope_type = "default";
  const json* scaling = nullptr;  // the object that names the rope type
  std::string scaling_where;
  for (const char* k : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(k) || j[k].is_null()) continue;
    const json& r = j[k];
    if (!r.is_object()) LMF_FAIL(path, ": '", k, "' must be an object");
    if (r.contains("rope_theta")) theta = get_num(r, path + ": " + k, "rope_theta");
    for (const char* tk : {"rope_type", "type"})
      if (r.contains(tk) && r[tk].is_string()) {
        rope_type = r[tk].get<std::string>();
        scaling = &r;
        scaling_where = path + ": " + k;
      }
  }
  if (rope_type == "llama3") {
    if (a->arch != Arch::Llama)
      LMF_FAIL(path, ": rope scaling type 'llama3' is supported for LlamaForCausalLM only, not ", a->hf_name);
    hp.rope_freq_factors = llama3_factors(*scaling, scaling_where, theta, hp.head_dim);
  } else if (rope_type != "default") {
    LMF_FAIL(path, ": rope scaling type '", rope_type,
             "' is not supported (lmfuse runs plain RoPE and Llama 3.1+ 'llama3' scaling)");
  }
  hp.rope_theta = float(theta);

  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    LMF_FAIL(path, ": hidden_act ", j["hidden_act"].dump(), " is not supported (expected \"silu\")");
  if (a->arch != Arch::Qwen2 && get_bool(j, "attention_bias", false))
    LMF_FAIL(path, ": attention_bias = true is not supported for ", a->hf_name);
  if (get_bool(j, "mlp_bias", false)) LMF_FAIL(path, ": mlp_bias = true is not supported");

  if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean())
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  for (const char* k : {"torch_dtype", "dtype"}) {  // transformers 5 renamed torch_dtype to dtype
    if (!j.contains(k) || !j[k].is_string()) continue;
    const std::string d = j[k].get<std::string>();
    if (d != "float32" && d != "float16" && d != "bfloat16")
      LMF_FAIL(path, ": ", k, " '", d, "' is not supported (expected float32, float16 or bfloat16)");
    c.torch_dtype = d;
  }
  c.bos_ids = id_list(j, path, "bos_token_id");
  c.eos_ids = id_list(j, path, "eos_token_id");
  return c;
}

uint32_t llama_file_type(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 11;  // a file of one K-quant type is llama.cpp's _S variant
    case DType::Q4_K: return 14;
    case DType::Q5_K: return 16;
    case DType::Q6_K: return 18;
    case DType::IQ4_NL: return 25;
    case DType::IQ4_XS: return 30;
    case DType::BF16: return 32;
    case DType::Q8_K: break;  // activations only: no file type
  }
  return 0;
}

void write_hparams(gguf::Writer& w, const HfConfig& c, DType file_type, const std::string& name) {
  const HParams& hp = c.hp;
  const std::string& a = hp.arch_name;
  auto u32 = [](int64_t x) { return gguf::Value::u32(uint32_t(x)); };
  // Same keys and order as convert_hf_to_gguf.py (TextModel.set_gguf_parameters).
  w.set(key::kArch, gguf::Value::str(a));
  w.set("general.name", gguf::Value::str(name));
  w.set(fmt_key(key::kContext, a), u32(hp.n_ctx_train));
  w.set(fmt_key(key::kEmbd, a), u32(hp.n_embd));
  w.set(fmt_key(key::kBlocks, a), u32(hp.n_layer));
  w.set(fmt_key(key::kFF, a), u32(hp.n_ff));
  w.set(fmt_key(key::kHeads, a), u32(hp.n_head));
  w.set(fmt_key(key::kHeadsKV, a), u32(hp.n_head_kv));
  w.set(fmt_key(key::kRopeBase, a), gguf::Value::f32(hp.rope_theta));
  w.set(fmt_key(key::kRmsEps, a), gguf::Value::f32(hp.rms_eps));
  if (c.has_head_dim) {
    w.set(fmt_key(key::kKeyLen, a), u32(hp.head_dim));
    w.set(fmt_key(key::kValLen, a), u32(hp.head_dim));
  }
  if (hp.arch == Arch::Llama) {  // LlamaModel.set_gguf_parameters adds these two
    w.set(fmt_key(key::kVocab, a), u32(hp.n_vocab));
    w.set(fmt_key(key::kRopeDims, a), u32(hp.head_dim));
  }
  w.set("general.file_type", u32(llama_file_type(file_type)));
  w.set("general.quantization_version", u32(2));  // GGML_QUANT_VERSION
}

}  // namespace lmf

// Loads the tokenizer from llama.cpp's GGUF metadata (tokenizer.ggml.*) and writes it back.
#include <algorithm>

#include "format/gguf/gguf.h"
#include "tokenizer/loader.h"
#include "util/status.h"

namespace lmf {

namespace {
// llama.cpp's token types (llama_token_type / gguf TokenType).
enum TokType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  const std::string& path = file.path();
  auto model = file.get_str_opt("tokenizer.ggml.model");
  if (!model) LMF_FAIL(path, ": no tokenizer in this GGUF (tokenizer.ggml.model missing)");
  if (*model != "gpt2")
    LMF_FAIL(path, ": unsupported tokenizer.ggml.model '", *model, "' (only 'gpt2' byte-level BPE)");

  auto t = TokenizerLoader::make();
  Tokenizer& f = TokenizerLoader::fields(*t);
  std::string pre = file.get_str_opt("tokenizer.ggml.pre").value_or("default");
  if (!f.pre_.set_named(pre))
    LMF_FAIL(path, ": unsupported tokenizer.ggml.pre '", pre,
             "' (supported: qwen2, llama-bpe, smollm, gpt2, default)");
  f.pre_name_ = pre;
  // llama.cpp's GGUF has no normalizer key; HF's Qwen2/Qwen3 tokenizer.json asks for NFC.
  if (pre == "qwen2") f.norm_.add({Normalizer::Step::Kind::Nfc, "", ""});
  f.dec_.add({Decoder::Step::Kind::ByteLevel});
  const bool ignore_merges = pre == "llama-bpe" || pre == "llama3";

  const auto& toks = file.get("tokenizer.ggml.tokens").as_arr();
  if (toks.elem != gguf::VType::STR)
    LMF_FAIL(path, ": tokenizer.ggml.tokens: expected an array of strings, got array of ",
             gguf::vtype_name(toks.elem));
  std::vector<std::string> spelled;
  spelled.reserve(toks.items.size());
  for (const auto& v : toks.items) spelled.push_back(v.as_str());
  std::vector<int32_t> types(spelled.size(), kNormal);
  if (const gguf::Value* tt = file.find("tokenizer.ggml.token_type")) {
    const auto& a = tt->as_arr();
    if (a.items.size() != spelled.size())
      LMF_FAIL(path, ": tokenizer.ggml.token_type has ", a.items.size(), " entries, expected ",
               spelled.size(), " (one per token)");
    for (size_t i = 0; i < a.items.size(); ++i) types[i] = int32_t(a.items[i].as_int());
  }
  for (size_t i = 0; i < spelled.size(); ++i) {
    // Control tokens are special (matched only when parsing special tokens); user-defined
    // ones are matched always (HF added tokens with special=false).
    if (types[i] == kControl || types[i] == kUserDefined) {
      f.added_.push_back({spelled[i], int32_t(i), types[i] == kControl});
      if (types[i] == kControl) f.special_texts_.push_back(spelled[i]);
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (const gguf::Value* mv = file.find("tokenizer.ggml.merges")) {
    for (const auto& v : mv->as_arr().items) {
      const std::string& s = v.as_str();
      size_t sp = s.find(' ', 1);  // byte-level tokens never contain U+0020
      if (sp == std::string::npos)
        LMF_FAIL(path, ": tokenizer.ggml.merges entry '", s, "' is not 'left right'");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    }
  }
  // Every token is in the BPE vocabulary, as in llama.cpp (a GGUF does not say which of them
  // HF kept outside its model's vocabulary).
  std::vector<std::pair<std::string, int32_t>> model_vocab;
  model_vocab.reserve(spelled.size());
  for (size_t i = 0; i < spelled.size(); ++i) model_vocab.emplace_back(spelled[i], int32_t(i));
  BpeOptions opt;
  opt.ignore_merges = ignore_merges;
  TokenizerLoader::set_vocab(*t, model_vocab, {}, merges, opt, path);

  auto id_key = [&](const char* key) -> int32_t {
    auto v = file.get_int_opt(key);
    if (!v) return -1;
    if (*v < 0 || *v >= t->n_vocab())
      LMF_FAIL(path, ": ", key, " = ", *v, " is outside the vocabulary [0, ", t->n_vocab(), ")");
    return int32_t(*v);
  };
  f.bos_ = id_key("tokenizer.ggml.bos_token_id");
  f.eos_ = id_key("tokenizer.ggml.eos_token_id");
  f.pad_ = id_key("tokenizer.ggml.padding_token_id");
  f.add_bos_ = file.get_bool_opt("tokenizer.ggml.add_bos_token").value_or(false);
  f.chat_template_ = file.get_str_opt("tokenizer.chat_template").value_or("");
  TokenizerLoader::finish(*t);
  for (const char* k : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    int32_t id = id_key(k);
    if (id >= 0 && !t->is_eog(id)) f.eog_.push_back(id);
  }
  return t;
}

void Tokenizer::to_gguf(gguf::Writer& w, int32_t pad_vocab_to) const {
  if (!no_gguf_.empty())
    LMF_FAIL("tokenizer: cannot write it as llama.cpp's gpt2 GGUF tokenizer: ", no_gguf_);
  std::string pre = pre_name_.empty() ? pre_.guess_name() : pre_name_;
  if (pre.empty())
    LMF_FAIL("tokenizer: its pre-tokenizer matches none of llama.cpp's names; cannot write GGUF");
  int32_t n = std::max(n_vocab(), pad_vocab_to);
  std::vector<std::string> toks(static_cast<size_t>(n));
  std::vector<int32_t> types(size_t(n), kNormal);
  for (int32_t i = 0; i < n; ++i) {
    if (i < n_vocab() && !vocab_[size_t(i)].empty()) {
      toks[size_t(i)] = vocab_[size_t(i)];
    } else {
      toks[size_t(i)] = "[PAD" + std::to_string(i) + "]";
      types[size_t(i)] = kUnused;
    }
  }
  for (const auto& a : added_) {
    toks[size_t(a.id)] = a.content;
    types[size_t(a.id)] = a.special ? kControl : kUserDefined;
  }
  w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::str(pre));
  w.set("tokenizer.ggml.tokens", gguf::Value::strs(toks));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32s(types));
  w.set("tokenizer.ggml.merges", gguf::Value::strs(merges_text_));
  if (bos_ >= 0) w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(uint32_t(bos_)));
  if (eos_ >= 0) w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(uint32_t(eos_)));
  if (pad_ >= 0) w.set("tokenizer.ggml.padding_token_id", gguf::Value::u32(uint32_t(pad_)));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(add_bos_));
  if (!chat_template_.empty()) w.set("tokenizer.chat_template", gguf::Value::str(chat_template_));
}

}  // namespace lmf

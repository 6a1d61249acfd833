// Loads a Hugging Face tokenizer.json (+ tokenizer_config.json): BPE models, byte-level or with
// byte_fallback, and the normalizers, pre-tokenizers and decoders those use. Anything else fails
// with the name of the unsupported part, so no file loads to give ids other than HF's.
#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "tokenizer/loader.h"
#include "tokenizer/utf8.h"
#include "util/mmap.h"
#include "util/status.h"

#ifdef LMFUSE_HAVE_JSON
#include <nlohmann/json.hpp>
#endif

namespace lmf {

#ifdef LMFUSE_HAVE_JSON
namespace {
using json = nlohmann::json;

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "?";
}

[[noreturn]] void unsupported(const std::string& part, const std::string& supported) {
  LMF_FAIL("tokenizer.json: unsupported ", part, " (supported: ", supported, ")");
}

// A Replace's pattern: {"String": s}; {"Regex": r} runs on Oniguruma in HF, which we do not have.
std::string replace_pattern(const json& j, const char* where) {
  const json& p = j.at("pattern");
  if (p.contains("String")) return p["String"].get<std::string>();
  unsupported(std::string(where) + " Replace with a Regex pattern", "String patterns");
}

// tokenizer.json normalizer: null, NFC, Prepend, Replace, or a Sequence of those.
void parse_normalizer(const json& j, Normalizer& n) {
  if (j.is_null()) return;
  std::string t = type_of(j);
  using K = Normalizer::Step::Kind;
  if (t == "NFC") {
    n.add({K::Nfc, "", ""});
  } else if (t == "Prepend") {
    n.add({K::Prepend, j.at("prepend").get<std::string>(), ""});
  } else if (t == "Replace") {
    n.add({K::Replace, replace_pattern(j, "normalizer"), j.at("content").get<std::string>()});
  } else if (t == "Sequence") {
    for (const auto& s : j.at("normalizers")) parse_normalizer(s, n);
  } else {
    unsupported("normalizer '" + t + "'", "NFC, Prepend, Replace, Sequence");
  }
}

PreTokenizer::Prepend prepend_scheme(const json& j, const char* where) {
  using P = PreTokenizer::Prepend;
  std::string s = j.value("prepend_scheme", "always");
  P p = s == "always" ? P::Always : s == "first" ? P::First : s == "never" ? P::Never
        : (unsupported(std::string(where) + " Metaspace prepend_scheme '" + s + "'", "always, first, never"), P::Never);
  // Older files say add_prefix_space; HF refuses one that contradicts prepend_scheme.
  if (j.contains("add_prefix_space") && j["add_prefix_space"].get<bool>() != (p != P::Never))
    LMF_FAIL("tokenizer.json: ", where, " Metaspace add_prefix_space does not match prepend_scheme '", s, "'");
  return p;
}

std::string metaspace_replacement(const json& j) {
  std::string r = j.at("replacement").get<std::string>();
  size_t len = 0;
  if (r.empty() || (utf8::decode_at(r, 0, &len), len != r.size()))
    LMF_FAIL("tokenizer.json: Metaspace replacement '", r, "' is not one character");
  return r;
}

// Fills pre; sets *byte_level when a ByteLevel step maps the pieces to GPT-2's byte spelling
// (BPE does that mapping, so nothing may follow it).
void parse_pre(const json& j, PreTokenizer& pre, bool* byte_level, bool* metaspace_first) {
  if (j.is_null()) return;
  std::string t = type_of(j);
  if (*byte_level && t != "Sequence")
    unsupported("pre-tokenizer '" + t + "' after ByteLevel", "ByteLevel as the last step");
  if (t == "Sequence") {
    for (const auto& p : j.at("pretokenizers")) parse_pre(p, pre, byte_level, metaspace_first);
  } else if (t == "Split") {
    const json& pat = j.at("pattern");
    std::string behavior = j.value("behavior", "Isolated");
    if (behavior != "Isolated" || j.value("invert", false))
      unsupported("Split behavior '" + behavior + "'" + (j.value("invert", false) ? " with invert" : ""), "Isolated");
    if (pat.contains("Regex")) {
      pre.add_split(pat["Regex"].get<std::string>());
    } else {
      // A literal string: escape it for PCRE2 with \Q...\E.
      pre.add_split("\\Q" + pat.at("String").get<std::string>() + "\\E");
    }
  } else if (t == "Digits") {
    pre.add_split(j.value("individual_digits", false) ? pretok::kDigit : "\\p{N}+");
  } else if (t == "ByteLevel") {
    if (j.value("add_prefix_space", true)) pre.add_prefix_space();
    if (j.value("use_regex", true)) pre.add_split(pretok::kGpt2);
    *byte_level = true;
  } else if (t == "Metaspace") {
    auto p = prepend_scheme(j, "pre-tokenizer");
    *metaspace_first = *metaspace_first || p == PreTokenizer::Prepend::First;
    pre.add_metaspace(metaspace_replacement(j), p, j.value("split", true));
  } else {
    unsupported("pre-tokenizer '" + t + "'", "Sequence, Split, Digits, ByteLevel, Metaspace");
  }
}

void parse_decoder(const json& j, Decoder& d) {
  if (j.is_null()) return;
  std::string t = type_of(j);
  using K = Decoder::Step::Kind;
  if (t == "Sequence") {
    for (const auto& s : j.at("decoders")) parse_decoder(s, d);
  } else if (t == "ByteLevel") {
    d.add({K::ByteLevel});
  } else if (t == "ByteFallback") {
    d.add({K::ByteFallback});
  } else if (t == "Fuse") {
    d.add({K::Fuse});
  } else if (t == "Replace") {
    d.add({K::Replace, replace_pattern(j, "decoder"), j.at("content").get<std::string>()});
  } else if (t == "Strip") {
    Decoder::Step s{K::Strip, j.at("content").get<std::string>()};
    s.start = j.at("start").get<size_t>();
    s.stop = j.at("stop").get<size_t>();
    d.add(std::move(s));
  } else if (t == "Metaspace") {
    Decoder::Step s{K::Metaspace, metaspace_replacement(j)};
    s.strip_first = prepend_scheme(j, "decoder") != PreTokenizer::Prepend::Never;
    d.add(std::move(s));
  } else {
    unsupported("decoder '" + t + "'", "ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence");
  }
}

// One tokenizer.json "added_tokens" entry, and HF's AddedVocabulary built from them in order
// (tokenizers 0.23, TokenizerImpl's deserializer calling add_tokens / add_special_tokens): the
// "id" of an entry is not used; a content already known (an earlier added token, else the
// model's vocabulary) keeps that id, a new one gets the next id after the model's vocabulary
// (its number of entries) and the added tokens so far.
struct HfAdded {
  std::string content;
  bool special, normalized, lstrip, rstrip, single_word;
  bool operator==(const HfAdded&) const = default;
};

struct HfAddedVocab {
  std::vector<HfAdded> special_list, added_list;  // HF's special_tokens, added_tokens
  std::vector<std::string> special_set;
  std::unordered_map<std::string, int32_t> ids;    // added_tokens_map
  std::map<int32_t, HfAdded> by_id;                // added_tokens_map_r
  std::map<int32_t, bool> any_normalized;          // some token given this id is normalized
  std::unordered_map<int32_t, std::string> model_strings;  // model.vocab by id

  bool is_special(const std::string& c) const {
    return std::find(special_set.begin(), special_set.end(), c) != special_set.end();
  }
  void add(const HfAdded& t, const StrMap& model, size_t model_size) {
    if (t.special && !t.content.empty() && !is_special(t.content)) {
      special_list.push_back(t);
      special_set.push_back(t.content);
    }
    if (t.content.empty()) return;
    for (const auto& [id, v] : by_id)
      if (v == t) return;  // exactly this token again
    int32_t id;
    if (auto it = ids.find(t.content); it != ids.end()) {
      id = it->second;
    } else if (auto mt = model.find(t.content); mt != model.end()) {
      id = mt->second;
    } else if (ids.empty()) {
      id = int32_t(model_size);
    } else {
      int32_t mx = 0;
      for (const auto& [c, i] : ids) mx = std::max(mx, i);
      id = (size_t(mx) >= model_size || model_size == 0) ? mx + 1 : int32_t(model_size);
    }
    ids[t.content] = id;
    if (auto it = by_id.find(id); (it != by_id.end() && it->second.content != t.content) ||
                                  (model_strings.count(id) && model_strings.at(id) != t.content))
      LMF_FAIL("tokenizer.json: added token '", t.content, "' gets id ", id, ", which already is '",
               it != by_id.end() ? it->second.content : model_strings.at(id),
               "' (model.vocab has gaps in its ids; HF's result is then ill-defined)");
    by_id[id] = t;
    any_normalized[id] = any_normalized[id] || t.normalized;
    if (!is_special(t.content)) added_list.push_back(t);
  }
};

// bos_token etc. in tokenizer_config.json: a string, {"content": ...}, or null.
std::string token_text(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return "";
}
}  // namespace
#endif

std::unique_ptr<Tokenizer> Tokenizer::from_hf(const std::string& tokenizer_json,
                                              const std::string& tokenizer_config_json) {
#ifndef LMFUSE_HAVE_JSON
  LMF_FAIL("tokenizer.json: lmfuse was built without nlohmann json");
#else
  json j, cfg;
  try {
    j = json::parse(tokenizer_json);
    if (!tokenizer_config_json.empty()) cfg = json::parse(tokenizer_config_json);
  } catch (const json::exception& e) {
    LMF_FAIL("tokenizer.json: cannot parse: ", e.what());
  }
  auto t = TokenizerLoader::make();
  Tokenizer& f = TokenizerLoader::fields(*t);
  try {
    const json& m = j.at("model");
    std::string mt = m.value("type", "BPE");
    if (mt != "BPE") unsupported("model type '" + mt + "'", "BPE");
    auto str_or_empty = [&](const char* k) {
      return m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : std::string();
    };
    if (!str_or_empty("continuing_subword_prefix").empty() || !str_or_empty("end_of_word_suffix").empty())
      unsupported("BPE continuing_subword_prefix/end_of_word_suffix", "none");
    if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() != 0.0)
      unsupported("BPE dropout (random merges)", "null or 0");
    BpeOptions opt;
    opt.byte_fallback = m.value("byte_fallback", false);
    opt.fuse_unk = m.value("fuse_unk", false);
    opt.ignore_merges = m.value("ignore_merges", false);
    opt.unk_token = str_or_empty("unk_token");

    std::vector<std::pair<std::string, int32_t>> vocab;
    StrMap model;
    for (const auto& [tok, idj] : m.at("vocab").items()) {
      int64_t id = idj.get<int64_t>();
      if (id < 0 || id > (1 << 24)) LMF_FAIL("tokenizer.json: token id ", id, " out of range");
      vocab.emplace_back(tok, int32_t(id));
      model[tok] = int32_t(id);
    }
    std::vector<std::pair<std::string, std::string>> merges;
    const json& mj_all = m.contains("merges") ? m["merges"] : json::array();
    for (const auto& mj : mj_all) {
      if (mj.is_string()) {  // older format: "left right", exactly one space (HF's BadMerges)
        std::string s = mj.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          LMF_FAIL("tokenizer.json: merge #", merges.size(), " '", s, "' is not 'left right'");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        if (!mj.is_array() || mj.size() != 2)
          LMF_FAIL("tokenizer.json: merge #", merges.size(), " is not a pair of tokens");
        merges.emplace_back(mj.at(0).get<std::string>(), mj.at(1).get<std::string>());
      }
    }

    parse_normalizer(j.value("normalizer", json()), f.norm_);
    bool byte_level = false, metaspace_first = false;
    parse_pre(j.value("pre_tokenizer", json()), f.pre_, &byte_level, &metaspace_first);
    if (metaspace_first && f.norm_.has(Normalizer::Step::Kind::Prepend))
      unsupported("Metaspace prepend_scheme 'first' after a Prepend normalizer", "one of the two");
    opt.byte_level = byte_level;
    parse_decoder(j.value("decoder", json()), f.dec_);
    f.pre_name_ = f.pre_.only_regex() ? f.pre_.guess_name() : "";

    HfAddedVocab av;
    for (const auto& [tok, id] : vocab) av.model_strings[id] = tok;
    if (j.contains("added_tokens") && !j["added_tokens"].is_null())
      for (const auto& a : j["added_tokens"]) {
        const bool special = a.value("special", false);
        av.add({a.at("content").get<std::string>(), special, a.value("normalized", !special),
                a.value("lstrip", false), a.value("rstrip", false), a.value("single_word", false)},
               model, model.size());
      }
    // One matcher entry per pattern, HF's order (special ones first). How a content matches
    // (raw or normalized, and its flags) is decided by the last token added with it, the one
    // its id maps to, as tokenizers 0.23 does (found by the differential test).
    for (const auto* list : {&av.special_list, &av.added_list})
      for (const HfAdded& a : *list) {
        int32_t id = av.ids.at(a.content);
        const HfAdded& r = av.by_id.at(id);
        f.added_.push_back({a.content, id, av.is_special(r.content), r.normalized, r.lstrip, r.rstrip, r.single_word});
      }
    f.special_texts_ = av.special_set;
    // HF's id_to_token of an added token: its content, normalized if any token added with that
    // id is a normalized one (tokenizers 0.23; found by the differential test).
    std::vector<std::pair<int32_t, std::string>> strings;
    for (const auto& [id, a] : av.by_id)
      strings.emplace_back(id, av.any_normalized[id] && !f.norm_.empty() ? f.norm_.apply(a.content) : a.content);
    TokenizerLoader::set_vocab(*t, vocab, strings, merges, opt, "tokenizer.json");

    // What llama.cpp's gpt2 GGUF tokenizer (all to_gguf writes) would encode differently.
    if (!byte_level) f.no_gguf_ = "its BPE is not byte-level (no ByteLevel pre-tokenizer)";
    else if (f.bpe_.uses_unk_or_fallback()) f.no_gguf_ = "bytes without a token use the unk token or byte_fallback";
    else if (!f.norm_.only_nfc()) f.no_gguf_ = "its normalizer is more than NFC";
    else if (!f.dec_.is_byte_level_only()) f.no_gguf_ = "its decoder is not ByteLevel";
    else if (f.pre_name_.empty()) f.no_gguf_ = "its pre-tokenizer matches none of llama.cpp's names";

    // Special tokens by name, from tokenizer_config.json.
    auto id_of = [&](const std::string& s) { return s.empty() ? -1 : t->token_id(s); };
    if (cfg.is_object()) {
      f.bos_ = id_of(token_text(cfg, "bos_token"));
      f.eos_ = id_of(token_text(cfg, "eos_token"));
      f.pad_ = id_of(token_text(cfg, "pad_token"));
      if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
        f.add_bos_ = cfg["add_bos_token"].get<bool>();
      if (cfg.contains("chat_template")) {
        const json& ct = cfg["chat_template"];
        if (ct.is_string()) {
          f.chat_template_ = ct.get<std::string>();
        } else if (ct.is_array()) {  // named templates: take "default"
          for (const auto& e : ct)
            if (e.value("name", "") == "default") f.chat_template_ = e.value("template", "");
        }
      }
    }
    // A TemplateProcessing post-processor that starts with the BOS token adds it (Llama 3),
    // unless tokenizer_config.json said otherwise.
    if (!(cfg.is_object() && cfg.contains("add_bos_token")) && j.contains("post_processor") &&
        type_of(j["post_processor"]) == "TemplateProcessing") {
      const json& single = j["post_processor"].at("single");
      if (!single.empty() && single[0].contains("SpecialToken")) {
        int32_t id = id_of(single[0]["SpecialToken"].value("id", ""));
        if (id >= 0) {
          f.add_bos_ = true;
          if (f.bos_ < 0) f.bos_ = id;
        }
      }
    }
  } catch (const json::exception& e) {
    LMF_FAIL("tokenizer.json: unexpected structure: ", e.what());
  }
  TokenizerLoader::finish(*t);
  return t;
#endif
}

std::unique_ptr<Tokenizer> Tokenizer::from_hf_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  const std::string tok_file = dir ? path + "/tokenizer.json" : path;
  const std::string folder = dir ? path : fs::path(path).parent_path().string();
  std::string tj = read_file(tok_file);
  const std::string cfg = (folder.empty() ? std::string(".") : folder) + "/tokenizer_config.json";
  std::string cj = fs::exists(cfg) ? read_file(cfg) : std::string();
  try {
    return from_hf(tj, cj);
  } catch (const Error& e) {  // from_hf's messages start "tokenizer.json: "; name the real file
    constexpr std::string_view kPrefix = "tokenizer.json: ";
    std::string_view what = e.what();
    if (what.starts_with(kPrefix)) what.remove_prefix(kPrefix.size());
    LMF_FAIL(tok_file, ": ", what);
  }
}

}  // namespace lmf

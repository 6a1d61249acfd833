// Loads a Hugging Face tokenizer.json (+ tokenizer_config.json). Only what byte-level BPE
// tokenizers use is accepted; anything else fails with the name of the unsupported part.
#include <filesystem>

#include "tokenizer/loader.h"
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

// tokenizer.json normalizer: null, NFC, or a Sequence of those.
bool parse_normalizer(const json& j) {
  if (j.is_null()) return false;
  std::string t = type_of(j);
  if (t == "NFC") return true;
  if (t == "Sequence") {
    bool nfc = false;
    for (const auto& n : j.at("normalizers")) nfc = parse_normalizer(n) || nfc;
    return nfc;
  }
  LMF_FAIL("tokenizer.json: unsupported normalizer '", t, "' (supported: NFC)");
}

void parse_pre(const json& j, PreTokenizer& pre) {
  if (j.is_null()) return;
  std::string t = type_of(j);
  if (t == "Sequence") {
    for (const auto& p : j.at("pretokenizers")) parse_pre(p, pre);
  } else if (t == "Split") {
    const json& pat = j.at("pattern");
    std::string behavior = j.value("behavior", "Isolated");
    if (behavior != "Isolated" || j.value("invert", false))
      LMF_FAIL("tokenizer.json: unsupported Split behavior '", behavior, "' (supported: Isolated)");
    if (pat.contains("Regex")) {
      pre.add_split(pat["Regex"].get<std::string>());
    } else {
      // A literal string: escape it for PCRE2 with \Q...\E.
      pre.add_split("\\Q" + pat.at("String").get<std::string>() + "\\E");
    }
  } else if (t == "Digits") {
    if (!j.value("individual_digits", false))
      LMF_FAIL("tokenizer.json: unsupported pre-tokenizer Digits(individual_digits=false)");
    pre.add_split(pretok::kDigit);
  } else if (t == "ByteLevel") {
    if (j.value("add_prefix_space", false))
      LMF_FAIL("tokenizer.json: unsupported ByteLevel add_prefix_space=true");
    if (j.value("use_regex", true)) pre.add_split(pretok::kGpt2);
  } else {
    LMF_FAIL("tokenizer.json: unsupported pre-tokenizer '", t,
             "' (supported: Sequence, Split, Digits, ByteLevel)");
  }
}

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
    if (mt != "BPE")
      LMF_FAIL("tokenizer.json: unsupported model type '", mt, "' (only byte-level BPE)");
    if (m.value("byte_fallback", false))
      LMF_FAIL("tokenizer.json: unsupported BPE byte_fallback=true (only byte-level BPE)");
    auto str_or_empty = [&](const char* k) {
      return m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : std::string();
    };
    if (!str_or_empty("continuing_subword_prefix").empty() || !str_or_empty("end_of_word_suffix").empty())
      LMF_FAIL("tokenizer.json: unsupported BPE continuing_subword_prefix/end_of_word_suffix");
    if (!j.contains("decoder") || type_of(j["decoder"]) != "ByteLevel")
      LMF_FAIL("tokenizer.json: unsupported decoder '", j.contains("decoder") ? type_of(j["decoder"]) : "none",
               "' (only ByteLevel)");

    std::vector<std::string> spelled;
    for (const auto& [tok, idj] : m.at("vocab").items()) {
      int64_t id = idj.get<int64_t>();
      if (id < 0 || id > (1 << 24)) LMF_FAIL("tokenizer.json: token id ", id, " out of range");
      if (size_t(id) >= spelled.size()) spelled.resize(size_t(id) + 1);
      spelled[size_t(id)] = tok;
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& mj : m.at("merges")) {
      if (mj.is_string()) {  // older format: "left right"
        std::string s = mj.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos) LMF_FAIL("tokenizer.json: merge '", s, "' has no space");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        merges.emplace_back(mj.at(0).get<std::string>(), mj.at(1).get<std::string>());
      }
    }
    if (j.contains("added_tokens"))
      for (const auto& a : j["added_tokens"])
        f.added_.push_back({a.at("content").get<std::string>(), a.at("id").get<int32_t>(),
                            a.value("special", false)});
    f.nfc_ = parse_normalizer(j.value("normalizer", json()));
    parse_pre(j.value("pre_tokenizer", json()), f.pre_);
    f.pre_name_ = f.pre_.guess_name();
    TokenizerLoader::set_vocab(*t, std::move(spelled), merges, m.value("ignore_merges", false),
                               "tokenizer.json");

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

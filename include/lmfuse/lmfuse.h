// lmfuse public API: load a GGUF model on a backend, tokenize, evaluate, generate.
//
//   auto m = lmfuse::Model::open("models/smollm2-135m-instruct-q4_1.gguf");
//   std::string text = m->generate(m->apply_chat_template({{"user", "Hi!"}}), 64, {},
//                                  [](std::string_view piece) { std::fputs(...); return true; });
//
// Every failure throws lmfuse::Error with a one-line message (bad file, unsupported type,
// prompt longer than the context, token outside the vocabulary, ...).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace lmfuse {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct EngineOptions {
  std::string device = "auto";  // "cpu", "cuda" or "auto" (CUDA when built and present)
  int threads = 0;              // CPU threads, 0 = all cores
  int64_t context = 0;          // KV cache positions, 0 = min(model's, 4096)
};

struct SamplingOptions {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;
  uint64_t seed = 0;
};

struct ChatMessage {
  std::string role, content;  // "system", "user", "assistant"
};

// A model loaded on one backend, with one conversation state (its KV cache).
class Model {
 public:
  static std::unique_ptr<Model> open(const std::string& gguf_path, const EngineOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  std::vector<int32_t> tokenize(std::string_view text, bool add_bos = false) const;
  std::string detokenize(std::span<const int32_t> ids) const;
  // The model's own chat template (as transformers' apply_chat_template renders it).
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true,
                                  bool enable_thinking = true) const;

  // Evaluates tokens after everything evaluated before; returns logits [n, vocab] (the last
  // position only unless all_logits).
  std::vector<float> eval(std::span<const int32_t> tokens, bool all_logits = false);
  // Appends `prompt` (tokenized, special tokens parsed) and generates up to max_tokens, stopping
  // at end-of-generation tokens or when on_text returns false. Returns the generated text.
  // A prompt that is not valid UTF-8 throws (tokenize() instead replaces ill-formed bytes with
  // U+FFFD, as Hugging Face tokenizers do).
  std::string generate(const std::string& prompt, int64_t max_tokens, const SamplingOptions& sampling = {},
                       const std::function<bool(std::string_view)>& on_text = {});
  void reset();  // forget the conversation

  int64_t n_vocab() const;
  int64_t position() const;
  int64_t context() const;
  std::string backend() const;  // "CPU avx512, 2 threads", "CUDA NVIDIA H200"

 private:
  Model();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmfuse

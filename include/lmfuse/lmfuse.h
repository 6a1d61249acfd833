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
  int64_t context = 0;          // positions one conversation may hold, 0 = min(model's, 4096)
  // Engine only: memory for the KV cache of all its sequences, in bytes (0 = automatic: 4
  // contexts' worth within half the free memory). Model: one context.
  uint64_t kv_budget = 0;
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

// A model loaded on one backend, with one conversation state (its KV cache). (For many
// conversations over one model, see Engine below.)
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

class Sequence;

// A model loaded once, serving many conversations (Sequence) that share its weights and one
// paged KV cache. Sequences are independent: each has its own position and history; one that
// runs out of cache fails alone. Thread-compatible, not thread-safe: use an engine and its
// sequences from one thread at a time.
//
//   auto e = lmfuse::Engine::open("models/smollm2-135m-instruct-q4_1.gguf");
//   auto a = e->new_sequence(), b = e->new_sequence();
//   a->generate(e->apply_chat_template({{"user", "Hi!"}}), 32, {.temperature = 0});
//   auto c = a->fork();  // shares a's cache (copy-on-write), continues on its own
class Engine : public std::enable_shared_from_this<Engine> {
 public:
  static std::shared_ptr<Engine> open(const std::string& gguf_path, const EngineOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // A new, empty conversation. On a backend that keeps its own one-sequence cache (CUDA, for
  // now) only one may exist at a time.
  std::unique_ptr<Sequence> new_sequence();

  std::vector<int32_t> tokenize(std::string_view text, bool add_bos = false) const;
  std::string detokenize(std::span<const int32_t> ids) const;
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true,
                                  bool enable_thinking = true) const;
  int64_t n_vocab() const;
  int64_t context() const;          // positions one sequence may hold
  int64_t kv_capacity() const;      // positions the KV cache holds for all sequences together
  int64_t kv_free() const;          // of which free now
  std::string backend() const;

  struct Impl;

 private:
  Engine();
  std::shared_ptr<Impl> impl_;
  friend class Sequence;
};

// One conversation of an Engine (its KV cache position and history). Keeps its engine alive.
class Sequence {
 public:
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // As Model::eval / generate / reset, on this conversation.
  std::vector<float> eval(std::span<const int32_t> tokens, bool all_logits = false);
  std::string generate(const std::string& prompt, int64_t max_tokens, const SamplingOptions& sampling = {},
                       const std::function<bool(std::string_view)>& on_text = {});
  void reset();
  // A new conversation holding what this one holds (shares its cache pages, copy-on-write).
  std::unique_ptr<Sequence> fork() const;
  int64_t position() const;

  struct Impl;

 private:
  Sequence();
  std::unique_ptr<Impl> impl_;
  friend class Engine;
};

}  // namespace lmfuse
